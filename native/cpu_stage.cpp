// The CPU stage (stage.h): layers [first, last) of the decoder block on the CPU, laid out as
// runtime/model/architectures/spec.py's block, over the weights as they lie in the file map and the model's thread pool, with
// the KV cache of those layers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>

#include "attention.h"
#include "kv_cache.h"
#include "matmul.h"
#include "ops.h"
#include "repack.h"
#include "scratch_buffer.h"
#include "stage.h"

namespace lll {

namespace {

class CpuStage final : public Stage {
 public:
  CpuStage(const ModelParts& m, int first, int last, const KvPoolShape& kv, ThreadPool& pool)
      : m_(m),
        first_(first),
        last_(last),
        pool_(pool),
        kv_(last - first, kv.n_blocks, kv.block_size, m.cfg.n_kv_head, m.cfg.head_dim, kv.k_type, kv.v_type) {
    // the stage's matrices as its kernel path wants them (repack.h); the other weights stay views of the map
    const KernelTable& kt = *m.kt;
    for (int l = first; l < last; ++l) {
      LayerWeights L = m.w.layers[l];
      // the experts' stacks too: an expert's rows stay a contiguous slice, since a layout never crosses rows
      for (WeightView* w : {&L.attn_q, &L.attn_k, &L.attn_v, &L.attn_output, &L.ffn_gate, &L.ffn_up, &L.ffn_down,
                            &L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_down_exps})
        *w = repacked_.view(kt, *w, &pool);
      layers_.push_back(L);
    }
    // the head (the embedding lookup keeps reading token_embd as it lies, even where output views it)
    if (last == m.cfg.n_layers && !m.cfg.bidirectional) output_ = repacked_.view(kt, m.w.output, &pool);  // encoders: none
  }

  void run(const StepBatch& b, float* h_io, float* logits, const TopK* top) override;
  size_t kv_bytes() const override { return kv_.bytes(); }
  std::string device() const override { return "cpu"; }

 private:
  void matmul(const WeightView& w, const float* x, int n, float* y) {
    lll::matmul(*m_.kt, w.type, w.data, w.row_bytes, w.rows, w.row_len, x, n, y, pool_);
  }
  // several products of one input x [n][row_len] (q/k/v, gate/up: at most 4), each into its own y
  void matmul(std::initializer_list<std::pair<const WeightView*, float*>> products, const float* x, int n) {
    MatmulJob jobs[4];
    int nj = 0, k = 0;
    for (const auto& p : products) {
      jobs[nj++] = {p.first->type, p.first->data, p.first->row_bytes, p.first->rows, p.second};
      k = p.first->row_len;  // the products of one call share x, so their row lengths agree (checked at load)
    }
    matmul_multi(*m_.kt, jobs, nj, k, x, n, pool_);
  }

  void moe_ffn(const LayerWeights& L, const LayerNorms& N, float* a, int T);

  const ModelParts& m_;
  const int first_, last_;
  ThreadPool& pool_;
  RepackedWeights repacked_;         // owns the repacked matrices layers_ and output_ view
  std::vector<LayerWeights> layers_;  // layers [first, last) (l at l - first): m_.w.layers, matrices repacked
  WeightView output_;                 // the head, where the stage is the last
  KvCache kv_;           // layers [first, last): layer l at l - first
  ScratchBuffer act_;    // the step's activations
};

void CpuStage::run(const StepBatch& b, float* h_io, float* logits, const TopK* top) {
  const ModelConfig& c = m_.cfg;
  const KernelTable* kt_ = m_.kt;
  const KvTransforms& kv_tf_ = m_.kv_tf;
  const std::vector<LayerNorms>& norms_ = m_.norms;
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

  if (first_ == 0) {
    // h = token_embd[id] * embed_scale (+ token_types[0]) (+ position_embd[pos])
    const WeightView &E = m_.w.token_embd, &P = m_.w.position_embd;
    std::vector<float> prow(P.present() ? d : 0);
    for (int t = 0; t < T; ++t) {
      float* ht = h.data() + (size_t)t * d;
      dequantize(*kt_, E.type, E.data + (size_t)b.token_ids[t] * E.row_bytes, E.row_bytes, 1, d, ht);
      if (c.embed_scale != 1.f)
        for (int i = 0; i < d; ++i) ht[i] *= c.embed_scale;
      if (m_.token_type0)
        for (int i = 0; i < d; ++i) ht[i] += m_.token_type0[i];
      if (P.present()) {
        dequantize(*kt_, P.type, P.data + (size_t)b.positions[t] * P.row_bytes, P.row_bytes, 1, d, prow.data());
        for (int i = 0; i < d; ++i) ht[i] += prow[i];
      }
    }
  } else {
    std::memcpy(h.data(), h_io, sizeof(float) * T * d);
  }

  const RopeTables ropes(m_, b, first_, last_);

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
  const AttentionRows rows{T, b.positions, b.seq_index, b.block_tables, b.max_blocks,
                          c.bidirectional ? b.context_lens : nullptr};
  // out = norm(x, w (+ bias)) over n rows: RMSNorm, or LayerNorm (ModelConfig::layer_norm); out may be x
  auto norm = [&](const float* x, const float* w, const float* bias, int n, float* out) {
    if (c.layer_norm) layer_norm(x, w, bias, n, d, c.rms_eps, out);
    else rms_norm(x, w, n, d, c.rms_eps, out);
  };
  // a = norm(h) for rows [t0, t0 + n); post-norm: h = a too (the normed value is the residual stream)
  auto norm_input = [&](float* ht, const float* w, const float* bias, int n, float* at) {
    norm(ht, w, bias, n, at);
    if (c.post_norm) std::memcpy(ht, at, sizeof(float) * n * d);
  };

  for (int l = first_; l < last_; ++l) {
    const LayerWeights& L = layers_[l - first_];
    const LayerNorms& N = norms_[l];
    // a = norm(h, attn_norm): for later layers of the stage it runs with the previous layer's residual add
    if (l == first_)
      by_rows([&](int t0, int t1) {
        norm_input(h.data() + (size_t)t0 * d, N.attn_norm, N.attn_norm_bias, t1 - t0, a.data() + (size_t)t0 * d);
      });
    // q, k, v = a @ attn_{q,k,v}.T (+ biases); per-head rms_norm; rope; K and V into the cache
    matmul({{&L.attn_q, q.data()}, {&L.attn_k, k.data()}, {&L.attn_v, v.data()}}, a.data(), T);
    const RopeTables::Table& R = ropes.at(l, first_);
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
        if (c.attn_temp_scale != 0.f) {  // as llama.cpp's llm_graph_input_attn_temp, in double then float
          const float f = (float)(std::log(std::floor((double)b.positions[t] / c.attn_temp_floor) + 1.0) *
                                      c.attn_temp_scale + 1.0);
          float* qt = q.data() + (size_t)t * qd;
          for (int i = 0; i < qd; ++i) qt[i] *= f;
        }
      }
      kv_tf_.to_cache(l, N.k_bias, qt, kt, vt, n);
      kv_.write(l - first_, kt, vt, b.slot_mapping + t0, n);  // distinct slots (check): ranges write disjoint rows
    });
    // att = softmax(q k^T * attn_scale, soft-capped, masked) v over the cached positions
    const AttentionShape shape{c.n_head,       c.n_kv_head,    hd, kv_.block_size(), c.attn_scale,
                               c.attn_softcap, L.sliding ? c.sliding_window : 0, N.sinks};
    paged_attention(shape, rows, q.data(), kv_.k(l - first_), kv_.v(l - first_), att.data(), pool_);
    if (kv_tf_.changes_output())
      by_rows([&](int t0, int t1) { kv_tf_.from_cache(N.v_bias, att.data() + (size_t)t0 * qd, t1 - t0); });
    // h = h + norm(att @ attn_output.T (+ bias), post_attention_norm); a = norm(h, ffn_norm)
    matmul(L.attn_output, att.data(), T, a.data());
    by_rows([&](int t0, int t1) {
      const int n = t1 - t0;
      float *ht = h.data() + (size_t)t0 * d, *at = a.data() + (size_t)t0 * d;
      add_bias(at, N.o_bias, n, d);
      if (N.post_attn) norm(at, N.post_attn, nullptr, n, at);
      for (size_t i = 0; i < (size_t)n * d; ++i) ht[i] += at[i];
      norm_input(ht, N.ffn_norm, N.ffn_norm_bias, n, at);
    });
    // h = h + norm((act(a @ ffn_gate.T) * (a @ ffn_up.T)) @ ffn_down.T, post_ffw_norm), or the experts' sum;
    // gelu (no gate): act(a @ ffn_up.T + ffn_up_bias) @ ffn_down.T + ffn_down_bias
    if (c.n_expert) moe_ffn(L, N, a.data(), T);
    else {
    const bool gated = c.ffn_act != FfnAct::Gelu;
    if (gated) matmul({{&L.ffn_gate, g.data()}, {&L.ffn_up, u.data()}}, a.data(), T);
    else matmul(L.ffn_up, a.data(), T, g.data());
    if (N.up_bias)
      by_rows([&](int t0, int t1) {
        add_bias((gated ? u.data() : g.data()) + (size_t)t0 * c.n_ff, N.up_bias, t1 - t0, c.n_ff);
      });
    {  // elementwise: split over the pool for prompts (one exp / tanh per element)
      const size_t n = g.size();
      const int parts = n >= (1u << 16) ? 4 * pool_.size() : 1;
      pool_.run(parts, [&](int p, int) {
        const size_t lo = n * p / parts, hi = n * (p + 1) / parts;
        ffn_act_mul(c.ffn_act, g.data() + lo, u.data() + lo, hi - lo);
      });
    }
    matmul(L.ffn_down, g.data(), T, a.data());
    }
    const LayerNorms* next = l + 1 < last_ ? &norms_[l + 1] : nullptr;
    by_rows([&](int t0, int t1) {
      const int n = t1 - t0;
      float *ht = h.data() + (size_t)t0 * d, *at = a.data() + (size_t)t0 * d;
      add_bias(at, N.down_bias, n, d);
      if (N.post_ffn) norm(at, N.post_ffn, nullptr, n, at);
      for (size_t i = 0; i < (size_t)n * d; ++i) ht[i] += at[i];
      if (next) norm_input(ht, next->attn_norm, next->attn_norm_bias, n, at);  // the next layer's input
    });
  }

  if (last_ < c.n_layers) {
    std::memcpy(h_io, h.data(), sizeof(float) * T * d);
    return;
  }
  // logits = norm(h, output_norm) @ output.T (soft-capped) for the rows asked for
  if (b.n_logits == 0) return;
  std::vector<float> x((size_t)b.n_logits * d);  // [n_logits][d]
  for (int i = 0; i < b.n_logits; ++i)
    norm(h.data() + (size_t)b.logits_rows[i] * d, m_.output_norm, m_.output_norm_bias, 1, x.data() + (size_t)i * d);
  if (m_.hidden) {  // embeddings: the normed rows themselves
    std::memcpy(logits, x.data(), sizeof(float) * x.size());
    return;
  }
  std::vector<float> full(top ? (size_t)b.n_logits * c.n_vocab : 0);
  float* y = top ? full.data() : logits;
  matmul(output_, x.data(), b.n_logits, y);
  if (c.final_softcap > 0.f) softcap(y, (size_t)b.n_logits * c.n_vocab, c.final_softcap);
  if (top)
    for (int i = 0; i < b.n_logits; ++i)
      top_k_row(y + (size_t)i * c.n_vocab, top->n_valid, top->k, top->ids + (size_t)i * top->k,
                top->vals + (size_t)i * top->k);
}

// The mixture of experts (spec.py): a [T][d] the normed input -> a [T][d] the weighted sum of each token's chosen
// experts. A token's result is its own alone: the router's product and every expert's products are row-invariant
// (kernels.h), its softmax, choice and sum run per token in a fixed order (experts in the order chosen), so it does
// not depend on which other tokens the step carries or which experts they chose. The tokens are grouped by expert,
// so a step reads each chosen expert's weights once (a decoded token reads only its n_expert_used experts').
void CpuStage::moe_ffn(const LayerWeights& L, const LayerNorms& N, float* a, int T) {
  const ModelConfig& c = m_.cfg;
  const int d = c.d_model, E = c.n_expert, K = c.n_expert_used, F = c.n_ff;
  std::vector<float> p((size_t)T * E);
  matmul(L.ffn_gate_inp, a, T, p.data());
  std::vector<int> chosen((size_t)T * K);  // [T][K] expert ids, most probable first (ties: the lower id)
  std::vector<float> weight((size_t)T * K);
  for (int t = 0; t < T; ++t) {
    float* pt = p.data() + (size_t)t * E;
    if (N.router_bias)
      for (int e = 0; e < E; ++e) pt[e] += N.router_bias[e];
    if (c.expert_weights_softmax) {  // gpt-oss: the K largest logits, their softmax the weights
      int* ct = chosen.data() + (size_t)t * K;
      float* wt = weight.data() + (size_t)t * K;
      for (int j = 0; j < K; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e)
          if (std::find(ct, ct + j, e) == ct + j && (best < 0 || pt[e] > pt[best])) best = e;
        ct[j] = best;
      }
      float sum = 0.f;
      for (int j = 0; j < K; ++j) sum += (wt[j] = std::exp(pt[ct[j]] - pt[ct[0]]));
      for (int j = 0; j < K; ++j) wt[j] /= sum;
      continue;
    }
    float mx = pt[0];
    for (int e = 1; e < E; ++e) mx = std::max(mx, pt[e]);
    float sum = 0.f;
    for (int e = 0; e < E; ++e) sum += (pt[e] = std::exp(pt[e] - mx));
    for (int e = 0; e < E; ++e) pt[e] /= sum;
    int* ct = chosen.data() + (size_t)t * K;
    float* wt = weight.data() + (size_t)t * K;
    float wsum = 0.f;
    for (int j = 0; j < K; ++j) {
      int best = -1;
      for (int e = 0; e < E; ++e)
        if (std::find(ct, ct + j, e) == ct + j && (best < 0 || pt[e] > pt[best])) best = e;
      ct[j] = best;
      wsum += (wt[j] = pt[best]);
    }
    if (c.expert_weights_norm) {
      wsum = std::max(wsum, 6.103515625e-5f);  // as llama.cpp: the smallest normal f16
      for (int j = 0; j < K; ++j) wt[j] /= wsum;
    }
  }
  // the slots (t, j) grouped by expert, in token order: expert e's rows at [off[e], off[e + 1]) of x, g, u, o
  std::vector<int> off(E + 1, 0), order((size_t)T * K), row_of((size_t)T * K);
  for (int i = 0; i < T * K; ++i) ++off[chosen[i] + 1];
  for (int e = 0; e < E; ++e) off[e + 1] += off[e];
  {
    std::vector<int> next(off.begin(), off.end() - 1);
    for (int i = 0; i < T * K; ++i) row_of[i] = next[chosen[i]]++, order[row_of[i]] = i;
  }
  const size_t R = (size_t)T * K;
  std::vector<float> x(R * d), g(R * F), u(R * F), o(R * d);
  for (size_t r = 0; r < R; ++r) std::memcpy(x.data() + r * d, a + (size_t)(order[r] / K) * d, sizeof(float) * d);
  // the experts taking the same number of rows share one dispatch per product kind (decode: all of them, one row)
  std::vector<int> counts;
  for (int e = 0; e < E; ++e)
    if (off[e + 1] > off[e] && std::find(counts.begin(), counts.end(), off[e + 1] - off[e]) == counts.end())
      counts.push_back(off[e + 1] - off[e]);
  auto rows_at = [](const WeightView& w, int r0, int nr, float* y) {
    return MatmulJob{w.type, w.data + (size_t)r0 * w.row_bytes, w.row_bytes, nr, y};
  };
  std::vector<MatmulJob> jobs;
  std::vector<const float*> xs;
  for (int n : counts) {
    jobs.clear();
    xs.clear();
    for (int e = 0; e < E; ++e)
      if (off[e + 1] - off[e] == n) {
        jobs.push_back(rows_at(L.ffn_gate_exps, e * F, F, g.data() + (size_t)off[e] * F));
        jobs.push_back(rows_at(L.ffn_up_exps, e * F, F, u.data() + (size_t)off[e] * F));
        xs.insert(xs.end(), 2, x.data() + (size_t)off[e] * d);
      }
    matmul_each(*m_.kt, jobs.data(), (int)jobs.size(), d, xs.data(), n, pool_);
  }
  // the experts' biases (gpt-oss): expert e's rows [off[e], off[e + 1]) of g, u (and of o below)
  auto add_expert_bias = [&](float* y, const float* bias, int width) {
    if (!bias) return;
    for (int e = 0; e < E; ++e)
      for (int r = off[e]; r < off[e + 1]; ++r)
        for (int i = 0; i < width; ++i) y[(size_t)r * width + i] += bias[(size_t)e * width + i];
  };
  add_expert_bias(g.data(), N.gate_exps_bias, F);
  add_expert_bias(u.data(), N.up_exps_bias, F);
  {  // elementwise, split over the pool for prompts as the dense feed-forward's
    const size_t ne = R * F;
    const int parts = ne >= (1u << 16) ? 4 * pool_.size() : 1;
    pool_.run(parts, [&](int p, int) {
      const size_t lo = ne * p / parts, hi = ne * (p + 1) / parts;
      ffn_act_mul(c.ffn_act, g.data() + lo, u.data() + lo, hi - lo);
    });
  }
  for (int n : counts) {
    jobs.clear();
    xs.clear();
    for (int e = 0; e < E; ++e)
      if (off[e + 1] - off[e] == n) {
        jobs.push_back(rows_at(L.ffn_down_exps, e * d, d, o.data() + (size_t)off[e] * d));
        xs.push_back(g.data() + (size_t)off[e] * F);
      }
    matmul_each(*m_.kt, jobs.data(), (int)jobs.size(), F, xs.data(), n, pool_);
  }
  add_expert_bias(o.data(), N.down_exps_bias, d);
  for (int t = 0; t < T; ++t) {
    float* at = a + (size_t)t * d;
    const float* wt = weight.data() + (size_t)t * K;
    for (int i = 0; i < d; ++i) {
      float s = 0.f;
      for (int j = 0; j < K; ++j) s += wt[j] * o[(size_t)row_of[(size_t)t * K + j] * d + i];
      at[i] = s;
    }
  }
}

}  // namespace

std::unique_ptr<Stage> make_cpu_stage(const ModelParts& m, int first, int last, const KvPoolShape& kv,
                                      ThreadPool& pool) {
  return std::make_unique<CpuStage>(m, first, last, kv, pool);
}

RopeTables::RopeTables(const ModelParts& m, const StepBatch& b, int first, int last) {
  const int T = b.n_tokens, half = m.cfg.n_rot / 2;
  const ModelConfig& c = m.cfg;
  const RopeYarn yarn{c.yarn_ext_factor, c.yarn_beta_fast, c.yarn_beta_slow, c.mscale, c.yarn_orig_ctx};
  for (int l = first; l < last; ++l) {
    const LayerWeights& L = m.w.layers[l];
    int r = 0;
    while (r < (int)tables.size() && !(tables[r].base == L.rope_base && tables[r].scale == L.rope_scale)) ++r;
    if (r == (int)tables.size()) {
      Table t{L.rope_base, L.rope_scale, std::vector<float>((size_t)T * half), std::vector<float>((size_t)T * half)};
      for (int i = 0; i < T; ++i)
        rope_angles(b.positions[i], m.cfg.n_rot, L.rope_base, L.rope_scale, m.freq_factors,
                    t.cs.data() + (size_t)i * half, t.sn.data() + (size_t)i * half, yarn);
      tables.push_back(std::move(t));
    }
    of_layer.push_back(r);
  }
}

}  // namespace lll
