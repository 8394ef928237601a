// Bindings of localllm._native.testing: entry points the product never calls, which the tests use to check
// the pieces of the forward step on their own (KV row formats, the Hadamard rotation, the FFN activation,
// activation quantization, several products sharing one input) and the type table against
// runtime/model/quant_types.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "kernel_context.h"
#include "kv_format.h"
#include "matmul.h"
#include "ops.h"
#include "top_k.h"

namespace py = pybind11;

namespace lll {

namespace {

// x: float32 [n, k] C-contiguous -> a checked view; names the argument otherwise
py::array_t<float> float_rows(const py::array& x, const char* name) {
  auto a = py::array_t<float, py::array::c_style>::ensure(x);
  if (!a || a.ndim() != 2 || !py::isinstance<py::array_t<float>>(x))
    throw std::invalid_argument(std::string(name) + " must be a 2-D float32 array");
  return a;
}

// x: float32 [n, k] -> uint8 [n, kv_row_bytes(type, k)]: the KV cache's write, row by row
py::array_t<uint8_t> kv_quantize_py(const std::string& type, const py::array& x) {
  const KvType t = kv_type_of(type, "kv_type");
  auto a = float_rows(x, "x");
  const int n = (int)a.shape(0), k = (int)a.shape(1);
  kv_check_len(t, k, "x");
  const size_t rb = kv_row_bytes(t, k);
  py::array_t<uint8_t> out({(py::ssize_t)n, (py::ssize_t)rb});
  for (int r = 0; r < n; ++r) kv_quantize_row(t, a.data() + (size_t)r * k, k, out.mutable_data() + r * rb);
  return out;
}

// rows: uint8 [n, kv_row_bytes(type, k)] -> float32 [n, k]: what the attention reads
py::array_t<float> kv_dequantize_py(const std::string& type, const py::array& rows, int k) {
  const KvType t = kv_type_of(type, "kv_type");
  kv_check_len(t, k, "k");
  auto a = py::array_t<uint8_t, py::array::c_style>::ensure(rows);
  const size_t rb = kv_row_bytes(t, k);
  if (!a || a.ndim() != 2 || !py::isinstance<py::array_t<uint8_t>>(rows) || (size_t)a.shape(1) != rb)
    throw std::invalid_argument("rows must be a uint8 array [n, " + std::to_string(rb) + "] for " + std::to_string(k) +
                                " " + type + " values");
  const int n = (int)a.shape(0);
  py::array_t<float> out({(py::ssize_t)n, (py::ssize_t)k});
  for (int r = 0; r < n; ++r) kv_dequantize_row(t, a.data() + r * rb, k, out.mutable_data() + (size_t)r * k);
  return out;
}

// x: float32 [n, dim] -> a rotated copy (hadamard_rotate)
py::array_t<float> hadamard_py(const py::array& x) {
  auto a = float_rows(x, "x");
  if (a.shape(1) < 1) throw std::invalid_argument("x must have at least one column");
  py::array_t<float> out({a.shape(0), a.shape(1)});
  std::memcpy(out.mutable_data(), a.data(), (size_t)a.size() * sizeof(float));
  hadamard_rotate(out.mutable_data(), (int)a.shape(0), (int)a.shape(1));
  return out;
}

// the FFN activation as the forward pass applies it: g * u * sigmoid(g), elementwise
py::array_t<float> silu_mul_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& g,
                               const py::array_t<float, py::array::c_style | py::array::forcecast>& u) {
  if (g.ndim() != 1 || u.ndim() != 1 || g.shape(0) != u.shape(0))
    throw std::invalid_argument("silu_mul needs two 1-D float32 arrays of one length");
  py::array_t<float> out(g.shape(0));
  std::memcpy(out.mutable_data(), g.data(), (size_t)g.shape(0) * sizeof(float));
  silu_mul(out.mutable_data(), u.data(), (size_t)g.shape(0));
  return out;
}

// gpt-oss's clamped SwiGLU as the forward pass applies it (ops.h swiglu_oai_mul), elementwise
py::array_t<float> swiglu_oai_mul_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& g,
                                     const py::array_t<float, py::array::c_style | py::array::forcecast>& u) {
  if (g.ndim() != 1 || u.ndim() != 1 || g.shape(0) != u.shape(0))
    throw std::invalid_argument("swiglu_oai_mul needs two 1-D float32 arrays of one length");
  py::array_t<float> out(g.shape(0));
  std::memcpy(out.mutable_data(), g.data(), (size_t)g.shape(0) * sizeof(float));
  swiglu_oai_mul(out.mutable_data(), u.data(), (size_t)g.shape(0));
  return out;
}

// x: float32 [n, dim], w, b: [dim] -> LayerNorm of each row (ops.h layer_norm); b None: no bias
py::array_t<float> layer_norm_py(const py::array& x, const py::array_t<float, py::array::c_style | py::array::forcecast>& w,
                                 const py::object& b, float eps) {
  auto a = float_rows(x, "x");
  const int n = (int)a.shape(0), dim = (int)a.shape(1);
  if (w.ndim() != 1 || w.shape(0) != dim) throw std::invalid_argument("w must be float32 [dim]");
  py::array_t<float, py::array::c_style | py::array::forcecast> bias;
  if (!b.is_none()) {
    bias = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(b);
    if (!bias || bias.ndim() != 1 || bias.shape(0) != dim) throw std::invalid_argument("b must be float32 [dim]");
  }
  py::array_t<float> out({(py::ssize_t)n, (py::ssize_t)dim});
  layer_norm(a.data(), w.data(), b.is_none() ? nullptr : bias.data(), n, dim, eps, out.mutable_data());
  return out;
}

// BERT's feed-forward activation as the forward pass applies it (ops.h gelu_tanh), elementwise
py::array_t<float> gelu_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& x) {
  if (x.ndim() != 1) throw std::invalid_argument("gelu needs a 1-D float32 array");
  py::array_t<float> out(x.shape(0));
  std::memcpy(out.mutable_data(), x.data(), (size_t)x.shape(0) * sizeof(float));
  gelu_tanh(out.mutable_data(), (size_t)x.shape(0));
  return out;
}

// activations as a product quantizes them: (xq int8 [n, k], dx [n, k/32], sum16 [n, k/16])
py::tuple quantize_x_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& x) {
  if (x.ndim() != 2 || x.shape(1) % 32 || x.shape(1) == 0)
    throw std::invalid_argument("x must be [n, k] with k a multiple of 32");
  KernelContext ctx = kernel_context();
  QuantizedX q;
  {
    py::gil_scoped_release nogil;
    quantize_x(*ctx.kernels, x.data(), (int)x.shape(0), (int)x.shape(1), (size_t)x.shape(1), q, ctx.pool);
  }
  const py::ssize_t n = x.shape(0), k = x.shape(1);
  py::array_t<int8_t> xq({n, k});
  py::array_t<float> dx({n, k / 32});
  py::array_t<int32_t> s16({n, k / 16});
  std::copy(q.xq.begin(), q.xq.end(), xq.mutable_data());
  std::copy(q.dx.begin(), q.dx.end(), dx.mutable_data());
  std::copy(q.sum16.begin(), q.sum16.end(), s16.mutable_data());
  return py::make_tuple(xq, dx, s16);
}

// products: [(type_id, rows)] sharing x -> [y [n, m_j]]
py::list matmul_multi_py(const std::vector<std::pair<int, py::array>>& products, int k, const py::array& x_in) {
  if (products.empty()) throw std::invalid_argument("matmul_multi needs at least one product");
  KernelContext ctx = kernel_context();
  std::vector<MatmulJob> jobs;
  std::vector<py::array_t<float>> ys;
  py::array_t<float, py::array::c_style> x;
  for (const auto& [type_id, w] : products) {
    x = checked_product(*ctx.kernels, type_id, w, k, x_in);
    ys.emplace_back(std::vector<py::ssize_t>{x.shape(0), w.shape(0)});
    jobs.push_back({type_id, (const uint8_t*)w.data(), (size_t)w.strides(0), (int)w.shape(0), ys.back().mutable_data()});
  }
  const int n = (int)x.shape(0);
  const float* xp = x.data();
  {
    py::gil_scoped_release nogil;
    matmul_multi(*ctx.kernels, jobs.data(), (int)jobs.size(), k, xp, n, ctx.pool);
  }
  py::list out;
  for (auto& y : ys) out.append(y);
  return out;
}

// rows: uint8 [nr <= 16, row_bytes] of type_id, k weights a row -> (u_il [k/4, 16, 4], s [k/G, 16], m [k/G, 16]) in
// the tile layout, from the active table's unpack_il (direct) or its unpack + interleave16; lanes nr..15 are
// unspecified (copies of a row, or zeros)
py::tuple unpack_tile_py(int type_id, const py::array& rows_in, int k, bool direct) {
  KernelContext ctx = kernel_context();
  const KernelTable& kt = *ctx.kernels;
  const TypeInfo& ti = checked_type(kt, type_id, k, "rows");
  auto rows = py::array_t<uint8_t, py::array::c_style>::ensure(rows_in);
  if (!rows || rows.ndim() != 2 || rows.shape(0) < 1 || rows.shape(0) > TILE_M ||
      (size_t)rows.shape(1) != row_bytes_of(ti, k) || !kt.unpack[type_id])
    throw std::invalid_argument("rows must be uint8 [1..16, row bytes] of a quantized type");
  if (direct && !kt.unpack_il[type_id])
    throw std::invalid_argument(std::string(kt.name) + " has no unpack_il for " + ti.name);
  const QuantLayout L = quant_layout(ti.type);
  const int nr = (int)rows.shape(0), ng = k / L.group, sw = std::max(16, (ng + 15) / 16 * 16);
  py::array_t<uint8_t> u({k / 4, TILE_M, 4});
  std::vector<float> s((size_t)sw * TILE_M), m((size_t)sw * TILE_M);
  const uint8_t* w = rows.data();
  const size_t rb = (size_t)rows.shape(1);
  if (direct) {
    kt.unpack_il[type_id](w, rb, nr, k, u.mutable_data(), s.data(), m.data());
  } else {
    std::vector<uint8_t> ur((size_t)TILE_M * k);
    std::vector<float> sr((size_t)TILE_M * sw), mr((size_t)TILE_M * sw);
    kt.unpack[type_id](w, rb, nr, k, ur.data(), sr.data(), mr.data(), sw);
    kt.interleave16(ur.data(), k, u.mutable_data());
    kt.interleave16((const uint8_t*)sr.data(), 4 * sw, (uint8_t*)s.data());
    kt.interleave16((const uint8_t*)mr.data(), 4 * sw, (uint8_t*)m.data());
  }
  py::array_t<float> so({ng, TILE_M}), mo({ng, TILE_M});
  std::memcpy(so.mutable_data(), s.data(), sizeof(float) * ng * TILE_M);
  std::memcpy(mo.mutable_data(), m.data(), sizeof(float) * ng * TILE_M);
  if (!L.has_min) std::fill(mo.mutable_data(), mo.mutable_data() + ng * TILE_M, 0.f);
  return py::make_tuple(u, so, mo);
}

// [(id, name, block_size, type_size)] of every type the kernels compute (type_info)
py::list type_table_py() {
  py::list out;
  for (int id = 0; id < 40; ++id)
    if (const TypeInfo* ti = type_info(id)) out.append(py::make_tuple(id, ti->name, ti->block_size, ti->type_size));
  return out;
}

// x float32 [n, stride] -> (ids int32 [n, k], vals float32 [n, k]): top_k_row over each row's first n_valid
py::tuple top_k_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& x, int n_valid, int k) {
  if (x.ndim() != 2) throw std::invalid_argument("x must be 2-D [n, stride]");
  const int n = (int)x.shape(0), stride = (int)x.shape(1);
  if (n_valid < 1 || n_valid > stride || k < 1 || k > std::min(n_valid, TOP_K_MAX))
    throw std::invalid_argument("need 1 <= n_valid <= stride and 1 <= k <= min(n_valid, " + std::to_string(TOP_K_MAX) +
                                ")");
  py::array_t<int32_t> ids({(py::ssize_t)n, (py::ssize_t)k});
  py::array_t<float> vals({(py::ssize_t)n, (py::ssize_t)k});
  for (int i = 0; i < n; ++i)
    top_k_row(x.data() + (size_t)i * stride, n_valid, k, ids.mutable_data() + (size_t)i * k,
              vals.mutable_data() + (size_t)i * k);
  return py::make_tuple(ids, vals);
}

}  // namespace

void bind_testing(py::module_& m) {
  m.def("kv_quantize", &kv_quantize_py, py::arg("kv_type"), py::arg("x"),
        "KV rows float32 [n, k] -> uint8 [n, row bytes] in 'f16', 'q8_0' or 'q4_0'");
  m.def("kv_dequantize", &kv_dequantize_py, py::arg("kv_type"), py::arg("rows"), py::arg("k"),
        "KV rows uint8 [n, row bytes] -> float32 [n, k]");
  m.def("hadamard", &hadamard_py, py::arg("x"), "float32 [n, dim] -> H x / sqrt(m) per group of m dims");
  m.def("silu_mul", &silu_mul_py, py::arg("g"), py::arg("u"), "g * sigmoid(g) * u, as the FFN computes it");
  m.def("swiglu_oai_mul", &swiglu_oai_mul_py, py::arg("g"), py::arg("u"),
        "min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1), as gpt-oss's experts compute it");
  m.def("layer_norm", &layer_norm_py, py::arg("x"), py::arg("w"), py::arg("b"), py::arg("eps"),
        "(x - mean) / sqrt(var + eps) * w + b per row, as an encoder's norms compute it");
  m.def("gelu", &gelu_py, py::arg("x"), "0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), BERT's activation");
  m.def("quantize_x", &quantize_x_py, py::arg("x"),
        "activations -> (xq int8 [n,k], dx [n,k/32], sum16 [n,k/16]), as every product quantizes them");
  m.def("matmul_multi", &matmul_multi_py, py::arg("products"), py::arg("k"), py::arg("x"),
        "[x @ W_j^T] for [(type_id, W_j)] sharing x, as the forward step runs q/k/v and gate/up");
  m.def("unpack_tile", &unpack_tile_py, py::arg("type_id"), py::arg("rows"), py::arg("k"), py::arg("direct"),
        "rows of one type -> the tile layout (u_il, s, m), by unpack_il (direct) or unpack + interleave16");
  m.def("type_table", &type_table_py, "[(id, name, block_size, type_size)] of the types the kernels compute");
  m.def("top_k", &top_k_py, py::arg("x"), py::arg("n_valid"), py::arg("k"),
        "the k largest of each row's first n_valid values, value descending, ties by index: (ids, vals)");
}

}  // namespace lll
