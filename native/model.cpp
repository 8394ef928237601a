// The model (model.h): its weight checks at load, the placement of its layers on stages (stage.h), the
// step's batch checks, and the step itself: the stages in order.
#include "model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "matmul.h"

namespace lll {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

void check_matrix(const KernelTable& kt, const WeightView& w, int rows, int row_len, const std::string& name) {
  if (!w.present()) throw std::invalid_argument(name + ": tensor missing");
  if (w.rows != rows || w.row_len != row_len)
    throw std::invalid_argument(name + ": shape [" + str(w.rows) + ", " + str(w.row_len) + "], expected [" +
                                str(rows) + ", " + str(row_len) + "]");
  const TypeInfo& ti = checked_type(kt, w.type, row_len, name);
  if (w.row_bytes < row_bytes_of(ti, row_len))
    throw std::invalid_argument(name + ": row stride " + str((int64_t)w.row_bytes) + " bytes is too small");
}

}  // namespace

Model::Model(const ModelConfig& cfg, ModelWeights weights, int n_blocks, int block_size, const KvConfig& kv,
             const KernelTable* kt, int n_threads, const std::vector<Placement>& placement)
    : cfg_(cfg),
      w_(std::move(weights)),
      kt_(kt),
      pool_(std::max(1, n_threads)),
      kv_shape_{n_blocks, block_size, kv.k_type, kv.v_type} {
  const ModelConfig& c = cfg_;
  for (int v : {c.n_vocab, c.d_model, c.n_layers, c.n_head, c.n_kv_head, c.head_dim, c.n_ff})
    if (v <= 0) throw std::invalid_argument("model dimensions must be positive");
  if (c.n_head % c.n_kv_head)
    throw std::invalid_argument("n_kv_head " + str(c.n_kv_head) + " does not divide n_head " + str(c.n_head));
  if (c.n_rot <= 0 || c.n_rot % 2 || c.n_rot > c.head_dim)
    throw std::invalid_argument("n_rot " + str(c.n_rot) + " must be even and at most head_dim " + str(c.head_dim));
  if (!(c.rms_eps > 0.f)) throw std::invalid_argument("rms_eps must be positive");
  if (c.sliding_window < 0 || c.attn_softcap < 0.f || c.final_softcap < 0.f)
    throw std::invalid_argument("sliding_window and softcaps must not be negative");
  if (c.n_expert < 0 || (c.n_expert ? c.n_expert_used < 1 || c.n_expert_used > c.n_expert : c.n_expert_used != 0))
    throw std::invalid_argument("n_expert_used " + str(c.n_expert_used) + " must be in [1, n_expert " +
                                str(c.n_expert) + "] (0 without experts)");
  if (c.yarn_ext_factor != 0.f && (c.yarn_orig_ctx <= 0 || !(c.yarn_beta_fast > 0.f) || !(c.yarn_beta_slow > 0.f)))
    throw std::invalid_argument("YaRN needs a positive yarn_orig_ctx and betas");
  if (!std::isfinite(c.mscale)) throw std::invalid_argument("mscale must be finite");
  if (c.attn_temp_scale != 0.f && c.attn_temp_floor <= 0)
    throw std::invalid_argument("attention temperature needs a positive attn_temp_floor");
  if ((int)w_.layers.size() != c.n_layers)
    throw std::invalid_argument(str((int64_t)w_.layers.size()) + " layers of weights for n_layers " + str(c.n_layers));

  const int d = c.d_model, qd = c.n_head * c.head_dim, kvd = c.n_kv_head * c.head_dim;
  check_matrix(*kt_, w_.token_embd, c.n_vocab, d, "token_embd");
  check_matrix(*kt_, w_.output, c.n_vocab, d, "output");
  output_norm_ = vector_of(w_.output_norm, d, "output_norm");
  if (w_.freq_factors.present()) freq_factors_ = vector_of(w_.freq_factors, c.n_rot / 2, "freq_factors");
  if (w_.output_norm_bias.present()) {
    if (!c.layer_norm) throw std::invalid_argument("output_norm_bias: needs layer_norm (RMSNorm has none)");
    output_norm_bias_ = vector_of(w_.output_norm_bias, d, "output_norm_bias");
  }
  if (w_.position_embd.present()) check_matrix(*kt_, w_.position_embd, w_.position_embd.rows, d, "position_embd");
  if (w_.token_types.present()) {  // row 0 alone is added (sentence A), dequantized once
    check_matrix(*kt_, w_.token_types, w_.token_types.rows, d, "token_types");
    WeightView row0 = w_.token_types;
    row0.rows = 1;
    token_type0_ = vector_of(row0, d, "token_types");
  }
  if (c.n_expert && c.ffn_act == FfnAct::Gelu) throw std::invalid_argument("ffn_act gelu (no gate) takes no experts");
  if (c.bidirectional && (c.attn_temp_scale != 0.f || c.sliding_window))
    throw std::invalid_argument("bidirectional attention takes no sliding window or attention temperature");
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = w_.layers[i];
    const std::string b = "blk." + str(i) + ".";
    if (L.sliding && !c.sliding_window) throw std::invalid_argument(b + ": sliding layer but sliding_window is 0");
    // rope_scale 0: every angle 0, rope the identity (a NoPE layer: smollm3)
    if (!(L.rope_base > 0.f) || !(L.rope_scale >= 0.f) || !std::isfinite(L.rope_scale))
      throw std::invalid_argument(b + ": rope_base must be positive and rope_scale finite and not negative");
    check_matrix(*kt_, L.attn_q, qd, d, b + "attn_q");
    check_matrix(*kt_, L.attn_k, kvd, d, b + "attn_k");
    check_matrix(*kt_, L.attn_v, kvd, d, b + "attn_v");
    check_matrix(*kt_, L.attn_output, d, qd, b + "attn_output");
    if (c.n_expert) {
      check_matrix(*kt_, L.ffn_gate_inp, c.n_expert, d, b + "ffn_gate_inp");
      check_matrix(*kt_, L.ffn_gate_exps, c.n_expert * c.n_ff, d, b + "ffn_gate_exps");
      check_matrix(*kt_, L.ffn_up_exps, c.n_expert * c.n_ff, d, b + "ffn_up_exps");
      check_matrix(*kt_, L.ffn_down_exps, c.n_expert * d, c.n_ff, b + "ffn_down_exps");
    } else {
      if (c.ffn_act != FfnAct::Gelu) check_matrix(*kt_, L.ffn_gate, c.n_ff, d, b + "ffn_gate");
      else if (L.ffn_gate.present()) throw std::invalid_argument(b + "ffn_gate: present, but ffn_act gelu has no gate");
      check_matrix(*kt_, L.ffn_up, c.n_ff, d, b + "ffn_up");
      check_matrix(*kt_, L.ffn_down, d, c.n_ff, b + "ffn_down");
    }
    auto opt = [&](const WeightView& w, int n, const char* name) {
      return w.present() ? vector_of(w, n, (b + name).c_str()) : nullptr;
    };
    LayerNorms N;
    N.attn_norm = vector_of(L.attn_norm, d, (b + "attn_norm").c_str());
    N.ffn_norm = vector_of(L.ffn_norm, d, (b + "ffn_norm").c_str());
    N.q_bias = opt(L.attn_q_bias, qd, "attn_q_bias");
    N.k_bias = opt(L.attn_k_bias, kvd, "attn_k_bias");
    N.v_bias = opt(L.attn_v_bias, kvd, "attn_v_bias");
    N.o_bias = opt(L.attn_output_bias, d, "attn_output_bias");
    N.q_norm = opt(L.attn_q_norm, c.head_dim, "attn_q_norm");
    N.k_norm = opt(L.attn_k_norm, c.head_dim, "attn_k_norm");
    N.post_attn = opt(L.post_attention_norm, d, "post_attention_norm");
    N.post_ffn = opt(L.post_ffw_norm, d, "post_ffw_norm");
    N.sinks = opt(L.attn_sinks, c.n_head, "attn_sinks");
    const int E = c.n_expert, F = c.n_ff;
    N.router_bias = opt(L.ffn_gate_inp_bias, E, "ffn_gate_inp_bias");
    N.gate_exps_bias = opt(L.ffn_gate_exps_bias, E * F, "ffn_gate_exps_bias");
    N.up_exps_bias = opt(L.ffn_up_exps_bias, E * F, "ffn_up_exps_bias");
    N.down_exps_bias = opt(L.ffn_down_exps_bias, E * d, "ffn_down_exps_bias");
    N.attn_norm_bias = opt(L.attn_norm_bias, d, "attn_norm_bias");
    N.ffn_norm_bias = opt(L.ffn_norm_bias, d, "ffn_norm_bias");
    N.up_bias = opt(L.ffn_up_bias, c.n_ff, "ffn_up_bias");
    N.down_bias = opt(L.ffn_down_bias, d, "ffn_down_bias");
    if (E && (N.up_bias || N.down_bias)) throw std::invalid_argument(b + ": dense feed-forward biases with experts");
    if (!c.layer_norm && (N.attn_norm_bias || N.ffn_norm_bias))
      throw std::invalid_argument(b + ": norm biases need layer_norm (RMSNorm has none)");
    if (!E && (N.router_bias || N.gate_exps_bias || N.up_exps_bias || N.down_exps_bias))
      throw std::invalid_argument(b + ": expert biases without experts");
    if (!N.q_norm != !N.k_norm) throw std::invalid_argument(b + ": attn_q_norm and attn_k_norm must come together");
    norms_.push_back(N);
  }
  // centering K shifts a row's scores alike and centering V needs weights summing to 1: a sink (a logit that is
  // not shifted, a weight on no value) breaks both, so a model with sinks stores K and V uncentered
  const bool sinks = std::any_of(norms_.begin(), norms_.end(), [](const LayerNorms& N) { return N.sinks; });
  const bool all_k_bias =
      !sinks && std::all_of(norms_.begin(), norms_.end(), [](const LayerNorms& N) { return N.k_bias; });
  const bool all_v_bias =
      !sinks && std::all_of(norms_.begin(), norms_.end(), [](const LayerNorms& N) { return N.v_bias; });
  kv_tf_ = KvTransforms(c, kv, all_k_bias, all_v_bias);
  if (kv.equalize && kv.k_type != KvType::F16) {
    std::vector<std::vector<float>> s;
    for (int l = 0; l < c.n_layers; ++l) {
      const LayerNorms& N = norms_[l];
      s.push_back(equalizing_k_scales(*kt_, c, w_.layers[l].attn_k, w_.layers[l].attn_q, N.attn_norm,
                                      kv_tf_.center_k() ? nullptr : N.k_bias, N.q_bias, N.k_norm, N.q_norm));
    }
    kv_tf_.set_k_scales(std::move(s));
  }
  parts_.reset(new ModelParts{cfg_, w_, norms_, output_norm_, freq_factors_, kv_tf_, kt_, hidden_, output_norm_bias_,
                              token_type0_});
  place(placement.empty() ? std::vector<Placement>{{"cpu", c.n_layers}} : placement);
}

// what of this model only the CPU stage computes (spec.py's ModelSpec.cpu_only), or nullptr
const char* Model::cpu_only() const {
  if (cfg_.n_expert) return "mixture-of-experts layers";
  if (cfg_.attn_temp_scale != 0.f) return "attention temperature";
  if (cfg_.ffn_act == FfnAct::SwigluOai) return "the clamped SwiGLU (swiglu_oai)";
  for (const LayerNorms& N : norms_)
    if (N.sinks) return "attention sinks";
  if (cfg_.bidirectional || cfg_.layer_norm || cfg_.post_norm || cfg_.ffn_act == FfnAct::Gelu ||
      w_.position_embd.present() || w_.token_types.present())
    return "encoder layers";
  for (const LayerNorms& N : norms_)
    if (N.up_bias || N.down_bias) return "feed-forward biases";
  return nullptr;
}

void Model::place(const std::vector<Placement>& placement) {
  int first = 0;
  for (const Placement& p : placement) {
    if (p.last <= first || p.last > cfg_.n_layers)
      throw std::invalid_argument("placement: stage on " + p.device + " ends at layer " + str(p.last) +
                                  ", not in (" + str(first) + ", " + str(cfg_.n_layers) + "]");
    if (p.device == "cpu") stages_.push_back(make_cpu_stage(*parts_, first, p.last, kv_shape_, pool_));
    else if (p.device == "cuda" && cpu_only())
      throw std::invalid_argument(std::string("placement: ") + cpu_only() + " run on the CPU only (not on cuda)");
    else if (p.device == "cuda") stages_.push_back(make_cuda_stage(*parts_, first, p.last, kv_shape_, 0));
    else throw std::invalid_argument("placement: unknown device '" + p.device + "' (cpu, cuda)");
    stage_info_.push_back({stages_.back()->device(), first, p.last});
    first = p.last;
  }
  if (first != cfg_.n_layers)
    throw std::invalid_argument("placement: the stages end at layer " + str(first) + ", not at n_layers " +
                                str(cfg_.n_layers));
}

size_t Model::kv_bytes() const {
  size_t n = 0;
  for (const auto& s : stages_) n += s->kv_bytes();
  return n;
}

std::vector<Model::StageInfo> Model::stages() const { return stage_info_; }

std::vector<int> Model::graph_nodes() const {
  std::vector<int> n;
  for (const auto& s : stages_) n.push_back(s->graph_nodes());
  return n;
}

void Model::forward(const StepBatch& b, float* logits, const TopK* top, bool hidden) {
  std::lock_guard<std::mutex> lk(mu_);
  forward_locked(b, logits, top, hidden);
}

void Model::check_top(const TopK* top) const {
  if (top && (top->n_valid < 1 || top->n_valid > cfg_.n_vocab || top->k < 1 ||
              top->k > std::min(top->n_valid, TOP_K_MAX)))
    throw std::invalid_argument("top_k " + str(top->k) + " must be in [1, min(n_valid, " + str(TOP_K_MAX) +
                                ")] and n_valid " + str(top->n_valid) + " in [1, n_vocab " + str(cfg_.n_vocab) + "]");
}

Model::Launched Model::launch(const StepBatch& b, const TopK* top, bool feed) {
  std::lock_guard<std::mutex> lk(mu_);
  if (launched_.size() >= (size_t)MAX_LAUNCHED)
    throw std::logic_error("Model::launch: " + str(MAX_LAUNCHED) + " steps are launched and not collected");
  if (feed && last_rows_ < 0)
    throw std::invalid_argument("Model::launch: tokens fed from a step that asked for no candidates");
  check(b, feed ? last_rows_ : 0);
  check_top(top);
  InFlight f;
  f.shape = {b.n_logits, top ? top->k : 0};
  f.slot = -1;
  if (stages_.size() == 1 && stages_[0]->submit(b, top, next_slot_, feed)) {
    f.slot = next_slot_;
    next_slot_ ^= 1;
    last_rows_ = top ? b.n_logits : -1;
    launched_.push_back(std::move(f));
    return launched_.back().shape;
  }
  std::vector<int32_t> fed;
  StepBatch at = b;
  if (feed) {  // computed here: the top candidates were kept on this side
    fed.assign(b.token_ids, b.token_ids + b.n_tokens);
    for (int32_t& id : fed)
      if (id < 0) id = last_top_[-id - 1];
    at.token_ids = fed.data();
  }
  TopK into;
  if (top) {
    into = *top;
    f.ids.resize((size_t)b.n_logits * top->k);
    f.vals.resize((size_t)b.n_logits * top->k);
    into.ids = f.ids.data();
    into.vals = f.vals.data();
  } else {
    f.logits.resize((size_t)b.n_logits * cfg_.n_vocab);
  }
  forward_locked(at, f.logits.data(), top ? &into : nullptr, false);
  launched_.push_back(std::move(f));
  return launched_.back().shape;
}

Model::Launched Model::next_collected() const {
  if (launched_.empty()) throw std::logic_error("Model::collect: no step is launched");
  return launched_.front().shape;
}

void Model::collect(float* logits, const TopK* top) {
  std::lock_guard<std::mutex> lk(mu_);
  if (launched_.empty()) throw std::logic_error("Model::collect: no step is launched");
  const int k = launched_.front().shape.k;
  if ((k > 0) != (top != nullptr) || (top && top->k != k))
    throw std::invalid_argument("Model::collect: the step was launched with top_k " + str(k));
  InFlight f = std::move(launched_.front());
  launched_.erase(launched_.begin());
  if (f.slot >= 0) {
    stages_[0]->finish(f.slot, logits, top);
  } else if (top) {
    std::copy(f.ids.begin(), f.ids.end(), top->ids);
    std::copy(f.vals.begin(), f.vals.end(), top->vals);
  } else {
    std::copy(f.logits.begin(), f.logits.end(), logits);
  }
}

void Model::forward_locked(const StepBatch& b, float* logits, const TopK* top, bool hidden) {
  check(b);
  if (cfg_.bidirectional && !hidden && b.n_logits)
    throw std::invalid_argument("an encoder (bidirectional attention) has no language-model head: it gives hidden "
                                "states (embeddings) only");
  if (hidden && (top || stage_info_.back().device != "cpu"))
    throw std::invalid_argument("hidden states (embeddings) come from a model whose last stage runs on the CPU, "
                                "without top_k");
  struct Ask {
    bool& flag;
    ~Ask() { flag = false; }
  } ask{hidden_};
  hidden_ = hidden;
  check_top(top);
  if (stages_.size() > 1) h_.resize((size_t)b.n_tokens * cfg_.d_model);
  last_rows_ = -1;
  for (const auto& s : stages_) s->run(b, h_.data(), logits, top);
  if (top) {  // each row's top candidate, for a step fed from this one
    last_top_.resize(b.n_logits);
    for (int i = 0; i < b.n_logits; ++i) last_top_[i] = top->ids[(size_t)i * top->k];
    last_rows_ = b.n_logits;
  }
  if (h_.size() > (size_t(16) << 20)) std::vector<float>().swap(h_);  // a long prompt's is not kept
}

#ifndef LLL_CUDA
std::unique_ptr<Stage> make_cuda_stage(const ModelParts&, int, int, const KvPoolShape&, int) {
  throw std::runtime_error("the CUDA backend is not compiled in (built without nvcc or with LOCALLLM_CUDA=OFF)");
}
#endif

const float* Model::vector_of(const WeightView& w, int n, const char* name) {
  if (!w.present()) throw std::invalid_argument(std::string(name) + ": tensor missing");
  if ((int64_t)w.rows * w.row_len != n)
    throw std::invalid_argument(std::string(name) + ": " + str((int64_t)w.rows * w.row_len) + " elements, expected " +
                                str(n));
  if (w.type == (int)QType::F32 && w.rows == 1) return (const float*)w.data;
  check_matrix(*kt_, w, w.rows, w.row_len, name);
  owned_.emplace_back((size_t)n);
  dequantize(*kt_, w.type, w.data, w.row_bytes, w.rows, w.row_len, owned_.back().data());
  return owned_.back().data();
}

void Model::check(const StepBatch& b, int fed_rows) const {
  const int bs = kv_shape_.block_size, T = b.n_tokens;
  if (T <= 0) throw std::invalid_argument("a step needs at least one token");
  if (b.n_seq <= 0 || b.max_blocks <= 0)
    throw std::invalid_argument("block_tables must be [n_seq >= 1, max_blocks >= 1]");
  if (b.n_logits < 0) throw std::invalid_argument("logits_rows: negative length");
  for (int s = 0; s < b.n_seq; ++s) {
    const int ctx = b.context_lens[s];
    if (ctx < 0 || (int64_t)ctx > (int64_t)b.max_blocks * bs)
      throw std::invalid_argument("context_lens[" + str(s) + "] = " + str(ctx) + " is outside [0, " +
                                  str((int64_t)b.max_blocks * bs) + "] (max_blocks * block_size)");
    for (int j = 0; j < (ctx + bs - 1) / bs; ++j) {
      const int blk = b.block_tables[(size_t)s * b.max_blocks + j];
      if (blk < 0 || blk >= kv_shape_.n_blocks)
        throw std::invalid_argument("block_tables[" + str(s) + ", " + str(j) + "] = " + str(blk) +
                                    " is not a block of the pool (n_blocks " + str(kv_shape_.n_blocks) + ")");
    }
  }
  for (int t = 0; t < T; ++t) {
    const std::string at = "[" + str(t) + "]";
    if (b.token_ids[t] < -fed_rows || b.token_ids[t] >= cfg_.n_vocab)
      throw std::invalid_argument("token_ids" + at + " = " + str(b.token_ids[t]) +
                                  " is outside the vocabulary (n_vocab " + str(cfg_.n_vocab) + ")" +
                                  (fed_rows ? " and the " + str(fed_rows) + " rows fed from the step before" : ""));
    const int s = b.seq_index[t];
    if (s < 0 || s >= b.n_seq)
      throw std::invalid_argument("seq_index" + at + " = " + str(s) + " is outside [0, " + str(b.n_seq) + ")");
    const int p = b.positions[t];
    if (p < 0 || p >= b.context_lens[s])
      throw std::invalid_argument("positions" + at + " = " + str(p) + " is outside [0, context_lens[" + str(s) +
                                  "] = " + str(b.context_lens[s]) + ")");
    const int64_t slot = (int64_t)b.block_tables[(size_t)s * b.max_blocks + p / bs] * bs + p % bs;
    if (b.slot_mapping[t] != slot)
      throw std::invalid_argument("slot_mapping" + at + " = " + str(b.slot_mapping[t]) +
                                  ", but block_tables puts position " + str(p) + " of sequence " + str(s) +
                                  " at slot " + str(slot));
  }
  if (w_.position_embd.present())
    for (int t = 0; t < T; ++t)
      if (b.positions[t] >= w_.position_embd.rows)
        throw std::invalid_argument("positions[" + str(t) + "] = " + str(b.positions[t]) +
                                    " is past the model's learned positions (position_embd has " +
                                    str(w_.position_embd.rows) + ")");
  if (cfg_.bidirectional) {  // each sequence whole: its tokens are positions [0, context_lens[s]), all in this step
    std::vector<int> count(b.n_seq, 0);
    for (int t = 0; t < T; ++t) ++count[b.seq_index[t]];
    for (int s = 0; s < b.n_seq; ++s)
      if (count[s] && count[s] != b.context_lens[s])
        throw std::invalid_argument("bidirectional attention (an encoder): sequence " + str(s) + " has " +
                                    str(count[s]) + " of its " + str(b.context_lens[s]) +
                                    " positions in this step; an encoder computes a sequence whole, in one step "
                                    "(no chunked prefill, no decoding)");
  }
  std::vector<int32_t> slots(b.slot_mapping, b.slot_mapping + T);
  std::sort(slots.begin(), slots.end());
  const auto dup = std::adjacent_find(slots.begin(), slots.end());
  if (dup != slots.end())
    throw std::invalid_argument("slot_mapping: slot " + str(*dup) + " is written twice in one step");
  for (int i = 0; i < b.n_logits; ++i)
    if (b.logits_rows[i] < 0 || b.logits_rows[i] >= T)
      throw std::invalid_argument("logits_rows[" + str(i) + "] = " + str(b.logits_rows[i]) + " is outside [0, " +
                                  str(T) + ")");
}


}  // namespace lll
