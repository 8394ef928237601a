// The model: hyper-parameters of the generic decoder block (runtime/model/architectures/spec.py), weight views into
// the memory-mapped GGUF file, and the forward step: one call per engine step (step_batch.h), run by the model's
// stages (stage.h), each one device's run of layers with the paged KV cache of those layers.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels.h"
#include "kv_transforms.h"
#include "model_config.h"
#include "stage.h"
#include "step_batch.h"
#include "thread_pool.h"

namespace lll {

class Model {
 public:
  // Where the layers run: stage i holds layers [previous stage's last, last) on `device`; the lasts increase
  // and the final one is n_layers.
  struct Placement {
    std::string device;  // "cpu" or "cuda" (device 0)
    int last;
  };

  // Checks every weight's shape against cfg (std::invalid_argument naming the tensor); 1-D weights
  // that are not F32 are dequantized once. Each stage's KV pool holds n_blocks blocks of block_size tokens.
  // placement: empty puts every layer on the CPU; an unknown device or a bad split is std::invalid_argument, a
  // CUDA stage without the build or the device std::runtime_error (make_cuda_stage).
  Model(const ModelConfig& cfg, ModelWeights weights, int n_blocks, int block_size, const KvConfig& kv,
        const KernelTable* kt, int n_threads, const std::vector<Placement>& placement = {});

  const ModelConfig& config() const { return cfg_; }
  const KvTransforms& kv_transforms() const { return kv_tf_; }
  int threads() const { return pool_.size(); }
  const KernelTable* kernels() const { return kt_; }  // the CPU stages' kernel path
  const KvPoolShape& kv_pool() const { return kv_shape_; }
  size_t kv_bytes() const;  // over every stage
  // the stages' devices and layer ranges, e.g. [("cuda:0", 0, 16), ("cpu", 16, 24)]
  struct StageInfo {
    std::string device;
    int first, last;
  };
  std::vector<StageInfo> stages() const;
  std::vector<int> graph_nodes() const;  // per stage (Stage::graph_nodes)

  // logits: [n_logits][n_vocab], or with top the candidates of each logits row (top_k.h) and logits unused.
  // Checks the batch and top (std::invalid_argument naming the array and index) before touching the cache. One
  // call at a time (a second caller waits).
  // hidden: logits receives [n_logits][d_model], each logits row's final hidden state (after output_norm) instead
  // (embeddings; the last stage must be a CPU one).
  void forward(const StepBatch& b, float* logits, const TopK* top = nullptr, bool hidden = false);

  // The step without waiting for it (the engine's pipelining: the host prepares the next step while the device
  // computes this one). launch checks b and top (top->ids and vals unused) as forward does and enqueues the step
  // where one stage holds the whole model and can (a GPU: Stage::submit), or computes it now (the CPU). Returns its
  // shape; collect() waits for the oldest launched step and writes its results as forward would. At most
  // MAX_LAUNCHED steps are launched and not collected (std::logic_error past that, or collecting none).
  static constexpr int MAX_LAUNCHED = 2;
  struct Launched {
    int n_logits = 0, k = 0;  // logits rows; candidates a row (0: whole rows of n_vocab)
  };
  // feed: b's token ids < 0 are -1 - j: the top candidate of row j of the step run before this one (forward or
  // launch, on this model), which must have asked for candidates (the engine's greedy rows: their next token)
  Launched launch(const StepBatch& b, const TopK* top = nullptr, bool feed = false);
  Launched next_collected() const;  // the shape collect() writes next
  void collect(float* logits, const TopK* top = nullptr);

 private:
  const float* vector_of(const WeightView& w, int n, const char* name);
  void place(const std::vector<Placement>& placement);
  const char* cpu_only() const;
  void check(const StepBatch& b, int fed_rows = 0) const;  // token ids from -fed_rows on (fed: launch)

  ModelConfig cfg_;
  ModelWeights w_;
  const KernelTable* kt_;
  ThreadPool pool_;  // this model's thread count on the process's workers
  KvPoolShape kv_shape_;
  KvTransforms kv_tf_;  // set once the biases are known
  std::vector<LayerNorms> norms_;
  const float* output_norm_ = nullptr;
  const float* freq_factors_ = nullptr;
  const float* output_norm_bias_ = nullptr;  // encoders' LayerNorm
  const float* token_type0_ = nullptr;       // token_types' row 0
  std::vector<std::vector<float>> owned_;  // dequantized 1-D weights that were not F32
  std::unique_ptr<ModelParts> parts_;      // what the stages read of the above
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<StageInfo> stage_info_;
  void forward_locked(const StepBatch& b, float* logits, const TopK* top, bool hidden);
  void check_top(const TopK* top) const;
  struct InFlight {
    Launched shape;
    int slot;                        // the stage's staging slot, -1: computed at launch into the vectors below
    std::vector<float> logits, vals;  // [n_logits][n_vocab] or [n_logits][k]
    std::vector<int32_t> ids;
  };
  std::vector<InFlight> launched_;  // in launch order, at most MAX_LAUNCHED
  int last_rows_ = -1;               // candidates rows of the last step run (-1: it asked for none)
  std::vector<int32_t> last_top_;    // their top candidates, where the step was computed on the host's side
  int next_slot_ = 0;

  std::vector<float> h_;  // [T][d_model]: the hidden state between stages
  bool hidden_ = false;   // this forward's ask (ModelParts::hidden)
  std::mutex mu_;
};

}  // namespace lll
