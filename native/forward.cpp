// The model (forward.h): its weight checks at load, the step's batch checks, and the forward step, laid out
// as runtime/models/spec.py's decoder block.
#include "forward.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "attention.h"
#include "matmul.h"
#include "ops.h"

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
             const KernelTable* kt, int n_threads)
    : cfg_(cfg),
      w_(std::move(weights)),
      kt_(kt),
      pool_(std::max(1, n_threads)),
      kv_(cfg.n_layers, n_blocks, block_size, cfg.n_kv_head, cfg.head_dim, kv.k_type, kv.v_type) {
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
  if ((int)w_.layers.size() != c.n_layers)
    throw std::invalid_argument(str((int64_t)w_.layers.size()) + " layers of weights for n_layers " + str(c.n_layers));

  const int d = c.d_model, qd = c.n_head * c.head_dim, kvd = c.n_kv_head * c.head_dim;
  check_matrix(*kt_, w_.token_embd, c.n_vocab, d, "token_embd");
  check_matrix(*kt_, w_.output, c.n_vocab, d, "output");
  output_norm_ = vector_of(w_.output_norm, d, "output_norm");
  if (w_.freq_factors.present()) freq_factors_ = vector_of(w_.freq_factors, c.n_rot / 2, "freq_factors");
  for (int i = 0; i < c.n_layers; ++i) {
    const LayerWeights& L = w_.layers[i];
    const std::string b = "blk." + str(i) + ".";
    if (L.sliding && !c.sliding_window) throw std::invalid_argument(b + ": sliding layer but sliding_window is 0");
    if (!(L.rope_base > 0.f) || !(L.rope_scale > 0.f))
      throw std::invalid_argument(b + ": rope_base and rope_scale must be positive");
    check_matrix(*kt_, L.attn_q, qd, d, b + "attn_q");
    check_matrix(*kt_, L.attn_k, kvd, d, b + "attn_k");
    check_matrix(*kt_, L.attn_v, kvd, d, b + "attn_v");
    check_matrix(*kt_, L.attn_output, d, qd, b + "attn_output");
    check_matrix(*kt_, L.ffn_gate, c.n_ff, d, b + "ffn_gate");
    check_matrix(*kt_, L.ffn_up, c.n_ff, d, b + "ffn_up");
    check_matrix(*kt_, L.ffn_down, d, c.n_ff, b + "ffn_down");
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
    if (!N.q_norm != !N.k_norm) throw std::invalid_argument(b + ": attn_q_norm and attn_k_norm must come together");
    norms_.push_back(N);
  }
  const bool all_k_bias = std::all_of(norms_.begin(), norms_.end(), [](const LayerNorms& N) { return N.k_bias; });
  const bool all_v_bias = std::all_of(norms_.begin(), norms_.end(), [](const LayerNorms& N) { return N.v_bias; });
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
}

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

void Model::matmul(const WeightView& w, const float* x, int n, float* y) {
  lll::matmul(*kt_, w.type, w.data, w.row_bytes, w.rows, w.row_len, x, n, y, pool_);
}

void Model::matmul(std::initializer_list<std::pair<const WeightView*, float*>> products, const float* x, int n) {
  MatmulJob jobs[4];
  int nj = 0, k = 0;
  for (const auto& p : products) {
    jobs[nj++] = {p.first->type, p.first->data, p.first->row_bytes, p.first->rows, p.second};
    k = p.first->row_len;  // the products of one call share x, so their row lengths agree (checked at load)
  }
  matmul_multi(*kt_, jobs, nj, k, x, n, pool_);
}

void Model::check(const StepBatch& b) const {
  const int bs = kv_.block_size(), T = b.n_tokens;
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
      if (blk < 0 || blk >= kv_.n_blocks())
        throw std::invalid_argument("block_tables[" + str(s) + ", " + str(j) + "] = " + str(blk) +
                                    " is not a block of the pool (n_blocks " + str(kv_.n_blocks()) + ")");
    }
  }
  for (int t = 0; t < T; ++t) {
    const std::string at = "[" + str(t) + "]";
    if (b.token_ids[t] < 0 || b.token_ids[t] >= cfg_.n_vocab)
      throw std::invalid_argument("token_ids" + at + " = " + str(b.token_ids[t]) +
                                  " is outside the vocabulary (n_vocab " + str(cfg_.n_vocab) + ")");
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

void Model::forward(const StepBatch& b, float* logits) {
  std::lock_guard<std::mutex> lk(mu_);
  check(b);
  const ModelConfig& c = cfg_;
  const int T = b.n_tokens, d = c.d_model, hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_kv_head * hd;
  const int half = c.n_rot / 2;
  // activations: h, a: [T][d]; q, att: [T][n_head][head_dim]; k, v: [T][n_kv_head][head_dim]; g, u: [T][n_ff],
  // carved from one scratch buffer kept across calls (every one is written before it is read)
  struct Span {
    float* p;
    size_t n;
    float* data() const { return p; }
    size_t size() const { return n; }
    float& operator[](size_t i) const { return p[i]; }
  };
  const size_t sizes[8] = {(size_t)T * d, (size_t)T * d, (size_t)T * qd, (size_t)T * qd,
                           (size_t)T * kvd, (size_t)T * kvd, (size_t)T * c.n_ff, (size_t)T * c.n_ff};
  size_t total = 0;
  for (size_t n : sizes) total += (n + 15) / 16 * 16;  // 64-byte aligned pieces
  float* cur = act_.floats(total);
  Span sp[8];
  for (int i = 0; i < 8; ++i) {
    sp[i] = {cur, sizes[i]};
    cur += (sizes[i] + 15) / 16 * 16;
  }
  const Span h = sp[0], a = sp[1], q = sp[2], att = sp[3], k = sp[4], v = sp[5], g = sp[6], u = sp[7];
  struct Trim {  // a long prompt's scratch is not kept for the decode steps after it
    ScratchBuffer& buf;
    ~Trim() {
      if (buf.bytes() > (size_t(64) << 20)) buf.release();
    }
  } trim{act_};

  const WeightView& E = w_.token_embd;
  for (int t = 0; t < T; ++t) {
    float* ht = h.data() + (size_t)t * d;
    dequantize(*kt_, E.type, E.data + (size_t)b.token_ids[t] * E.row_bytes, E.row_bytes, 1, d, ht);
    if (c.embed_scale != 1.f)
      for (int i = 0; i < d; ++i) ht[i] *= c.embed_scale;
  }

  // rope angles per distinct (base, scale): cs, sn: [T][n_rot/2]
  struct RopeTable {
    float base, scale;
    std::vector<float> cs, sn;
  };
  std::vector<RopeTable> ropes;
  std::vector<int> rope_of(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    int r = 0;
    while (r < (int)ropes.size() && !(ropes[r].base == L.rope_base && ropes[r].scale == L.rope_scale)) ++r;
    if (r == (int)ropes.size()) {
      RopeTable rt{L.rope_base, L.rope_scale, std::vector<float>((size_t)T * half),
                   std::vector<float>((size_t)T * half)};
      for (int t = 0; t < T; ++t)
        rope_angles(b.positions[t], c.n_rot, L.rope_base, L.rope_scale, freq_factors_, rt.cs.data() + (size_t)t * half,
                    rt.sn.data() + (size_t)t * half);
      ropes.push_back(std::move(rt));
    }
    rope_of[l] = r;
  }

  auto add_bias = [](float* y, const float* bias, int rows, int n) {
    if (!bias) return;
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i) y[(size_t)r * n + i] += bias[i];
  };
  // the per-row work between the products (norms, biases, RoPE, the K/V transforms and cache write, residual
  // adds): fn(t0, t1) over row ranges split across the pool for a prompt, inline for a few rows. Every row's
  // arithmetic is the same whatever the split.
  const int row_parts = T >= 64 ? 4 * pool_.size() : 1;
  // (a template, not a std::function: a decode step calls it five times a layer, inline)
  auto by_rows = [&](auto&& fn) {
    if (row_parts == 1) return (void)fn(0, T);
    pool_.run(row_parts, [&](int p, int) { fn((int)((int64_t)T * p / row_parts), (int)((int64_t)T * (p + 1) / row_parts)); });
  };
  const AttentionRows rows{T, b.positions, b.seq_index, b.block_tables, b.max_blocks};

  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    const LayerNorms& N = norms_[l];
    // a = rms_norm(h, attn_norm): for later layers it runs with the previous layer's residual add
    if (l == 0)
      by_rows([&](int t0, int t1) { rms_norm(h.data() + (size_t)t0 * d, N.attn_norm, t1 - t0, d, c.rms_eps, a.data() + (size_t)t0 * d); });
    // q, k, v = a @ attn_{q,k,v}.T (+ biases); per-head rms_norm; rope; K and V into the cache
    matmul({{&L.attn_q, q.data()}, {&L.attn_k, k.data()}, {&L.attn_v, v.data()}}, a.data(), T);
    const RopeTable& R = ropes[rope_of[l]];
    by_rows([&](int t0, int t1) {
      const int n = t1 - t0;
      float *qt = q.data() + (size_t)t0 * qd, *kt = k.data() + (size_t)t0 * kvd, *vt = v.data() + (size_t)t0 * kvd;
      add_bias(qt, N.q_bias, n, qd);
      add_bias(kt, N.k_bias, n, kvd);
      add_bias(vt, kv_tf_.v_bias(N.v_bias), n, kvd);
      if (N.q_norm) {
        rms_norm(qt, N.q_norm, n * c.n_head, hd, c.rms_eps, qt);
        rms_norm(kt, N.k_norm, n * c.n_kv_head, hd, c.rms_eps, kt);
      }
      for (int t = t0; t < t1; ++t) {
        const float* cs = R.cs.data() + (size_t)t * half;
        const float* sn = R.sn.data() + (size_t)t * half;
        rope(q.data() + (size_t)t * qd, c.n_head, hd, c.n_rot, c.neox, cs, sn);
        rope(k.data() + (size_t)t * kvd, c.n_kv_head, hd, c.n_rot, c.neox, cs, sn);
      }
      kv_tf_.to_cache(l, N.k_bias, qt, kt, vt, n);
      kv_.write(l, kt, vt, b.slot_mapping + t0, n);  // distinct slots (check): ranges write disjoint rows
    });
    // att = softmax(q k^T * attn_scale, soft-capped, masked) v over the cached positions
    const AttentionShape shape{c.n_head,      c.n_kv_head,    hd, kv_.block_size(), c.attn_scale,
                               c.attn_softcap, L.sliding ? c.sliding_window : 0};
    paged_attention(shape, rows, q.data(), kv_.k(l), kv_.v(l), att.data(), pool_);
    if (kv_tf_.changes_output())
      by_rows([&](int t0, int t1) { kv_tf_.from_cache(N.v_bias, att.data() + (size_t)t0 * qd, t1 - t0); });
    // h = h + rms_norm(att @ attn_output.T (+ bias), post_attention_norm); a = rms_norm(h, ffn_norm)
    matmul(L.attn_output, att.data(), T, a.data());
    by_rows([&](int t0, int t1) {
      const int n = t1 - t0;
      float *ht = h.data() + (size_t)t0 * d, *at = a.data() + (size_t)t0 * d;
      add_bias(at, N.o_bias, n, d);
      if (N.post_attn) rms_norm(at, N.post_attn, n, d, c.rms_eps, at);
      for (size_t i = 0; i < (size_t)n * d; ++i) ht[i] += at[i];
      rms_norm(ht, N.ffn_norm, n, d, c.rms_eps, at);
    });
    // h = h + rms_norm((act(a @ ffn_gate.T) * (a @ ffn_up.T)) @ ffn_down.T, post_ffw_norm)
    matmul({{&L.ffn_gate, g.data()}, {&L.ffn_up, u.data()}}, a.data(), T);
    {  // elementwise: split over the pool for prompts (one exp / tanh per element)
      const size_t n = g.size();
      const int parts = n >= (1u << 16) ? 4 * pool_.size() : 1;
      const bool silu = c.ffn_act == FfnAct::Silu;
      pool_.run(parts, [&](int p, int) {
        const size_t lo = n * p / parts, hi = n * (p + 1) / parts;
        if (silu) silu_mul(g.data() + lo, u.data() + lo, hi - lo);
        else gelu_tanh_mul(g.data() + lo, u.data() + lo, hi - lo);
      });
    }
    matmul(L.ffn_down, g.data(), T, a.data());
    const float* next_norm = l + 1 < c.n_layers ? norms_[l + 1].attn_norm : nullptr;
    by_rows([&](int t0, int t1) {
      const int n = t1 - t0;
      float *ht = h.data() + (size_t)t0 * d, *at = a.data() + (size_t)t0 * d;
      if (N.post_ffn) rms_norm(at, N.post_ffn, n, d, c.rms_eps, at);
      for (size_t i = 0; i < (size_t)n * d; ++i) ht[i] += at[i];
      if (next_norm) rms_norm(ht, next_norm, n, d, c.rms_eps, at);  // the next layer's input
    });
  }

  // logits = rms_norm(h, output_norm) @ output.T (soft-capped) for the rows asked for
  if (b.n_logits == 0) return;
  std::vector<float> x((size_t)b.n_logits * d);  // [n_logits][d]
  for (int i = 0; i < b.n_logits; ++i)
    rms_norm(h.data() + (size_t)b.logits_rows[i] * d, output_norm_, 1, d, c.rms_eps, x.data() + (size_t)i * d);
  matmul(w_.output, x.data(), b.n_logits, logits);
  if (c.final_softcap > 0.f) softcap(logits, (size_t)b.n_logits * c.n_vocab, c.final_softcap);
}

}  // namespace lll
