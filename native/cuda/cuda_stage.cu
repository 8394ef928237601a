// The CUDA stage (stage.h): layers [first, last) of the decoder block on one NVIDIA GPU, the same step as
// cpu_stage.cpp with each piece replaced by its device twin (device_ops.cuh).
//
// Weights go to the device lazily, tensor by tensor on first use, copied from the file map as they are (GGUF
// blocks, never dequantized in device memory); the 1-D weights (norms, biases) and the KV transforms' K divisors
// likewise from the Model's float copies. The KV cache of the stage's layers lives in device memory in the CPU's
// paged layout and row formats. One step: the batch's index arrays and RoPE angles (computed on the host as the
// CPU computes them) go up in one copy each, the hidden state goes up (or the embedding is looked up on the
// device), every layer runs on one stream, and either the hidden state or the logits rows come back.
// Products: the int8 kernels (qgemv.cu: activations quantized on the device; the decode kernel, or tensor-core
// tiles from LOCALLLM_CUDA_MMQ rows, the same bits) for the types they take at every step size, qgemm (tensor cores
// over f16 tiles) for the rest. Decode-sized steps replay CUDA graphs (GRAPH_* below).
#include "device_compat.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "../stage.h"
#include "cuda_api.h"
#include "device_ops.cuh"

namespace lll {

namespace {

using cuda::check;

// Device memory (Pinned false) or pinned host memory (true: an asynchronous step's uploads and results; a copy
// from or to pageable memory may wait for the stream, that is for the step before it, where a pinned one does
// not), grown on demand; contents not kept across a growth.
template <bool Pinned>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }
  void* ensure(size_t bytes) {
    if (bytes > bytes_) {
      release();
      check(Pinned ? cudaHostAlloc(&p_, bytes, cudaHostAllocDefault) : cudaMalloc(&p_, bytes),
            Pinned ? "cudaHostAlloc" : "cudaMalloc");
      bytes_ = bytes;
    }
    return p_;
  }
  void release() {
    if (Pinned) cudaFreeHost(p_);
    else cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<false>;
using PinnedBuffer = Buffer<true>;

// Decode-sized steps replay a CUDA graph of their kernels, one graph per Shape: a small model's step is a few
// hundred short kernels whose launches would cost more than their work. A shape is captured the second time it is
// seen (the first runs eagerly and uploads every weight the step reads), block tables are padded to a multiple of
// GRAPH_BLOCK_PITCH entries so that a growing context keeps its graph for 16 blocks at a time, and every graph is
// dropped when a scratch buffer moves (they hold its addresses). LOCALLLM_CUDA_GRAPHS=0 runs every step eagerly.
constexpr int GRAPH_MAX_TOKENS = 64;
constexpr int GRAPH_BLOCK_PITCH = 16;
constexpr size_t GRAPH_MAX_KEPT = 256;
constexpr size_t ACT_KEPT_BYTES = size_t(64) << 20;  // a prompt step's activations kept beyond this step
// A step of at most this many (row, query head) pairs attends by chunks in thread blocks of their own
// (cuda::AttentionSplit): one block per pair would leave most of the card idle over a long context.
constexpr size_t ATT_SPLIT_MAX_PAIRS = 256;

bool graphs_enabled() {
  const char* env = std::getenv("LOCALLLM_CUDA_GRAPHS");
  return !(env && std::string(env) == "0");
}

// Batch invariance (kernels.h's contract, on the device): a row's logits are the same bits whatever the step
// carries, because every kernel a row passes through computes it in one order for every step size: the products
// of the decode kernel (qgemv) at every N, for the types it takes (a matrix of another type goes through qgemm at
// every N, whose outputs are per row too), and the attention row by row. LOCALLLM_CUDA_INVARIANT=0 gives that up
// for the f16 tile product past QGEMV_MAX_N rows and the tiled prefill attention (rows then depend on the step's
// size), which a benchmark can set to compare.
bool invariant_enabled() {
  const char* env = std::getenv("LOCALLLM_CUDA_INVARIANT");
  return !(env && std::string(env) == "0");
}

// The fusions around the decode kernel (a norm, the activation or the attention writing the next product's quantized
// input; biases and residual adds in the product's store; the products of one input in one launch; the activation
// and the next norm in the products' tail (QgemvThen); rope with the K and V writes): the same bits as the kernels
// apart, fewer launches. LOCALLLM_CUDA_FUSE=0 runs the kernels apart, to tell a fusion's fault from
// another's on a card.
bool fuse_enabled() {
  const char* env = std::getenv("LOCALLLM_CUDA_FUSE");
  return !(env && std::string(env) == "0");
}

class CudaStage final : public Stage {
 public:
  CudaStage(const ModelParts& m, int first, int last, const KvPoolShape& kv, int device);
  ~CudaStage() override;

  void run(const StepBatch& b, float* h_io, float* logits, const TopK* top) override;
  bool submit(const StepBatch& b, const TopK* top, int slot, bool feed) override;
  void finish(int slot, float* logits, const TopK* top) override;
  size_t kv_bytes() const override { return kv_bytes_; }
  std::string device() const override { return "cuda:" + std::to_string(device_); }
  int graph_nodes() const override { return graph_nodes_; }

 private:
  // what a step's graph depends on besides the model: tokens, sequences, logits rows (0 without the head), the
  // block table's row pitch, the candidates asked for (k 0: whole logits rows), whether tokens are fed (submit)
  struct Shape {
    int T, n_seq, n_logits, pitch, k, n_valid, feed;
    bool operator==(const Shape& o) const {
      return T == o.T && n_seq == o.n_seq && n_logits == o.n_logits && pitch == o.pitch && k == o.k &&
             n_valid == o.n_valid && feed == o.feed;
    }
  };
  struct ShapeHash {
    size_t operator()(const Shape& s) const {
      size_t h = 0;
      for (int v : {s.T, s.n_seq, s.n_logits, s.pitch, s.k, s.n_valid, s.feed}) h = h * 1000003u ^ (size_t)v;
      return h;
    }
  };
  struct StepBuffers;
  // An asynchronous step's pinned copies: the index arrays and angles going up, its results coming back (n_logits
  // rows of logits, or of k candidates), and the event recorded after them.
  struct Staging {
    PinnedBuffer in, out;
    cudaEvent_t done = nullptr;
    int n_logits = 0, k = 0;
    bool pending = false;
    bool release_act = false;  // a prompt-sized step: its activations are not kept past it (as run() does)
  };
  // the step up to its downloads, enqueued on stream_ (run and submit): from and to the caller's memory, or through
  // st's pinned copies
  void step(const StepBatch& b, float* h_io, float* logits, const TopK* top, Staging* st, bool feed = false);
  StepBuffers carve(const Shape& sh, size_t n_ints, size_t n_angles, int n_tiles);
  // the step's kernels (everything between the uploads and the downloads) on stream_
  void enqueue(const Shape& sh, const StepBuffers& sb, const RopeTables& ropes);
  cudaGraphExec_t capture(const Shape& sh, const StepBuffers& sb, const RopeTables& ropes);
  void* grow(DeviceBuffer& buf, size_t bytes);  // buf.ensure, dropping the graphs when it moves
  void drop_graphs();

  // the device copy of a weight matrix / a host float vector, uploaded on first use
  const uint8_t* weight(const WeightView& w);
  const float* vec(const float* host, size_t n);
  // y [n][rows of w] = x [n][w.row_len] . W^T (+ bias [rows], nullptr: none); several products of one x share its
  // quantization. add_to_y (the decode kernel only: decodes): y += that instead.
  struct Product {
    const WeightView* w;
    float* y;
    const float* bias = nullptr;
    bool add_to_y = false;
  };
  // slot >= 0: x's quantization is in quantized_input(n, k, slot) already (its producer wrote it: the decode kernel
  // only); -1: x is quantized into slot 0 first (where the decode kernel runs). then: the kernel after the products,
  // fused into the decode kernel's tail (qgemv_multi), its output in the other slot (the products read theirs while
  // the follow-up writes)
  void products(std::initializer_list<Product> ps, const float* x, int n, int slot = -1,
                const cuda::QgemvThen* then = nullptr);
  bool decodes(const WeightView& w, int n) const;  // whether products of n rows run w through qgemv
  bool fuses(const WeightView& w, int n) const { return fuse_ && decodes(w, n); }  // and the fusions around it
  // where the quantized input of a product of n rows of k lies in slot 0 or 1 (xq_, sized by run): int8 values, a
  // float per 32
  std::pair<int8_t*, float*> quantized_input(int n, int k, int slot);
  // h += x . W^T + bias (x's quantization in slot, -1: none), then through the post-norm (nullptr: none) when there
  // is one: fused into the product's store where qgemv runs it and no norm comes between, else through a (the CPU's
  // order either way). With next_norm, then a = rms_norm(h, next_norm), quantized when quantize (in the product's
  // tail where it can): returns the slot of a's quantization, -1 where a holds floats only.
  int residual(const WeightView& w, const float* bias, const float* post_norm, const float* x, float* h, float* a,
               int n, int slot, const float* next_norm, bool quantize);
  // a = rms_norm(h [n][d], w), quantized into slot 0 when quantize: returns that slot, or -1
  int norm(const float* h, const float* w, int n, float* a, bool quantize);
  void check_type(const WeightView& w, const std::string& name) const;

  const ModelParts& m_;
  const int first_, last_, device_;
  const KvPoolShape kv_;
  struct StreamDestroy {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CUstream_st, StreamDestroy> owned_stream_;  // destroys stream_, also when the constructor throws
  std::unordered_map<const void*, std::unique_ptr<DeviceBuffer>> uploads_;  // host address -> device copy
  std::vector<std::unique_ptr<DeviceBuffer>> k_pool_, v_pool_;              // [last - first]
  size_t k_row_ = 0, v_row_ = 0, kv_bytes_ = 0;
  DeviceBuffer act_, xq_;  // the step's activations and quantized inputs
  DeviceBuffer counters_;  // the decode kernel's follow-ups' (QgemvThen), zero between launches
  DeviceBuffer att_part_, att_counters_;  // a split attention's chunk states and counts (AttentionSplit)
  DeviceBuffer fed_;  // the top candidate of each logits row of the last step that asked for candidates (submit's feed)
  const bool graphs_on_, invariant_, fuse_;
  int graph_nodes_ = -1;  // of the graph captured last
  std::unordered_map<Shape, cudaGraphExec_t, ShapeHash> graphs_;
  std::unordered_set<Shape, ShapeHash> seen_;        // run eagerly once since the graphs were last dropped
  std::unordered_set<Shape, ShapeHash> ungraphable_;  // whose capture failed: always eager
  Staging staging_[2];                                 // submit's slots
};

CudaStage::CudaStage(const ModelParts& m, int first, int last, const KvPoolShape& kv, int device)
    : m_(m),
      first_(first),
      last_(last),
      device_(device),
      kv_(kv),
      graphs_on_(graphs_enabled()),
      invariant_(invariant_enabled()),
      fuse_(fuse_enabled()) {
  std::string error;
  const auto devices = cuda::devices(&error);
  if ((int)devices.size() <= device)
    throw std::runtime_error("CUDA device " + std::to_string(device) + " not found: " +
                             (error.empty() ? "only " + std::to_string(devices.size()) + " devices" : error));
  const ModelConfig& c = m.cfg;
  if (first == 0) check_type(m.w.token_embd, "token_embd");
  if (last == c.n_layers) check_type(m.w.output, "output");
  for (int l = first; l < last; ++l) {
    const LayerWeights& L = m.w.layers[l];
    const std::string b = "blk." + std::to_string(l) + ".";
    check_type(L.attn_q, b + "attn_q");
    check_type(L.attn_k, b + "attn_k");
    check_type(L.attn_v, b + "attn_v");
    check_type(L.attn_output, b + "attn_output");
    check_type(L.ffn_gate, b + "ffn_gate");
    check_type(L.ffn_up, b + "ffn_up");
    check_type(L.ffn_down, b + "ffn_down");
  }
  if (c.head_dim % 32 || c.head_dim > 256)
    throw std::invalid_argument("head_dim " + std::to_string(c.head_dim) +
                                ": the CUDA attention takes a multiple of 32, at most 256");
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  owned_stream_.reset(stream_);
  const int kvd = c.n_kv_head * c.head_dim;
  kv_check_len(kv.k_type, c.head_dim, "k_type");
  kv_check_len(kv.v_type, c.head_dim, "v_type");
  k_row_ = kv_row_bytes(kv.k_type, kvd);
  v_row_ = kv_row_bytes(kv.v_type, kvd);
  const size_t slots = (size_t)kv.n_blocks * kv.block_size;
  for (int l = first; l < last; ++l) {
    for (auto [pool, row] : {std::make_pair(&k_pool_, k_row_), std::make_pair(&v_pool_, v_row_)}) {
      pool->push_back(std::make_unique<DeviceBuffer>());
      check(cudaMemsetAsync(pool->back()->ensure(slots * row), 0, slots * row, stream_), "cudaMemset (KV pool)");
    }
  }
  check(cudaStreamSynchronize(stream_), "zeroing the KV pools");
  kv_bytes_ = (size_t)(last - first) * slots * (k_row_ + v_row_);
}

CudaStage::~CudaStage() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);  // a step submitted and never finished still reads the pinned copies
  for (Staging& st : staging_)
    if (st.done) cudaEventDestroy(st.done);
  drop_graphs();
}

void CudaStage::check_type(const WeightView& w, const std::string& name) const {
  if (!cuda::qgemm_supports(w.type)) {
    const TypeInfo* ti = type_info(w.type);
    throw std::invalid_argument(name + ": tensor type " + (ti ? ti->name : std::to_string(w.type)) +
                                " is not supported by the CUDA backend");
  }
}

const uint8_t* CudaStage::weight(const WeightView& w) {
  auto& slot = uploads_[w.data];
  if (!slot) {
    const size_t bytes = (size_t)w.rows * w.row_bytes;
    auto buf = std::make_unique<DeviceBuffer>();
    // stream-ordered: a pageable cudaMemcpy may return before its DMA lands, and stream_ does not wait for the
    // legacy stream
    check(cudaMemcpyAsync(buf->ensure(bytes), w.data, bytes, cudaMemcpyHostToDevice, stream_), "upload weights");
    slot = std::move(buf);
  }
  return static_cast<const uint8_t*>(slot->get());
}

const float* CudaStage::vec(const float* host, size_t n) {
  if (!host) return nullptr;
  auto& slot = uploads_[host];
  if (!slot) {
    auto buf = std::make_unique<DeviceBuffer>();
    check(cudaMemcpyAsync(buf->ensure(n * sizeof(float)), host, n * sizeof(float), cudaMemcpyHostToDevice, stream_),
          "upload");
    slot = std::move(buf);
  }
  return static_cast<const float*>(slot->get());
}

bool CudaStage::decodes(const WeightView& w, int n) const {
  return (invariant_ || n <= cuda::QGEMV_MAX_N) && cuda::qgemv_supports(w.type);
}

std::pair<int8_t*, float*> CudaStage::quantized_input(int n, int k, int slot) {
  uint8_t* q = static_cast<uint8_t*>(xq_.get()) + (slot ? xq_.bytes() / 2 : 0);  // halves sized by run
  return {reinterpret_cast<int8_t*>(q), reinterpret_cast<float*>(q + ((size_t)n * k + 255) / 256 * 256)};
}

void CudaStage::products(std::initializer_list<Product> ps, const float* x, int n, int slot,
                         const cuda::QgemvThen* then) {
  const int k = ps.begin()->w->row_len;  // one x: the row lengths agree (checked at load)
  const bool small = std::all_of(ps.begin(), ps.end(), [&](const Product& p) { return decodes(*p.w, n); });
  if (slot >= 0 && !small) throw std::logic_error("products: a quantized input needs the decode kernel");
  if (then && (!small || !fuse_ || ps.size() > cuda::QGEMV_MAX_MATS))
    throw std::logic_error("products: a follow-up needs the fused decode kernel, in one launch");
  if (small) {
    const auto [xq, xd] = quantized_input(n, k, std::max(slot, 0));
    if (slot < 0) cuda::quantize_x(x, n, k, xq, xd, stream_);
    if (!fuse_) {  // each product its own launch, its bias another
      for (const Product& p : ps) {
        if (p.add_to_y) throw std::logic_error("products: add_to_y with the fusions off");
        cuda::qgemv(p.w->type, weight(*p.w), p.w->row_bytes, p.w->rows, k, xq, xd, n, p.y, nullptr, false, stream_);
        cuda::add_bias(p.y, p.bias, n, p.w->rows, stream_);
      }
      return;
    }
    cuda::QgemvMat mats[cuda::QGEMV_MAX_MATS];
    int count = 0;
    for (const Product& p : ps) {  // one launch for up to three products of this x
      mats[count++] = {p.w->type, weight(*p.w), p.w->row_bytes, p.w->rows, p.y, p.bias, p.add_to_y};
      if (count == cuda::QGEMV_MAX_MATS) {
        cuda::qgemv_multi(mats, count, k, xq, xd, n, stream_);
        count = 0;
      }
    }
    if (count) cuda::qgemv_multi(mats, count, k, xq, xd, n, stream_, -1, then);
    return;
  }
  for (const Product& p : ps) {
    if (p.add_to_y) throw std::logic_error("products: add_to_y needs the decode kernel");
    cuda::qgemm(p.w->type, weight(*p.w), p.w->row_bytes, p.w->rows, k, x, n, p.y, stream_);
    cuda::add_bias(p.y, p.bias, n, p.w->rows, stream_);
  }
}

int CudaStage::norm(const float* h, const float* w, int n, float* a, bool quantize) {
  const int d = m_.cfg.d_model;
  if (!quantize) {
    cuda::rms_norm(h, w, n, d, m_.cfg.rms_eps, a, stream_);
    return -1;
  }
  const auto [xq, xd] = quantized_input(n, d, 0);
  cuda::rms_norm_quantize(h, w, n, d, m_.cfg.rms_eps, a, xq, xd, stream_);
  return 0;
}

int CudaStage::residual(const WeightView& w, const float* bias, const float* post_norm, const float* x, float* h,
                        float* a, int n, int slot, const float* next_norm, bool quantize) {
  const int d = w.rows;
  if (!post_norm && fuses(w, n)) {
    if (next_norm && quantize && d % 32 == 0) {  // the norm in the product's tail
      const int out = slot == 1 ? 0 : 1;
      cuda::QgemvThen then;
      then.kind = cuda::QgemvThen::RMS_NORM;
      then.w = next_norm;
      then.eps = m_.cfg.rms_eps;
      then.out = a;
      std::tie(then.xq, then.xd) = quantized_input(n, d, out);
      then.counters = static_cast<int*>(counters_.get());
      products({{&w, h, bias, true}}, x, n, slot, &then);
      return out;
    }
    products({{&w, h, bias, true}}, x, n, slot);
  } else {
    products({{&w, a, bias}}, x, n, slot);
    if (post_norm) cuda::rms_norm(a, post_norm, n, d, m_.cfg.rms_eps, a, stream_);
    cuda::add(h, a, (size_t)n * d, stream_);
  }
  return next_norm ? norm(h, next_norm, n, a, quantize) : -1;
}

// The step's device buffers, carved from act_ (256-byte aligned pieces) for one shape of step.
struct CudaStage::StepBuffers {
  int n_tiles;  // > 0: prefill attention by tiles (paged_attention_tiled) starting at rows tiles[..]
  cuda::AttentionSplit split;  // part set: the attention by chunks in blocks of their own
  int32_t *ints, *ids, *pos, *slots, *seq, *bt, *rows, *tiles, *top_ids, *part_ids;
  float *angles, *h, *a, *q, *att, *k, *v, *g, *u, *x, *y, *top_vals, *part_vals;  // part_: top_k's slices
};

CudaStage::StepBuffers CudaStage::carve(const Shape& sh, size_t n_ints, size_t n_angles, int n_tiles) {
  const ModelConfig& c = m_.cfg;
  const size_t T = sh.T, d = c.d_model, qd = (size_t)c.n_head * c.head_dim, kvd = (size_t)c.n_kv_head * c.head_dim;
  const size_t nl = std::max(sh.n_logits, 1), vocab = last_ == c.n_layers ? c.n_vocab : 0;
  const size_t part = sh.k > 0 ? nl * cuda::top_k_slices(sh.n_valid) * sh.k * 4 : 0;
  const size_t sizes[] = {n_ints * 4,     n_angles * 4,       T * d * 4,    T * d * 4,         T * qd * 4,
                          T * qd * 4,     T * kvd * 4,        T * kvd * 4,  T * c.n_ff * 4,    T * c.n_ff * 4,
                          nl * d * 4,     nl * vocab * 4,     nl * sh.k * 4, nl * sh.k * 4,    part,
                          part};
  constexpr int N_BUFFERS = sizeof(sizes) / sizeof(sizes[0]);
  size_t at[N_BUFFERS], total = 0;
  for (int i = 0; i < N_BUFFERS; ++i) {
    at[i] = total;
    total += (sizes[i] + 255) / 256 * 256;
  }
  uint8_t* base = static_cast<uint8_t*>(grow(act_, std::max<size_t>(total, 256)));
  auto F = [&](int i) { return reinterpret_cast<float*>(base + at[i]); };
  StepBuffers s{};
  s.ints = reinterpret_cast<int32_t*>(base);
  s.ids = s.ints;
  s.pos = s.ids + T;
  s.slots = s.pos + T;
  s.seq = s.slots + T;
  s.bt = s.seq + T;
  s.rows = s.bt + (size_t)sh.n_seq * sh.pitch;
  s.tiles = s.rows + sh.n_logits;
  s.n_tiles = n_tiles;
  s.angles = F(1);
  s.h = F(2), s.a = F(3), s.q = F(4), s.att = F(5), s.k = F(6), s.v = F(7), s.g = F(8), s.u = F(9), s.x = F(10);
  s.y = F(11);
  s.top_ids = reinterpret_cast<int32_t*>(F(12));
  s.top_vals = F(13);
  s.part_ids = reinterpret_cast<int32_t*>(F(14));
  s.part_vals = F(15);
  return s;
}

void* CudaStage::grow(DeviceBuffer& buf, size_t bytes) {
  const void* before = buf.get();
  if (bytes > buf.bytes())  // a submitted step may still run in it, or replay a graph about to be dropped
    check(cudaStreamSynchronize(stream_), "the step before");
  void* p = buf.ensure(bytes);
  if (p != before) drop_graphs();  // they hold the old addresses
  return p;
}

void CudaStage::drop_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  seen_.clear();
}

void CudaStage::run(const StepBatch& b, float* h_io, float* logits, const TopK* top) {
  check(cudaSetDevice(device_), "cudaSetDevice");
  step(b, h_io, logits, top, nullptr);
  check(cudaStreamSynchronize(stream_), "the step");
  const bool graph = graphs_on_ && b.n_tokens <= GRAPH_MAX_TOKENS;
  if (!graph && act_.bytes() > ACT_KEPT_BYTES) {  // a long prompt's activations are not kept for the decode after it
    act_.release();
    drop_graphs();  // they hold its addresses
  }
}

bool CudaStage::submit(const StepBatch& b, const TopK* top, int slot, bool feed) {
  if (first_ != 0 || last_ != m_.cfg.n_layers) return false;
  check(cudaSetDevice(device_), "cudaSetDevice");
  Staging& st = staging_[slot];
  if (st.pending) throw std::logic_error("CudaStage::submit: staging slot " + std::to_string(slot) + " is in use");
  if (!st.done) check(cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming), "cudaEventCreate");
  try {
    step(b, nullptr, nullptr, top, &st, feed);
    check(cudaEventRecord(st.done, stream_), "cudaEventRecord");
  } catch (...) {
    cudaStreamSynchronize(stream_);  // what was enqueued of it reads the slot's pinned copies: done before they change
    throw;
  }
  st.pending = true;
  st.release_act = !(graphs_on_ && b.n_tokens <= GRAPH_MAX_TOKENS);
  return true;
}

void CudaStage::finish(int slot, float* logits, const TopK* top) {
  Staging& st = staging_[slot];
  if (!st.pending) throw std::logic_error("CudaStage::finish: nothing was submitted to slot " + std::to_string(slot));
  st.pending = false;
  check(cudaSetDevice(device_), "cudaSetDevice");
  check(cudaEventSynchronize(st.done), "the step");
  if (st.release_act && !staging_[slot ^ 1].pending && act_.bytes() > ACT_KEPT_BYTES) {  // as run() does: the stream
    act_.release();                                                                     // is idle
    drop_graphs();
  }
  const size_t nl = st.n_logits;
  if (st.k > 0) {
    std::memcpy(top->ids, st.out.ensure(0), sizeof(int32_t) * nl * st.k);
    std::memcpy(top->vals, static_cast<uint8_t*>(st.out.ensure(0)) + sizeof(int32_t) * nl * st.k,
                sizeof(float) * nl * st.k);
  } else {
    std::memcpy(logits, st.out.ensure(0), sizeof(float) * nl * m_.cfg.n_vocab);
  }
}

void CudaStage::step(const StepBatch& b, float* h_io, float* logits, const TopK* top, Staging* st, bool feed) {
  const ModelConfig& c = m_.cfg;
  const int T = b.n_tokens, d = c.d_model, nl = b.n_logits;
  const bool head = last_ == c.n_layers, graph = graphs_on_ && T <= GRAPH_MAX_TOKENS;
  const Shape sh{T,
                 b.n_seq,
                 head ? nl : 0,
                 graph ? (b.max_blocks + GRAPH_BLOCK_PITCH - 1) / GRAPH_BLOCK_PITCH * GRAPH_BLOCK_PITCH : b.max_blocks,
                 head && top ? top->k : 0,
                 head && top ? top->n_valid : 0,
                 feed ? 1 : 0};  // the fed rows are checked by the Model

  // host side: the index arrays in one block (block tables at the shape's pitch), the RoPE angles of the layers
  std::vector<int32_t> ints;
  ints.reserve((size_t)4 * T + (size_t)sh.n_seq * sh.pitch + nl);
  for (const int32_t* p : {b.token_ids, b.positions, b.slot_mapping, b.seq_index}) ints.insert(ints.end(), p, p + T);
  for (int s = 0; s < b.n_seq; ++s) {
    const int32_t* row = b.block_tables + (size_t)s * b.max_blocks;
    ints.insert(ints.end(), row, row + b.max_blocks);
    ints.insert(ints.end(), sh.pitch - b.max_blocks, 0);  // never read: past every visible position
  }
  ints.insert(ints.end(), b.logits_rows, b.logits_rows + sh.n_logits);
  // attention row by row (graphed or not: the same kernels, so replay equals eager launches); without invariance a
  // prompt-sized step attends by tiles of consecutive rows (each key chunk read once per tile)
  std::vector<int32_t> tiles;
  if (!invariant_ && T > GRAPH_MAX_TOKENS) {
    tiles = cuda::attention_tiles(T, b.positions, b.seq_index);
    if (tiles.size() * 4 > (size_t)T) tiles.clear();  // mostly single rows (decode of many sequences): by rows
  }
  ints.insert(ints.end(), tiles.begin(), tiles.end());
  const RopeTables ropes(m_, b, first_, last_);
  std::vector<float> angles;
  for (const auto& t : ropes.tables) {
    angles.insert(angles.end(), t.cs.begin(), t.cs.end());
    angles.insert(angles.end(), t.sn.begin(), t.sn.end());
  }

  // the largest quantized input a product of this step takes, sized before any capture (no growth inside one)
  const size_t k_max = std::max({(size_t)d, (size_t)c.n_head * c.head_dim, (size_t)c.n_ff});
  const size_t n_max = invariant_ ? std::max(T, nl) : std::min(std::max(T, nl), cuda::QGEMV_MAX_N);  // xq_: qgemv's
  const size_t slot_bytes = (n_max * k_max + n_max * k_max / 32 * sizeof(float) + 767) / 256 * 256;
  grow(xq_, 2 * slot_bytes);  // two slots of int8 values, then a float per 32
  const size_t n_counters = cuda::qgemv_then_counters(std::max(c.n_ff, d), (int)n_max);
  const void* counted = counters_.get();
  if (grow(counters_, n_counters * sizeof(int)) != counted)
    check(cudaMemsetAsync(counters_.get(), 0, counters_.bytes(), stream_), "cudaMemset (counters)");
  if (head && sh.k > 0 && (size_t)nl * 4 > fed_.bytes()) {  // room for this step's top candidates, the last kept
    check(cudaStreamSynchronize(stream_), "the step before");
    const size_t had = fed_.bytes();
    DeviceBuffer kept;
    if (had) check(cudaMemcpy(kept.ensure(had), fed_.get(), had, cudaMemcpyDeviceToDevice), "keep the fed tokens");
    grow(fed_, std::max<size_t>(nl, 1024) * 4);
    if (had) check(cudaMemcpy(fed_.get(), kept.get(), had, cudaMemcpyDeviceToDevice), "keep the fed tokens");
  }
  StepBuffers sb = carve(sh, ints.size(), angles.size(), (int)tiles.size());
  const int chunks = cuda::attention_chunks(sh.pitch, kv_.block_size);
  if (tiles.empty() && chunks > 1 && (size_t)T * c.n_head <= ATT_SPLIT_MAX_PAIRS) {
    // room for a power of two of chunks, so that a growing context seldom moves it (which drops the graphs)
    size_t room = 1;
    while (room < (size_t)chunks) room *= 2;
    sb.split.part = static_cast<float*>(grow(att_part_, T * c.n_head * room * cuda::ATT_PART_FLOATS * sizeof(float)));
    const void* had = att_counters_.get();
    sb.split.counters = static_cast<int*>(grow(att_counters_, ATT_SPLIT_MAX_PAIRS * sizeof(int)));
    if (sb.split.counters != had)
      check(cudaMemsetAsync(sb.split.counters, 0, att_counters_.bytes(), stream_), "cudaMemset (attention counters)");
    sb.split.chunks = chunks;
  }
  const int32_t* ints_from = ints.data();
  const float* angles_from = angles.data();
  if (st) {  // through pinned memory, so that neither copy waits for the step before
    uint8_t* in = static_cast<uint8_t*>(st->in.ensure((ints.size() + angles.size()) * 4 + 4));
    std::memcpy(in, ints.data(), ints.size() * 4);
    std::memcpy(in + ints.size() * 4, angles.data(), angles.size() * 4);
    ints_from = reinterpret_cast<const int32_t*>(in);
    angles_from = reinterpret_cast<const float*>(in + ints.size() * 4);
  }
  check(cudaMemcpyAsync(sb.ints, ints_from, ints.size() * 4, cudaMemcpyHostToDevice, stream_), "copy batch");
  if (!angles.empty())
    check(cudaMemcpyAsync(sb.angles, angles_from, angles.size() * 4, cudaMemcpyHostToDevice, stream_), "copy rope");
  if (first_ > 0)
    check(cudaMemcpyAsync(sb.h, h_io, sizeof(float) * T * d, cudaMemcpyHostToDevice, stream_), "copy h");

  auto it = graph ? graphs_.find(sh) : graphs_.end();
  if (it != graphs_.end()) {
    check(cudaGraphLaunch(it->second, stream_), "cudaGraphLaunch");
  } else if (!graph || !seen_.count(sh) || ungraphable_.count(sh)) {
    enqueue(sh, sb, ropes);  // a shape's first sight runs eagerly, uploading whatever the step reads
    if (graph) seen_.insert(sh);  // only once that succeeded: a capture must find nothing left to upload
  } else {
    cudaGraphExec_t exec = nullptr;
    try {
      exec = capture(sh, sb, ropes);
    } catch (const std::exception& e) {  // this shape stays eager: a step must not fail for want of a graph
      std::fprintf(stderr, "localllm: CUDA graph capture failed (%s); steps of %d tokens run without one\n", e.what(),
                   T);
      ungraphable_.insert(sh);
      enqueue(sh, sb, ropes);
    }
    if (exec) check(cudaGraphLaunch(graphs_.emplace(sh, exec).first->second, stream_), "cudaGraphLaunch");
  }

  int32_t* ids_to = top ? top->ids : nullptr;
  float* vals_to = top ? top->vals : nullptr;
  if (st) {  // the results go to the slot's pinned copy; finish() hands them over
    st->n_logits = nl;
    st->k = sh.k;
    const size_t bytes = sh.k > 0 ? (size_t)nl * sh.k * 8 : sizeof(float) * nl * c.n_vocab;
    uint8_t* out = static_cast<uint8_t*>(st->out.ensure(std::max<size_t>(bytes, 8)));
    ids_to = reinterpret_cast<int32_t*>(out);
    vals_to = reinterpret_cast<float*>(out + (size_t)nl * sh.k * 4);
    logits = reinterpret_cast<float*>(out);
  }
  if (head && nl > 0 && sh.k > 0)  // each row's top candidate, for a step fed from this one (submit's feed)
    check(cudaMemcpy2DAsync(fed_.get(), 4, sb.top_ids, (size_t)sh.k * 4, 4, nl, cudaMemcpyDeviceToDevice, stream_),
          "keep the top candidates");
  if (!head)
    check(cudaMemcpyAsync(h_io, sb.h, sizeof(float) * T * d, cudaMemcpyDeviceToHost, stream_), "copy h back");
  else if (nl > 0 && sh.k > 0) {
    check(cudaMemcpyAsync(ids_to, sb.top_ids, sizeof(int32_t) * nl * sh.k, cudaMemcpyDeviceToHost, stream_),
          "copy candidates");
    check(cudaMemcpyAsync(vals_to, sb.top_vals, sizeof(float) * nl * sh.k, cudaMemcpyDeviceToHost, stream_),
          "copy candidates");
  } else if (nl > 0) {
    check(cudaMemcpyAsync(logits, sb.y, sizeof(float) * nl * c.n_vocab, cudaMemcpyDeviceToHost, stream_),
          "copy logits");
  }
}

cudaGraphExec_t CudaStage::capture(const Shape& sh, const StepBuffers& sb, const RopeTables& ropes) {
  cudaGraph_t g = nullptr;
  check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue(sh, sb, ropes);
  } catch (...) {
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
  size_t nodes = 0;
  if (cudaGraphGetNodes(g, nullptr, &nodes) == cudaSuccess) graph_nodes_ = (int)nodes;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  check(e, "cudaGraphInstantiate");
  if (graphs_.size() >= GRAPH_MAX_KEPT) drop_graphs();
  return exec;
}

void CudaStage::enqueue(const Shape& sh, const StepBuffers& sb, const RopeTables& ropes) {
  const ModelConfig& c = m_.cfg;
  const KvTransforms& tf = m_.kv_tf;
  const int T = sh.T, d = c.d_model, hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_kv_head * hd;
  const int half = c.n_rot / 2, nl = sh.n_logits;
  float *h = sb.h, *a = sb.a, *q = sb.q, *att = sb.att, *k = sb.k, *v = sb.v, *g = sb.g, *u = sb.u;
  if (sh.feed) cuda::feed_tokens(sb.ids, T, static_cast<const int32_t*>(fed_.get()), stream_);
  if (first_ == 0) {
    const WeightView& E = m_.w.token_embd;
    cuda::dequant_rows(E.type, weight(E), E.row_bytes, d, sb.ids, T, c.embed_scale, h, stream_);
  }
  const cuda::AttentionRowsDev rows{T, sb.pos, sb.seq, sb.bt, sh.pitch};
  auto V = [&](const float* p, size_t n) { return vec(p, n); };
  auto qkv_decode = [&](int l) {  // the norm before them can write their quantized input
    const LayerWeights& L = m_.w.layers[l];
    return fuses(L.attn_q, T) && fuses(L.attn_k, T) && fuses(L.attn_v, T);
  };
  // where the q, k, v products' quantized input lies (-1: a holds the normed floats)
  int qkv_slot = first_ < last_ ? norm(h, V(m_.norms[first_].attn_norm, d), T, a, qkv_decode(first_)) : -1;
  for (int l = first_; l < last_; ++l) {
    const LayerWeights& L = m_.w.layers[l];
    const LayerNorms& N = m_.norms[l];
    products({{&L.attn_q, q, V(N.q_bias, qd)},
              {&L.attn_k, k, V(N.k_bias, kvd)},
              {&L.attn_v, v, V(tf.v_bias(N.v_bias), kvd)}},
             a, T, qkv_slot);
    if (N.q_norm) {
      cuda::rms_norm(q, V(N.q_norm, hd), T * c.n_head, hd, c.rms_eps, q, stream_);
      cuda::rms_norm(k, V(N.k_norm, hd), T * c.n_kv_head, hd, c.rms_eps, k, stream_);
    }
    const int r = ropes.of_layer[l - first_];
    const float* cs = sb.angles + (size_t)r * 2 * T * half;
    const float* sn = cs + (size_t)T * half;
    cuda::KvTransformsDev dtf;
    dtf.rotate_k = tf.rotate_k();
    dtf.rotate_v = tf.rotate_v();
    dtf.center_k = tf.center_k();
    dtf.center_v = tf.center_v();
    dtf.k_scale = tf.equalize_k() ? V(tf.k_scale(l).data(), kvd) : nullptr;
    dtf.k_bias = V(N.k_bias, kvd);
    dtf.v_bias = V(N.v_bias, kvd);
    uint8_t* kp = static_cast<uint8_t*>(k_pool_[l - first_]->get());
    uint8_t* vp = static_cast<uint8_t*>(v_pool_[l - first_]->get());
    const bool transforms = dtf.rotate_k || dtf.rotate_v || dtf.center_k || dtf.center_v || dtf.k_scale;
    if (fuse_ && !transforms) {  // rope of q and k and the K and V writes in one launch
      cuda::rope_kv_write(q, c.n_head, k, v, c.n_kv_head, T, hd, c.n_rot, c.neox, cs, sn, kv_.k_type, kp, k_row_,
                          kv_.v_type, vp, v_row_, sb.slots, stream_);
    } else {
      cuda::rope(q, c.n_head, k, c.n_kv_head, T, hd, c.n_rot, c.neox, cs, sn, stream_);
      cuda::kv_to_cache(dtf, q, k, v, T, c.n_head, c.n_kv_head, hd, stream_);
      cuda::kv_write_kv(kv_.k_type, k, kp, k_row_, kv_.v_type, v, vp, v_row_, T, kvd, sb.slots, stream_);
    }
    const AttentionShape shape{c.n_head,      c.n_kv_head,    hd, kv_.block_size, c.attn_scale,
                               c.attn_softcap, L.sliding ? c.sliding_window : 0};
    const KvView kview{kp, kv_.k_type, k_row_, k_row_ / c.n_kv_head};
    const KvView vview{vp, kv_.v_type, v_row_, v_row_ / c.n_kv_head};
    // the output product's quantized input written by the attention itself, where nothing comes between
    const bool att_quantized = sb.n_tiles == 0 && !tf.changes_output() && fuses(L.attn_output, T);
    if (sb.n_tiles > 0) {
      cuda::paged_attention_tiled(shape, rows, sb.tiles, sb.n_tiles, q, kview, vview, att, stream_);
    } else if (att_quantized) {
      const auto [xq, xd] = quantized_input(T, qd, 0);
      cuda::paged_attention(shape, rows, q, kview, vview, att, stream_, xq, xd, sb.split);
    } else {
      cuda::paged_attention(shape, rows, q, kview, vview, att, stream_, nullptr, nullptr, sb.split);
    }
    if (tf.changes_output()) cuda::kv_from_cache(dtf, att, T, c.n_head, c.n_kv_head, hd, stream_);
    const bool gate_up_decode = fuses(L.ffn_gate, T) && fuses(L.ffn_up, T);
    const int ffn_slot = residual(L.attn_output, V(N.o_bias, d), V(N.post_attn, d), att, h, a, T,
                                  att_quantized ? 0 : -1, V(N.ffn_norm, d), gate_up_decode);
    const bool silu = c.ffn_act == FfnAct::Silu, down_decode = fuses(L.ffn_down, T);
    int down_slot = -1;
    if (gate_up_decode && down_decode && c.n_ff % 32 == 0) {  // act(g) * u in the products' tail
      down_slot = ffn_slot == 1 ? 0 : 1;
      cuda::QgemvThen then;
      then.kind = cuda::QgemvThen::ACT_MUL;
      then.silu = silu;
      std::tie(then.xq, then.xd) = quantized_input(T, c.n_ff, down_slot);
      then.counters = static_cast<int*>(counters_.get());
      products({{&L.ffn_gate, g}, {&L.ffn_up, u}}, a, T, ffn_slot, &then);
    } else {
      products({{&L.ffn_gate, g}, {&L.ffn_up, u}}, a, T, ffn_slot);
      if (down_decode) {  // act(g) * u straight into the down product's quantized input
        down_slot = 0;
        const auto [xq, xd] = quantized_input(T, c.n_ff, 0);
        cuda::act_mul_quantize(g, u, (size_t)T * c.n_ff, silu, xq, xd, stream_);
      } else {
        cuda::act_mul(g, u, (size_t)T * c.n_ff, silu, stream_);
      }
    }
    const bool last = l + 1 == last_;
    qkv_slot = residual(L.ffn_down, nullptr, V(N.post_ffn, d), g, h, a, T, down_slot,
                        last ? nullptr : V(m_.norms[l + 1].attn_norm, d), !last && qkv_decode(l + 1));
  }
  if (nl > 0) {  // logits = rms_norm(h, output_norm) @ output.T (soft-capped) for the rows asked for
    cuda::gather_rows(h, sb.rows, nl, d, sb.x, stream_);
    cuda::rms_norm(sb.x, vec(m_.output_norm, d), nl, d, c.rms_eps, sb.x, stream_);
    products({{&m_.w.output, sb.y}}, sb.x, nl);
    if (c.final_softcap > 0.f) cuda::softcap(sb.y, (size_t)nl * c.n_vocab, c.final_softcap, stream_);
    if (sh.k > 0)
      cuda::top_k(sb.y, nl, c.n_vocab, sh.n_valid, sh.k, sb.top_ids, sb.top_vals, stream_, sb.part_ids, sb.part_vals);
  }
}

}  // namespace

std::unique_ptr<Stage> make_cuda_stage(const ModelParts& m, int first, int last, const KvPoolShape& kv, int device) {
  return std::make_unique<CudaStage>(m, first, last, kv, device);
}

}  // namespace lll
