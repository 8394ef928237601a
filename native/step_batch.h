// One engine step as the native side sees it: a flat batch of tokens from any number of sequences (prefill,
// decode and mixed alike) with their KV slots and block tables.
#pragma once
#include <cstdint>

namespace lll {

// Token t is token_ids[t] at position positions[t] of sequence seq_index[t]; its K and V go to KV slot
// slot_mapping[t], which must be block_tables[seq][pos / block_size] * block_size + pos % block_size. Sequence s
// has context_lens[s] positions after this step, all cached by the time its tokens attend (earlier steps wrote
// those not in this batch); block_tables: [n_seq][max_blocks].
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

}  // namespace lll
