// The backend seam: a stage is one device's part of the forward step (model.h), a run of consecutive layers
// [first, last) of the model, with the token embedding before them when first == 0 and the output head after
// them when last == n_layers. Model::forward runs its stages in order, the hidden state passing from one to the
// next in host memory, so StepBatch in, logits out is the same contract whatever devices hold the layers: all on
// the CPU (one CpuStage, zero-copy over the file map), all on a GPU, or the first N layers on the GPU and the rest
// on the CPU (--gpu-layers). Each stage keeps the KV cache of its own layers, in the same paged layout (the
// block tables are the engine's, shared by every stage).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "step_batch.h"
#include "kernels.h"
#include "kv_transforms.h"
#include "model_config.h"
#include "thread_pool.h"
#include "top_k.h"

namespace lll {

// float views of a layer's 1-D weights (nullptr: absent), dequantized once at load
struct LayerNorms {
  const float *attn_norm, *ffn_norm, *q_bias, *k_bias, *v_bias, *o_bias, *q_norm, *k_norm, *post_attn, *post_ffn;
  // gpt-oss: attention sinks [n_head]; the router's bias [n_expert]; the experts' biases [n_expert][n_ff] (gate,
  // up) and [n_expert][d_model] (down). nullptr where the model has none
  const float *sinks = nullptr, *router_bias = nullptr, *gate_exps_bias = nullptr, *up_exps_bias = nullptr,
              *down_exps_bias = nullptr;
  // encoders (BERT): the LayerNorms' biases [d_model]; the feed-forward's biases [n_ff] (up) and [d_model] (down)
  const float *attn_norm_bias = nullptr, *ffn_norm_bias = nullptr, *up_bias = nullptr, *down_bias = nullptr;
};

// What every stage reads of the loaded model; owned by the Model, outliving its stages.
struct ModelParts {
  const ModelConfig& cfg;
  const ModelWeights& w;                 // views into the file map
  const std::vector<LayerNorms>& norms;  // [n_layers]
  const float* output_norm;              // [d_model]
  const float* freq_factors;             // [n_rot / 2] or nullptr
  const KvTransforms& kv_tf;
  const KernelTable* kt;
  // this forward asks for the final hidden rows instead of logits: norm(h, output_norm) of each logits row,
  // [n_logits][d_model] into the logits buffer (embeddings); only a CPU stage computes it (Model::forward checks)
  const bool& hidden;
  // encoders (BERT): output_norm's LayerNorm bias [d_model], token_types' row 0 [d_model], or nullptr
  const float* output_norm_bias = nullptr;
  const float* token_type0 = nullptr;
};

// The KV pool each stage keeps for its layers.
struct KvPoolShape {
  int n_blocks, block_size;
  KvType k_type, v_type;
};

class Stage {
 public:
  virtual ~Stage() = default;
  // b: checked by the Model. h: [T][d_model] host floats, read as the input unless the stage embeds (first == 0),
  // written as the output unless it has the head (last == n_layers). Head only: logits [n_logits][n_vocab], or
  // when top is given, its candidates of each logits row instead (logits unused).
  virtual void run(const StepBatch& b, float* h, float* logits, const TopK* top) = 0;
  // The asynchronous step (Model::launch), for a stage holding the whole model (embedding to head): submit checks
  // nothing more than run does, enqueues the step with its results (logits rows, or top's candidates: top->ids and
  // vals unused) bound for staging slot `slot` (0 or 1) of the stage's own, and returns without waiting for the
  // device; finish(slot, ...) waits for that step and copies its results out. The caller finishes a slot before
  // submitting to it again. feed: b's token ids < 0 are -1 - j for the step submitted before's candidates row j,
  // whose top candidate the device puts there (that step asked for candidates). false: this stage computes in run()
  // only (the CPU: the Model runs it there and then).
  virtual bool submit(const StepBatch& /*b*/, const TopK* /*top*/, int /*slot*/, bool /*feed*/) { return false; }
  virtual void finish(int /*slot*/, float* /*logits*/, const TopK* /*top*/) {}
  virtual size_t kv_bytes() const = 0;  // the KV pool of this stage's layers
  virtual std::string device() const = 0;  // "cpu", "cuda:0"
  // the nodes (kernels) of the CUDA graph this stage captured last, a decode-sized step's launches; -1: none
  virtual int graph_nodes() const { return -1; }
};

// layers [first, last) on the CPU over the model's thread pool (cpu_stage.cpp)
std::unique_ptr<Stage> make_cpu_stage(const ModelParts& m, int first, int last, const KvPoolShape& kv,
                                      ThreadPool& pool);
// layers [first, last) on CUDA device `device` (cuda/cuda_stage.cu); without the CUDA build, or without a device,
// a std::runtime_error saying which
std::unique_ptr<Stage> make_cuda_stage(const ModelParts& m, int first, int last, const KvPoolShape& kv, int device);

// RoPE's angles for a step, per distinct (base, scale) among layers [first, last): cs, sn [T][n_rot / 2]
// (rope_angles of ops.h, in double): computed once per step on the host, shared by a stage's layers.
struct RopeTables {
  struct Table {
    float base, scale;
    std::vector<float> cs, sn;
  };
  std::vector<Table> tables;
  std::vector<int> of_layer;  // [last - first]: the table of layer first + i

  RopeTables(const ModelParts& m, const StepBatch& b, int first, int last);
  const Table& at(int layer, int first) const { return tables[of_layer[layer - first]]; }
};

}  // namespace lll
