// Bindings of the CUDA backend (native/cuda/cuda_api.h): what was compiled in, the devices found, and the device
// kernels' test entry points. Built with or without the toolkit: without it (no LLL_CUDA) the backend reports
// itself absent and the entry points raise.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.h"
#include "cuda/cuda_api.h"
#include "emulated_products.h"
#include "kernel_context.h"
#include "kv_format.h"
#include "matmul.h"
#include "warp_emulator.h"

namespace py = pybind11;

namespace lll {

namespace {

#ifdef LLL_CUDA
constexpr bool kCompiled = true;
#else
constexpr bool kCompiled = false;
#endif

py::dict cuda_info() {
  py::dict d;
  d["compiled"] = kCompiled;
  py::list devs;
  std::string error = kCompiled ? "" : "not compiled in (built without nvcc or with LOCALLLM_CUDA=OFF)";
#ifdef LLL_CUDA
  for (const cuda::DeviceInfo& di : cuda::devices(&error)) {
    py::dict e;
    e["index"] = di.index;
    e["name"] = di.name;
    e["total_memory"] = di.total_memory;
    e["free_memory"] = di.free_memory;
    e["compute_capability"] = py::make_tuple(di.major, di.minor);
    devs.append(e);
  }
  d["runtime_version"] = cuda::runtime_version();
  d["driver_version"] = cuda::driver_version();
#endif
  d["devices"] = devs;
  d["error"] = error;
  return d;
}

// y[n, m] = x[n, k] @ W[m, k]^T by the int8 products (cuda/qgemv.cu; kernel "auto", "qgemv" or "mmq") or,
// Batched, by the f16 tensor-core product (cuda/gemm.cu)
int mmq_from(const std::string& kernel) {
  if (kernel == "auto") return -1;
  if (kernel == "qgemv") return 0;
  if (kernel == "mmq") return 1;
  throw std::invalid_argument("kernel must be 'auto', 'qgemv' or 'mmq', got '" + kernel + "'");
}

template <bool Batched>
py::array_t<float> cuda_product_py(int type_id, const py::array& w, int k, const py::array& x_in,
                                   const std::string& kernel) {
  const int from = mmq_from(kernel);
  const KernelTable& kt = *kernel_context().kernels;
  auto x = checked_product(kt, type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
#ifdef LLL_CUDA
  const uint8_t* wp = static_cast<const uint8_t*>(w.data());
  const size_t row_bytes = (size_t)w.strides(0);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  py::gil_scoped_release release;
  if (Batched) cuda::qgemm_host(type_id, wp, row_bytes, m, k, xp, n, yp);
  else cuda::qgemv_host(type_id, wp, row_bytes, m, k, xp, n, yp, from);
#else
  (void)m;
  (void)n;
  (void)from;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return y;
}

// ---- the KV cache and attention kernels (cuda/kv.cu), each against its CPU twin in tests/native/test_cuda_attention.py

// a: a C-contiguous array of V with ndim dimensions; std::invalid_argument naming `name` otherwise
template <class V>
py::array_t<V, py::array::c_style> cuda_kv_array(const py::array& a, int ndim, const char* name) {
  if (!py::isinstance<py::array_t<V>>(a) || a.ndim() != ndim)
    throw std::invalid_argument(std::string(name) + " must be a " + std::to_string(ndim) + "-D " +
                                py::str(py::dtype::of<V>()).cast<std::string>() + " array");
  return py::array_t<V, py::array::c_style>::ensure(a);
}

// a new C-contiguous array equal to a (the device entry points write in place)
template <class V>
py::array_t<V> cuda_kv_copy(const py::array_t<V, py::array::c_style>& a) {
  py::array_t<V> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
  std::memcpy(out.mutable_data(), a.data(), (size_t)a.size() * sizeof(V));
  return out;
}

// x float32 [T, row] quantized into rows slots[t] of a copy of pool uint8 [n_slots, kv_row_bytes(kv_type, row)]
py::array_t<uint8_t> cuda_kv_write_py(const std::string& kv_type, const py::array& x_in, int head_dim,
                                      const py::array& slots_in, const py::array& pool_in) {
  const KvType t = kv_type_of(kv_type, "kv_type");
  auto x = cuda_kv_array<float>(x_in, 2, "x");
  auto slots = cuda_kv_array<int32_t>(slots_in, 1, "slots");
  auto pool = cuda_kv_array<uint8_t>(pool_in, 2, "pool");
  const int T = (int)x.shape(0), row = (int)x.shape(1);
  kv_check_len(t, head_dim, "head_dim");
  if (row % head_dim) throw std::invalid_argument("x: a row must be whole heads of head_dim values");
  if (slots.shape(0) != T) throw std::invalid_argument("slots must have one entry per row of x");
  if ((size_t)pool.shape(1) != kv_row_bytes(t, row))
    throw std::invalid_argument("pool must be uint8 [n_slots, " + std::to_string(kv_row_bytes(t, row)) + "]");
  py::array_t<uint8_t> out = cuda_kv_copy(pool);
#ifdef LLL_CUDA
  const float* xp = x.data();
  const int32_t* sp = slots.data();
  const int n_slots = (int)pool.shape(0);
  uint8_t* op = out.mutable_data();
  py::gil_scoped_release release;
  cuda::kv_write_host((int)t, xp, T, row, head_dim, sp, n_slots, op);
#else
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return out;
}

// KvTransforms::to_cache (and from_cache on att when given) on the device: copies of q [n, n_head, head_dim],
// k, v [n, n_kv_head, head_dim], att [n, n_head, head_dim]; k_scale, k_bias, v_bias [n_kv_head * head_dim]
py::tuple cuda_kv_transforms_py(const py::array& q_in, const py::array& k_in, const py::array& v_in,
                                const std::optional<py::array>& att_in, bool rotate_k, bool rotate_v, bool center_k,
                                bool center_v, const std::optional<py::array>& k_scale_in,
                                const std::optional<py::array>& k_bias_in, const std::optional<py::array>& v_bias_in) {
  auto q = cuda_kv_array<float>(q_in, 3, "q");
  auto k = cuda_kv_array<float>(k_in, 3, "k");
  auto v = cuda_kv_array<float>(v_in, 3, "v");
  const int n = (int)q.shape(0), n_head = (int)q.shape(1), n_kv_head = (int)k.shape(1), hd = (int)q.shape(2);
  if (k.shape(0) != n || k.shape(2) != hd || v.shape(0) != n || v.shape(1) != n_kv_head || v.shape(2) != hd)
    throw std::invalid_argument("k and v must both be [n, n_kv_head, head_dim] with q's n and head_dim");
  auto channels = [&](const std::optional<py::array>& a, const char* name) {
    py::array_t<float, py::array::c_style> c;
    if (a) {
      c = cuda_kv_array<float>(*a, 1, name);
      if (c.shape(0) != (py::ssize_t)n_kv_head * hd)
        throw std::invalid_argument(std::string(name) + " must have n_kv_head * head_dim entries");
    }
    return c;
  };
  const auto k_scale = channels(k_scale_in, "k_scale"), k_bias = channels(k_bias_in, "k_bias");
  const auto v_bias = channels(v_bias_in, "v_bias");
  py::array_t<float> qo = cuda_kv_copy(q), ko = cuda_kv_copy(k), vo = cuda_kv_copy(v);
  py::object att_out = py::none();
  float* ap = nullptr;
  if (att_in) {
    auto att = cuda_kv_array<float>(*att_in, 3, "att");
    if (att.shape(0) != n || att.shape(1) != n_head || att.shape(2) != hd)
      throw std::invalid_argument("att must be [n, n_head, head_dim] as q");
    py::array_t<float> a = cuda_kv_copy(att);
    ap = a.mutable_data();
    att_out = a;
  }
#ifdef LLL_CUDA
  const float* ks = k_scale_in ? k_scale.data() : nullptr;
  const float* kb = k_bias_in ? k_bias.data() : nullptr;
  const float* vb = v_bias_in ? v_bias.data() : nullptr;
  float *qp = qo.mutable_data(), *kp = ko.mutable_data(), *vp = vo.mutable_data();
  {
    py::gil_scoped_release release;
    cuda::kv_transforms_host(rotate_k, rotate_v, center_k, center_v, ks, kb, vb, qp, kp, vp, ap, n, n_head,
                             n_kv_head, hd);
  }
#else
  (void)ap;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return py::make_tuple(qo, ko, vo, att_out);
}

// paged attention on the device: q float32 [T, n_head, head_dim]; k_pool, v_pool uint8 [n_slots, row bytes of
// n_kv_head * head_dim values in k_type / v_type]; positions, seq_index int32 [T]; block_tables int32
// [n_seq, max_blocks] -> out float32 [T, n_head, head_dim]; Tiled: by the tiled prefill kernel
// (cuda/attention_tiles.cu), the same arguments and checks
template <bool Tiled>
py::array_t<float> cuda_paged_attention_py(const py::array& q_in, const std::string& k_type,
                                           const py::array& k_pool_in, const std::string& v_type,
                                           const py::array& v_pool_in, const py::array& positions_in,
                                           const py::array& seq_index_in, const py::array& block_tables_in,
                                           int n_kv_head, int block_size, float scale, float softcap, int window,
                                           bool split) {
  const KvType kt = kv_type_of(k_type, "k_type"), vt = kv_type_of(v_type, "v_type");
  auto q = cuda_kv_array<float>(q_in, 3, "q");
  auto k_pool = cuda_kv_array<uint8_t>(k_pool_in, 2, "k_pool");
  auto v_pool = cuda_kv_array<uint8_t>(v_pool_in, 2, "v_pool");
  auto positions = cuda_kv_array<int32_t>(positions_in, 1, "positions");
  auto seq_index = cuda_kv_array<int32_t>(seq_index_in, 1, "seq_index");
  auto block_tables = cuda_kv_array<int32_t>(block_tables_in, 2, "block_tables");
  const int T = (int)q.shape(0), n_head = (int)q.shape(1), hd = (int)q.shape(2);
  if (n_kv_head <= 0) throw std::invalid_argument("n_kv_head must be positive");
  kv_check_len(kt, hd, "k_type");
  kv_check_len(vt, hd, "v_type");
  if ((size_t)k_pool.shape(1) != kv_row_bytes(kt, n_kv_head * hd) ||
      (size_t)v_pool.shape(1) != kv_row_bytes(vt, n_kv_head * hd) || k_pool.shape(0) != v_pool.shape(0))
    throw std::invalid_argument("k_pool and v_pool must be [n_slots, row bytes] of n_kv_head * head_dim values");
  if (positions.shape(0) != T || seq_index.shape(0) != T)
    throw std::invalid_argument("positions and seq_index must have one entry per row of q");
  py::array_t<float> out({(py::ssize_t)T, (py::ssize_t)n_head, (py::ssize_t)hd});
#ifdef LLL_CUDA
  const int n_seq = (int)block_tables.shape(0), max_blocks = (int)block_tables.shape(1);
  const int n_slots = (int)k_pool.shape(0);
  const int32_t *pp = positions.data(), *sp = seq_index.data(), *bp = block_tables.data();
  const float* qp = q.data();
  const uint8_t *kp = k_pool.data(), *vp = v_pool.data();
  float* op = out.mutable_data();
  py::gil_scoped_release release;
  if (Tiled)
    cuda::paged_attention_tiled_host(n_head, n_kv_head, hd, block_size, scale, softcap, window, T, pp, sp, bp, n_seq,
                                     max_blocks, qp, (int)kt, kp, (int)vt, vp, n_slots, op);
  else
    cuda::paged_attention_host(n_head, n_kv_head, hd, block_size, scale, softcap, window, T, pp, sp, bp, n_seq,
                               max_blocks, qp, (int)kt, kp, (int)vt, vp, n_slots, op, split);
#else
  (void)block_size;
  (void)split;
  (void)scale;
  (void)softcap;
  (void)window;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return out;
}

// ---- the batched product and the embedding lookup (cuda/gemm.cu), against gguf and the CPU in
// tests/native/test_cuda_gemm.py


// out[n, k] = rows ids[i] of W[m, k] dequantized, times scale (the embedding lookup); ids int32 [n]
py::array_t<float> cuda_dequant_rows_py(int type_id, const py::array& w, int k, const py::array& ids_in,
                                        float scale) {
  const KernelTable& kt = *kernel_context().kernels;
  check_weight_rows(kt, type_id, w, k, "weights");
  if (!py::isinstance<py::array_t<int32_t>>(ids_in) || ids_in.ndim() != 1)
    throw std::invalid_argument("ids must be a 1-D int32 array");
  auto ids = py::array_t<int32_t, py::array::c_style>::ensure(ids_in);
  const int m = (int)w.shape(0), n = (int)ids.shape(0);
  py::array_t<float> out({(py::ssize_t)n, (py::ssize_t)k});
#ifdef LLL_CUDA
  const uint8_t* wp = static_cast<const uint8_t*>(w.data());
  const size_t row_bytes = (size_t)w.strides(0);
  const int32_t* ip = ids.data();
  float* op = out.mutable_data();
  py::gil_scoped_release release;
  cuda::dequant_rows_host(type_id, wp, row_bytes, m, k, ip, n, scale, op);
#else
  (void)m;
  (void)n;
  (void)scale;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return out;
}

// ---- sampling's candidate selection (cuda/top_k.cu), against numpy and sampling._largest in
// tests/native/test_cuda_top_k.py

// x float32 [n, stride] -> (ids int32 [n, k], vals float32 [n, k]): the k largest of x[:, :n_valid] a row, by value
// descending (NaN largest), ties by index
py::tuple cuda_top_k_py(const py::array& x_in, int n_valid, int k, bool sliced) {
  auto x = cuda_kv_array<float>(x_in, 2, "x");
  if (k < 1) throw std::invalid_argument("k must be >= 1, got " + std::to_string(k));
  const int n = (int)x.shape(0), stride = (int)x.shape(1);
  py::array_t<int32_t> ids({(py::ssize_t)n, (py::ssize_t)k});
  py::array_t<float> vals({(py::ssize_t)n, (py::ssize_t)k});
#ifdef LLL_CUDA
  const float* xp = x.data();
  int32_t* ip = ids.mutable_data();
  float* vp = vals.mutable_data();
  {
    py::gil_scoped_release release;
    cuda::top_k_host(xp, n, stride, n_valid, k, ip, vp, sliced);
  }
#else
  (void)n;
  (void)stride;
  (void)n_valid;
  (void)sliced;
  throw std::runtime_error("the CUDA backend is not compiled in");
#endif
  return py::make_tuple(ids, vals);
}


// the int8 products' device source run on the CPU (emulated_products.h): y[n, m] = x[n, k] @ W[m, k]^T (+ bias)
// (+ y_in, as the residual stream's add), by the decode kernel ("qgemv") or the tile kernel ("mmq")
py::array_t<float> cuda_emulated_product_py(int type_id, const py::array& w, int k, const py::array& x_in,
                                            const std::string& kernel, const std::optional<py::array>& bias_in,
                                            const std::optional<py::array>& y_in) {
  if (kernel != "qgemv" && kernel != "mmq" && kernel != "qgemv-own-sums")
    throw std::invalid_argument("kernel must be 'qgemv', 'qgemv-own-sums' or 'mmq', got '" + kernel + "'");
  const KernelTable& kt = *kernel_context().kernels;
  auto x = checked_product(kt, type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
  std::optional<py::array_t<float, py::array::c_style | py::array::forcecast>> bias;
  if (bias_in) {
    bias.emplace(*bias_in);
    if (bias->ndim() != 1 || bias->shape(0) != m) throw std::invalid_argument("bias must be float32 [m]");
  }
  if (y_in) {
    py::array_t<float, py::array::c_style | py::array::forcecast> y0(*y_in);
    if (y0.ndim() != 2 || y0.shape(0) != n || y0.shape(1) != m) throw std::invalid_argument("y_in must be float32 [n, m]");
    std::memcpy(y.mutable_data(), y0.data(), sizeof(float) * (size_t)n * m);
  }
  const uint8_t* wp = static_cast<const uint8_t*>(w.data());
  const size_t row_bytes = (size_t)w.strides(0);
  const float* bp = bias ? bias->data() : nullptr;
  const float* xp = x.data();
  float* yp = y.mutable_data();
  py::gil_scoped_release release;
  emulated_int8_product(type_id, wp, row_bytes, m, k, xp, n, yp, bp, y_in.has_value(), kernel == "mmq",
                        kernel == "qgemv-own-sums");
  return y;
}

// the decode kernel with a follow-up in its tail, its source run on the CPU (emulated_int8_then): with up, the
// products gate = x @ W^T and up = x @ U^T and their gated activation; without, y = y_in + x @ W^T and its RMSNorm by
// norm (eps). Returns (y, up's y or None, the norm's output or None, xq [n, m] int8, xd [n, m / 32]).
py::tuple cuda_emulated_then_py(int type_id, const py::array& w, int k, const py::array& x_in,
                                const std::optional<py::array>& up, bool silu, const std::optional<py::array>& norm_in,
                                float eps, const std::optional<py::array>& y_in) {
  const KernelTable& kt = *kernel_context().kernels;
  auto x = checked_product(kt, type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  if (up.has_value() == norm_in.has_value()) throw std::invalid_argument("give up (the gated activation) or norm, one of them");
  if (up && (up->ndim() != 2 || up->shape(0) != m || up->strides(0) != w.strides(0) || up->dtype().itemsize() != 1 ||
             !(up->flags() & py::array::c_style)))
    throw std::invalid_argument("up must be laid out as w: uint8 [m, row_bytes]");
  std::optional<py::array_t<float, py::array::c_style | py::array::forcecast>> norm;
  if (norm_in) {
    norm.emplace(*norm_in);
    if (norm->ndim() != 1 || norm->shape(0) != m) throw std::invalid_argument("norm must be float32 [m]");
  }
  if (m % 32) throw std::invalid_argument("m must be a multiple of 32");
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m}), out({(py::ssize_t)n, (py::ssize_t)m});
  py::array_t<float> y2({(py::ssize_t)n, (py::ssize_t)m}), xd({(py::ssize_t)n, (py::ssize_t)(m / 32)});
  py::array_t<int8_t> xq({(py::ssize_t)n, (py::ssize_t)m});
  std::memset(y.mutable_data(), 0, sizeof(float) * (size_t)n * m);
  if (y_in) {
    if (up) throw std::invalid_argument("y_in goes with norm (the residual stream)");
    py::array_t<float, py::array::c_style | py::array::forcecast> y0(*y_in);
    if (y0.ndim() != 2 || y0.shape(0) != n || y0.shape(1) != m) throw std::invalid_argument("y_in must be float32 [n, m]");
    std::memcpy(y.mutable_data(), y0.data(), sizeof(float) * (size_t)n * m);
  }
  const uint8_t* wp = static_cast<const uint8_t*>(w.data());
  const uint8_t* up_p = up ? static_cast<const uint8_t*>(up->data()) : nullptr;
  const size_t row_bytes = (size_t)w.strides(0);
  const float* xp = x.data();
  const float* np = norm ? norm->data() : nullptr;
  float *yp = y.mutable_data(), *y2p = y2.mutable_data(), *op = out.mutable_data(), *dp = xd.mutable_data();
  int8_t* qp = xq.mutable_data();
  {
    py::gil_scoped_release release;
    emulated_int8_then(type_id, wp, up_p, row_bytes, m, k, xp, n, yp, y2p, silu, np, eps, op, qp, dp);
  }
  return py::make_tuple(y, up ? py::object(y2) : py::none(), norm ? py::object(out) : py::none(), xq, xd);
}

}  // namespace

void bind_cuda(py::module_& m, py::module_& testing) {
  m.def("cuda_info", &cuda_info, "the CUDA backend: compiled, devices, versions, the reason when absent");
  testing.def("cuda_qgemv", &cuda_product_py<false>, py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
              py::arg("kernel") = "auto",
              "y[n, m] = x[n, k] @ W[m, k]^T on CUDA device 0 (any n) by the int8 products: kernel 'qgemv' (decode), "
              "'mmq' (tensor-core tiles) or 'auto' (LOCALLLM_CUDA_MMQ's choice by n)");
  testing.def("cuda_emulated_product", &cuda_emulated_product_py, py::arg("type_id"), py::arg("w"), py::arg("k"),
              py::arg("x"), py::arg("kernel"), py::arg("bias") = py::none(), py::arg("y_in") = py::none(),
              "y[n, m] = x[n, k] @ W[m, k]^T (+ bias) (+ y_in) by the CUDA int8 products' source run on the CPU (the "
              "warp emulator): kernel 'qgemv' (decode), 'qgemv-own-sums' (decode as LOCALLLM_CUDA_XSUM=0 launches it) or "
              "'mmq' (tensor-core tiles); no device needed");
  testing.def("emulated_barrier_case", &emulated_barrier_case, py::arg("name"),
              "the warp emulator's rules on a two-warp kernel (emulated_products.h): 'aligned', 'early-exit', "
              "'divergent', 'deadlock', 'exit-in-collective' (these three raise), 'racy'");
  testing.def("emulator_reverse", &emu::set_reverse, py::arg("reverse"),
              "run the warp emulator's blocks, and each block's threads, in reverse order (True) or forward; returns "
              "whether they were reversed");
  testing.def("cuda_emulated_then", &cuda_emulated_then_py, py::arg("type_id"), py::arg("w"), py::arg("k"),
              py::arg("x"), py::kw_only(), py::arg("up") = py::none(), py::arg("silu") = true,
              py::arg("norm") = py::none(), py::arg("eps") = 1e-6f, py::arg("y_in") = py::none(),
              "the CUDA decode kernel with a follow-up in its tail, run on the CPU: with up, gate and up's products "
              "and act(gate) * up quantized per 32; with norm, y_in + x @ W^T and its RMSNorm, quantized. Returns "
              "(y, up_y or None, normed or None, xq, xd)");
  testing.def("cuda_kv_write", &cuda_kv_write_py, py::arg("kv_type"), py::arg("x"), py::arg("head_dim"),
              py::arg("slots"), py::arg("pool"),
              "a copy of pool with rows slots[t] = x[t] quantized on CUDA device 0 (kv_write)");
  testing.def("cuda_kv_transforms", &cuda_kv_transforms_py, py::arg("q"), py::arg("k"), py::arg("v"),
              py::arg("att") = py::none(), py::kw_only(), py::arg("rotate_k"), py::arg("rotate_v"),
              py::arg("center_k"), py::arg("center_v"), py::arg("k_scale") = py::none(),
              py::arg("k_bias") = py::none(), py::arg("v_bias") = py::none(),
              "(q, k, v, att) after KvTransforms::to_cache (and from_cache on att) on CUDA device 0");
  testing.def("cuda_paged_attention", &cuda_paged_attention_py<false>, py::arg("q"), py::arg("k_type"), py::arg("k_pool"),
              py::arg("v_type"), py::arg("v_pool"), py::arg("positions"), py::arg("seq_index"),
              py::arg("block_tables"), py::kw_only(), py::arg("n_kv_head"), py::arg("block_size"),
              py::arg("scale"), py::arg("softcap") = 0.f, py::arg("window") = 0, py::arg("split") = false,
              "out[T, n_head, head_dim]: causal paged attention over the pools on CUDA device 0 (split: a thread "
              "block per chunk of 128 positions, the chunks merged by the row's last; the same bits)");
  testing.def("cuda_qgemm",
              [](int type_id, const py::array& w, int k, const py::array& x) {
                return cuda_product_py<true>(type_id, w, k, x, "auto");
              },
              py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
              "y[n, m] = x[n, k] @ W[m, k]^T on CUDA device 0 (any n): the tensor-core batched product");
  testing.def("cuda_dequant_rows", &cuda_dequant_rows_py, py::arg("type_id"), py::arg("w"), py::arg("k"),
              py::arg("ids"), py::arg("scale") = 1.0f,
              "out[n, k] = rows ids of W dequantized times scale on CUDA device 0: the embedding lookup");
  testing.def("cuda_top_k", &cuda_top_k_py, py::arg("x"), py::arg("n_valid"), py::arg("k"), py::arg("sliced") = true,
              "(ids[n, k], vals[n, k]): the k largest of x[n, :n_valid] a row on CUDA device 0, by value "
              "descending (NaN largest), ties by index; sliced: rows of 8,192 and more by slices first, as a step "
              "takes them (the same result)");
  testing.def("cuda_paged_attention_tiled", &cuda_paged_attention_py<true>, py::arg("q"), py::arg("k_type"),
              py::arg("k_pool"), py::arg("v_type"), py::arg("v_pool"), py::arg("positions"), py::arg("seq_index"),
              py::arg("block_tables"), py::kw_only(), py::arg("n_kv_head"), py::arg("block_size"),
              py::arg("scale"), py::arg("softcap") = 0.f, py::arg("window") = 0, py::arg("split") = false,
              "cuda_paged_attention by the tiled prefill kernel (tiles of consecutive rows of one sequence; split "
              "is ignored)");
}

}  // namespace lll
