// The model: hyper-parameters of the generic decoder block (runtime/models/spec.py), weight views into
// the memory-mapped GGUF file, the paged KV cache, and the forward step: one call per engine step over
// a flat batch of tokens from any number of sequences (prefill, decode and mixed alike).
#pragma once
#include <initializer_list>
#include <utility>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels.h"
#include "kv_cache.h"
#include "kv_transforms.h"
#include "model_config.h"
#include "scratch_buffer.h"
#include "thread_pool.h"

namespace lll {

// One engine step. Token t is token_ids[t] at position positions[t] of sequence seq_index[t]; its K and V
// go to KV slot slot_mapping[t], which must be block_tables[seq][pos / block_size] * block_size +
// pos % block_size. Sequence s has context_lens[s] positions after this step, all cached by the time its
// tokens attend (earlier steps wrote those not in this batch); block_tables: [n_seq][max_blocks].
struct StepBatch {
  int n_tokens = 0;
  const int32_t* token_ids = nullptr;     // [n_tokens]
  const int32_t* positions = nullptr;     // [n_tokens]
  const int32_t* slot_mapping = nullptr;  // [n_tokens]
  const int32_t* seq_index = nullptr;     // [n_tokens]
  int n_seq = 0, max_blocks = 0;
  const int32_t* block_tables = nullptr;  // [n_seq][max_blocks]
  const int32_t* context_lens = nullptr;  // [n_seq]
  int n_logits = 0;
  const int32_t* logits_rows = nullptr;   // [n_logits] rows of the batch whose logits are returned
};

class Model {
 public:
  // Checks every weight's shape against cfg (std::invalid_argument naming the tensor); 1-D weights
  // that are not F32 are dequantized once. The KV pool holds n_blocks blocks of block_size tokens.
  Model(const ModelConfig& cfg, ModelWeights weights, int n_blocks, int block_size, const KvConfig& kv,
        const KernelTable* kt, int n_threads);

  const ModelConfig& config() const { return cfg_; }
  const KvCache& kv_cache() const { return kv_; }
  const KvTransforms& kv_transforms() const { return kv_tf_; }
  int threads() const { return pool_.size(); }

  // logits: [n_logits][n_vocab]. Checks the batch (std::invalid_argument naming the array and index)
  // before touching the cache. One call at a time (a second caller waits).
  void forward(const StepBatch& b, float* logits);

 private:
  struct LayerNorms {  // float views of the 1-D weights (nullptr: absent)
    const float *attn_norm, *ffn_norm, *q_bias, *k_bias, *v_bias, *o_bias, *q_norm, *k_norm, *post_attn, *post_ffn;
  };
  const float* vector_of(const WeightView& w, int n, const char* name);
  void check(const StepBatch& b) const;
  void matmul(const WeightView& w, const float* x, int n, float* y);
  // several products of one input x [n][row_len] (q/k/v, gate/up: at most 4), each into its own y
  void matmul(std::initializer_list<std::pair<const WeightView*, float*>> products, const float* x, int n);

  ModelConfig cfg_;
  ModelWeights w_;
  const KernelTable* kt_;
  ThreadPool pool_;  // this model's thread count on the process's workers
  KvCache kv_;
  KvTransforms kv_tf_;  // set once the biases are known
  std::vector<LayerNorms> norms_;
  const float* output_norm_ = nullptr;
  const float* freq_factors_ = nullptr;
  std::vector<std::vector<float>> owned_;  // dequantized 1-D weights that were not F32
  ScratchBuffer act_;                      // the step's activations (forward)
  std::mutex mu_;
};

}  // namespace lll
