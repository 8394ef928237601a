// The only file that includes pybind11. Checks dtype, shape and contiguity of every array, releases
// the GIL around native work, and turns C++ exceptions into Python ones (invalid_argument -> ValueError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string_view>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "backend.h"
#include "bandwidth.h"
#include "cpu_features.h"
#include "forward.h"
#include "matmul.h"
#include "ops.h"

namespace py = pybind11;
using namespace lll;

namespace {

std::unique_ptr<CpuBackend> g_backend;
std::mutex g_mu;

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n ? (int)n : 1;
}

CpuBackend& backend() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_backend) {
    const char* env = std::getenv("LOCALLLM_CPU");
    g_backend.reset(new CpuBackend(kernels_for(env ? env : ""), default_threads()));
  }
  return *g_backend;
}

void configure(const std::string& path, int threads) {
  if (threads < 0 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");
  const KernelTable* kt = kernels_for(path);
  std::lock_guard<std::mutex> lk(g_mu);
  g_backend.reset(new CpuBackend(kt, threads ? threads : default_threads()));
}

using u8array = py::array_t<uint8_t, py::array::forcecast>;

// a [rows, row_bytes] uint8 matrix whose rows are contiguous (any row stride)
void check_rows(const py::array& w, const char* what) {
  if (w.dtype().kind() != 'u' || w.itemsize() != 1) throw std::invalid_argument(std::string(what) + " must be uint8");
  if (w.ndim() != 2) throw std::invalid_argument(std::string(what) + " must be 2-D [rows, row_bytes]");
  if (w.shape(1) > 1 && w.strides(1) != 1)
    throw std::invalid_argument(std::string(what) + " rows must be contiguous");
  if (w.strides(0) < w.shape(1)) throw std::invalid_argument(std::string(what) + " rows overlap");
}

// the checked x [n][k] float32 of a product with weight rows w of type_id
py::array_t<float, py::array::c_style> checked_product(int type_id, const py::array& w, int k, const py::array& x_in) {
  check_rows(w, "weights");
  if (x_in.ndim() != 2) throw std::invalid_argument("x must be 2-D [n, k] float32");
  if (!py::isinstance<py::array_t<float>>(x_in)) throw std::invalid_argument("x must be float32");
  auto x = py::array_t<float, py::array::c_style>::ensure(x_in);
  if (!x) throw std::invalid_argument("x must be a C-contiguous float32 array");
  if (x.shape(1) != k) throw std::invalid_argument("x has " + std::to_string(x.shape(1)) + " columns, expected k=" + std::to_string(k));
  const TypeInfo* ti = type_info(type_id);
  if (!ti) throw std::invalid_argument("unsupported tensor type id " + std::to_string(type_id));
  if (k <= 0 || k % ti->block_size)
    throw std::invalid_argument(std::string(ti->name) + ": k=" + std::to_string(k) + " is not a whole number of blocks");
  if (w.shape(1) != (py::ssize_t)(k / ti->block_size) * ti->type_size)
    throw std::invalid_argument(std::string(ti->name) + ": weight rows are " + std::to_string(w.shape(1)) +
                                " bytes, expected " + std::to_string(k / ti->block_size * ti->type_size) + " for k=" + std::to_string(k));
  return x;
}

py::array_t<float> matmul_py(int type_id, const py::array& w, int k, const py::array& x_in) {
  auto x = checked_product(type_id, w, k, x_in);
  const int m = (int)w.shape(0), n = (int)x.shape(0);
  py::array_t<float> y({(py::ssize_t)n, (py::ssize_t)m});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  const float* xp = x.data();
  float* yp = y.mutable_data();
  CpuBackend& be = backend();
  {
    py::gil_scoped_release nogil;
    be.matmul(type_id, wp, stride, m, k, xp, n, yp);
  }
  return y;
}

// products: [(type_id, rows)] sharing x -> [y [n, m_j]]
py::list matmul_multi_py(const std::vector<std::pair<int, py::array>>& products, int k, const py::array& x_in) {
  if (products.empty()) throw std::invalid_argument("matmul_multi needs at least one product");
  std::vector<MatmulJob> jobs;
  std::vector<py::array_t<float>> ys;
  py::array_t<float, py::array::c_style> x;
  for (const auto& [type_id, w] : products) {
    x = checked_product(type_id, w, k, x_in);
    ys.emplace_back(std::vector<py::ssize_t>{x.shape(0), w.shape(0)});
    jobs.push_back({type_id, (const uint8_t*)w.data(), (size_t)w.strides(0), (int)w.shape(0), ys.back().mutable_data()});
  }
  const int n = (int)x.shape(0);
  const float* xp = x.data();
  CpuBackend& be = backend();
  {
    py::gil_scoped_release nogil;
    be.matmul_multi(jobs.data(), (int)jobs.size(), k, xp, n);
  }
  py::list out;
  for (auto& y : ys) out.append(y);
  return out;
}

py::array_t<float> dequantize_py(int type_id, const py::array& w, int k) {
  check_rows(w, "data");
  const TypeInfo* ti = type_info(type_id);
  if (!ti) throw std::invalid_argument("unsupported tensor type id " + std::to_string(type_id));
  if (k <= 0 || k % ti->block_size || w.shape(1) != (py::ssize_t)(k / ti->block_size) * ti->type_size)
    throw std::invalid_argument(std::string(ti->name) + ": rows of " + std::to_string(w.shape(1)) +
                                " bytes do not hold k=" + std::to_string(k) + " weights");
  const int rows = (int)w.shape(0);
  py::array_t<float> out({(py::ssize_t)rows, (py::ssize_t)k});
  const uint8_t* wp = (const uint8_t*)w.data();
  const size_t stride = (size_t)w.strides(0);
  float* op = out.mutable_data();
  CpuBackend& be = backend();
  {
    py::gil_scoped_release nogil;
    be.dequantize(type_id, wp, stride, rows, k, op);
  }
  return out;
}

py::tuple quantize_x_py(const py::array_t<float, py::array::c_style | py::array::forcecast>& x, int block) {
  if (block != 32 && block != 256) throw std::invalid_argument("block must be 32 or 256, got " + std::to_string(block));
  if (x.ndim() != 2 || x.shape(1) % block || x.shape(1) == 0)
    throw std::invalid_argument("x must be [n, k] with k a multiple of " + std::to_string(block));
  CpuBackend& be = backend();
  QuantizedX q;
  {
    py::gil_scoped_release nogil;
    quantize_x(be.kernels(), x.data(), (int)x.shape(0), (int)x.shape(1), (size_t)x.shape(1), q, be.pool(), block);
  }
  const py::ssize_t n = x.shape(0), k = x.shape(1);
  py::array_t<int8_t> xq({n, k});
  py::array_t<float> dx({n, k / block});
  py::array_t<int32_t> s16({n, k / 16});
  std::copy(q.xq.begin(), q.xq.end(), xq.mutable_data());
  std::copy(q.dx.begin(), q.dx.end(), dx.mutable_data());
  std::copy(q.sum16.begin(), q.sum16.end(), s16.mutable_data());
  return py::make_tuple(xq, dx, s16);
}

uint64_t stream_read_py(const py::array& buf, int streams) {
  if (buf.ndim() != 1 || buf.itemsize() != 1 || !(buf.flags() & py::array::c_style))
    throw std::invalid_argument("buffer must be a contiguous 1-D uint8 array");
  const uint8_t* p = (const uint8_t*)buf.data();
  const size_t n = (size_t)buf.shape(0);
  CpuBackend& be = backend();
  py::gil_scoped_release nogil;
  return stream_read(p, n, be.pool(), streams);
}

// the current path's int8 peak loop (kernels.h) on every pool thread, iters steps each: (multiply-adds done in all,
// the checksum of thread 0's chains; every thread computes the same); None where the path has no such loop
py::object int8_peak_py(int64_t iters) {
  if (iters < 1) throw std::invalid_argument("iters must be positive");
  CpuBackend& be = backend();
  const KernelTable& kt = be.kernels();
  if (!kt.int8_peak) return py::none();
  const int nt = be.pool().size();
  std::vector<uint64_t> sums(nt);
  {
    py::gil_scoped_release nogil;
    be.pool().run(nt, [&](int t, int) { sums[t] = kt.int8_peak(iters); });
  }
  return py::make_tuple(py::int_((uint64_t)nt * (uint64_t)iters * (uint64_t)kt.int8_peak_macs), py::int_(sums[0]));
}

// GGUF string arrays: [u64 length][bytes] * count from byte pos of buf. Returns (starts, ends, end) or
// raises ValueError("index N: ...") naming the first bad element; lengths are bounded by the buffer.
py::tuple scan_strings_py(const py::array& buf, size_t pos, size_t count) {
  if (buf.ndim() != 1 || buf.itemsize() != 1) throw std::invalid_argument("buf must be 1-D uint8");
  const uint8_t* p = (const uint8_t*)buf.data();
  const size_t end = (size_t)buf.shape(0);
  if (count > (end - std::min(pos, end)) / 8) throw std::invalid_argument("index 0: absurd array length");
  py::array_t<int64_t> starts((py::ssize_t)count), ends((py::ssize_t)count);
  int64_t* s = starts.mutable_data();
  int64_t* e = ends.mutable_data();
  for (size_t i = 0; i < count; ++i) {
    if (pos > end || end - pos < 8) throw std::invalid_argument("index " + std::to_string(i) + ": truncated");
    uint64_t n;
    std::memcpy(&n, p + pos, 8);
    pos += 8;
    if (n > end - pos) throw std::invalid_argument("index " + std::to_string(i) + ": absurd string length " + std::to_string(n));
    s[i] = (int64_t)pos;
    pos += n;
    e[i] = (int64_t)pos;
  }
  return py::make_tuple(starts, ends, pos);
}

// The strings at [starts[i], ends[i]) of buf (offsets from scan_strings) as a list of str, invalid UTF-8
// replaced by U+FFFD: what bytes.decode("utf-8", "replace") gives, without a Python loop over 150k tokens.
py::list decode_strings_py(const py::array& buf, const py::array_t<int64_t>& starts, const py::array_t<int64_t>& ends) {
  if (buf.ndim() != 1 || buf.itemsize() != 1) throw std::invalid_argument("buf must be 1-D uint8");
  if (starts.ndim() != 1 || ends.ndim() != 1 || starts.shape(0) != ends.shape(0))
    throw std::invalid_argument("starts and ends must be 1-D of one length");
  const char* p = (const char*)buf.data();
  const int64_t size = (int64_t)buf.shape(0);
  const int64_t* s = starts.data();
  const int64_t* e = ends.data();
  const py::ssize_t n = starts.shape(0);
  for (py::ssize_t i = 0; i < n; ++i)
    if (s[i] < 0 || s[i] > e[i] || e[i] > size) throw std::invalid_argument("string " + std::to_string(i) + " out of range");
  py::list out(n);
  for (py::ssize_t i = 0; i < n; ++i) {
    PyObject* u = PyUnicode_DecodeUTF8(p + s[i], (Py_ssize_t)(e[i] - s[i]), "replace");
    if (!u) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), i, u);
  }
  return out;
}

// well-formed UTF-8 (Unicode table 3-7): then decoding a merge's two sides apart and together agree
bool utf8_valid(std::string_view s) {
  const auto* p = (const unsigned char*)s.data();
  size_t i = 0, n = s.size();
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return false;
    for (int j = 2; j < len; ++j)
      if ((p[i + j] & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// BPE merges against the vocabulary, bytewise: true when every merge is well-formed UTF-8 with a space at byte
// k >= 1 (the first such), not last, and its two sides and their concatenation are all token texts (bpe.py's
// check, without building Python strings: ~0.1 s of a 150k-merge vocabulary's load). False means "let the
// Python check decide and name the problem".
bool merges_valid_py(const py::array& tok_buf, const py::array_t<int64_t>& t_starts, const py::array_t<int64_t>& t_ends,
                     const py::array& m_buf, const py::array_t<int64_t>& m_starts, const py::array_t<int64_t>& m_ends) {
  auto view = [](const py::array& buf, const py::array_t<int64_t>& starts, const py::array_t<int64_t>& ends) {
    if (buf.ndim() != 1 || buf.itemsize() != 1 || starts.ndim() != 1 || ends.ndim() != 1 ||
        starts.shape(0) != ends.shape(0))
      throw std::invalid_argument("merges_valid: strings must be a 1-D uint8 buffer with 1-D starts and ends");
    const char* p = (const char*)buf.data();
    const int64_t size = (int64_t)buf.shape(0);
    std::vector<std::string_view> out((size_t)starts.shape(0));
    for (size_t i = 0; i < out.size(); ++i) {
      const int64_t s = starts.data()[i], e = ends.data()[i];
      if (s < 0 || s > e || e > size) throw std::invalid_argument("string " + std::to_string(i) + " out of range");
      out[i] = std::string_view(p + s, (size_t)(e - s));
    }
    return out;
  };
  const auto tokens = view(tok_buf, t_starts, t_ends), merges = view(m_buf, m_starts, m_ends);
  py::gil_scoped_release nogil;
  // an open-addressing set of token indices (FNV-1a, linear probing): std::unordered_set's node per token
  // made this as slow as the Python check
  auto hash = [](std::string_view v) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : v) h = (h ^ c) * 1099511628211ull;
    return h;
  };
  size_t cap = 16;
  while (cap < 2 * tokens.size()) cap *= 2;
  std::vector<int32_t> slots(cap, -1);
  for (size_t i = 0; i < tokens.size(); ++i)
    for (size_t j = hash(tokens[i]) & (cap - 1);; j = (j + 1) & (cap - 1))
      if (slots[j] < 0) {
        slots[j] = (int32_t)i;
        break;
      }
  auto has = [&](std::string_view v) {
    for (size_t j = hash(v) & (cap - 1);; j = (j + 1) & (cap - 1)) {
      if (slots[j] < 0) return false;
      if (tokens[(size_t)slots[j]] == v) return true;
    }
  };
  std::string joined;
  for (const auto& m : merges) {
    const size_t k = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    if (k == std::string_view::npos || k == m.size() - 1 || !utf8_valid(m)) return false;
    const std::string_view a = m.substr(0, k), b = m.substr(k + 1);
    if (!has(a) || !has(b)) return false;
    joined.assign(a);
    joined.append(b);
    if (!has(joined)) return false;
  }
  return true;
}

}  // namespace

// ---- Model: the forward step (native/forward.h) ----------------------------------------------------
namespace {

std::string cfg_key(const char* what, const char* key) { return std::string(what) + ": '" + key + "'"; }

template <class T>
T get_key(const py::dict& d, const char* key, const char* what) {
  if (!d.contains(key)) throw std::invalid_argument(cfg_key(what, key) + " missing");
  try {
    return d[key].cast<T>();
  } catch (const py::cast_error&) {
    throw std::invalid_argument(cfg_key(what, key) + " has the wrong type");
  }
}

// spec: None (absent) or (type_id, rows: uint8 [rows, row_bytes] viewing the file, row_len)
WeightView weight_view(const py::handle& spec, const std::string& name, std::vector<py::object>& keep) {
  WeightView w;
  if (spec.is_none()) return w;
  py::tuple t;
  try {
    t = spec.cast<py::tuple>();
  } catch (const py::cast_error&) {
    throw std::invalid_argument(name + ": expected (type_id, rows, row_len)");
  }
  if (t.size() != 3) throw std::invalid_argument(name + ": expected (type_id, rows, row_len)");
  const int type_id = t[0].cast<int>(), row_len = t[2].cast<int>();
  if (!py::isinstance<py::array>(t[1])) throw std::invalid_argument(name + ": rows must be a numpy uint8 array");
  py::array rows = t[1].cast<py::array>();
  check_rows(rows, name.c_str());
  const TypeInfo* ti = type_info(type_id);
  if (!ti) throw std::invalid_argument(name + ": unsupported tensor type id " + std::to_string(type_id));
  if (row_len <= 0 || row_len % ti->block_size ||
      rows.shape(1) != (py::ssize_t)(row_len / ti->block_size) * ti->type_size)
    throw std::invalid_argument(name + ": rows of " + std::to_string(rows.shape(1)) + " bytes do not hold " +
                                std::to_string(row_len) + " " + ti->name + " weights");
  w.data = (const uint8_t*)rows.data();
  w.type = type_id;
  w.rows = (int)rows.shape(0);
  w.row_len = row_len;
  w.row_bytes = rows.shape(0) > 1 ? (size_t)rows.strides(0) : (size_t)rows.shape(1);
  keep.push_back(rows);
  return w;
}

// any integer array (or list) of ndim dims -> int32 copy; names the array and index when a value overflows
std::vector<int32_t> int_array(const py::handle& obj, const char* name, int ndim, std::vector<py::ssize_t>* shape) {
  py::array a = py::array::ensure(obj);
  if (!a) throw std::invalid_argument(std::string(name) + " must be an integer array");
  if (a.ndim() != ndim) throw std::invalid_argument(std::string(name) + " must be " + std::to_string(ndim) + "-D");
  if (a.size() && a.dtype().kind() != 'i' && a.dtype().kind() != 'u')
    throw std::invalid_argument(std::string(name) + " must hold integers, got dtype " +
                                py::str(a.dtype()).cast<std::string>());
  auto a64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(a);
  if (a.size() && a.dtype().kind() == 'u' && a.itemsize() == 8) {  // uint64 beyond int64 would wrap
    auto au = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    for (py::ssize_t i = 0; i < au.size(); ++i)
      if (au.data()[i] > (uint64_t)INT32_MAX)
        throw std::invalid_argument(std::string(name) + " value at flat index " + std::to_string(i) +
                                    " is out of range");
  }
  std::vector<int32_t> out((size_t)a64.size());
  for (py::ssize_t i = 0; i < a64.size(); ++i) {
    const int64_t v = a64.data()[i];
    if (v < INT32_MIN || v > INT32_MAX)
      throw std::invalid_argument(std::string(name) + " value " + std::to_string(v) + " at flat index " +
                                  std::to_string(i) + " is out of range");
    out[(size_t)i] = (int32_t)v;
  }
  if (shape) shape->assign(a.shape(), a.shape() + a.ndim());
  return out;
}

struct PyModel {
  std::unique_ptr<Model> model;
  std::vector<py::object> keep;  // the arrays the weight views point into (and so the mmap)

  PyModel(const py::dict& cfg, const py::dict& weights, const py::list& layers, int n_blocks, int block_size,
          const std::string& k_type, const std::string& v_type, bool kv_rotate, bool kv_center, bool kv_equalize, int threads) {
    const char* C = "config";
    ModelConfig c;
    c.n_vocab = get_key<int>(cfg, "n_vocab", C);
    c.d_model = get_key<int>(cfg, "d_model", C);
    c.n_layers = get_key<int>(cfg, "n_layers", C);
    c.n_head = get_key<int>(cfg, "n_head", C);
    c.n_kv_head = get_key<int>(cfg, "n_kv_head", C);
    c.head_dim = get_key<int>(cfg, "head_dim", C);
    c.n_ff = get_key<int>(cfg, "n_ff", C);
    c.rms_eps = get_key<float>(cfg, "rms_eps", C);
    c.n_rot = get_key<int>(cfg, "n_rot", C);
    c.neox = get_key<bool>(cfg, "neox", C);
    c.attn_scale = get_key<float>(cfg, "attn_scale", C);
    const std::string act = get_key<std::string>(cfg, "ffn_act", C);
    if (act == "silu") c.ffn_act = FfnAct::Silu;
    else if (act == "gelu_tanh") c.ffn_act = FfnAct::GeluTanh;
    else throw std::invalid_argument("config: ffn_act '" + act + "' is not one of silu, gelu_tanh");
    c.embed_scale = get_key<float>(cfg, "embed_scale", C);
    c.sliding_window = get_key<int>(cfg, "sliding_window", C);
    c.attn_softcap = get_key<float>(cfg, "attn_softcap", C);
    c.final_softcap = get_key<float>(cfg, "final_softcap", C);
    if (threads < 1 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");

    auto opt = [](const py::dict& d, const char* key) -> py::object {
      return d.contains(key) ? py::reinterpret_borrow<py::object>(d[key]) : py::none();
    };
    ModelWeights w;
    for (const char* key : {"token_embd", "output_norm", "output"})
      if (!weights.contains(key)) throw std::invalid_argument(cfg_key("weights", key) + " missing");
    w.token_embd = weight_view(weights["token_embd"], "token_embd", keep);
    w.output_norm = weight_view(weights["output_norm"], "output_norm", keep);
    w.output = weight_view(weights["output"], "output", keep);
    w.rope_freqs = weight_view(opt(weights, "rope_freqs"), "rope_freqs", keep);
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!py::isinstance<py::dict>(layers[i]))
        throw std::invalid_argument("layers[" + std::to_string(i) + "] must be a dict");
      const py::dict ld = layers[i].cast<py::dict>();
      const std::string b = "blk." + std::to_string(i) + ".";
      LayerWeights L;
      L.sliding = get_key<bool>(ld, "sliding", b.c_str());
      L.rope_base = get_key<float>(ld, "rope_base", b.c_str());
      L.rope_scale = get_key<float>(ld, "rope_scale", b.c_str());
      const std::pair<const char*, WeightView*> fields[] = {
          {"attn_norm", &L.attn_norm}, {"attn_q", &L.attn_q}, {"attn_k", &L.attn_k}, {"attn_v", &L.attn_v},
          {"attn_output", &L.attn_output}, {"ffn_norm", &L.ffn_norm}, {"ffn_gate", &L.ffn_gate},
          {"ffn_up", &L.ffn_up}, {"ffn_down", &L.ffn_down}, {"attn_q_bias", &L.attn_q_bias},
          {"attn_k_bias", &L.attn_k_bias}, {"attn_v_bias", &L.attn_v_bias},
          {"attn_output_bias", &L.attn_output_bias}, {"attn_q_norm", &L.attn_q_norm},
          {"attn_k_norm", &L.attn_k_norm}, {"post_attention_norm", &L.post_attention_norm},
          {"post_ffw_norm", &L.post_ffw_norm}};
      for (const auto& f : fields) *f.second = weight_view(opt(ld, f.first), b + f.first, keep);
      w.layers.push_back(L);
    }
    const KernelTable* kt = &backend().kernels();
    KvConfig kv;
    kv.k_type = kv_type_of(k_type, "k_type");
    kv.v_type = kv_type_of(v_type, "v_type");
    kv.rotate = kv_rotate;
    kv.center = kv_center;
    kv.equalize = kv_equalize;
    model.reset(new Model(c, std::move(w), n_blocks, block_size, kv, kt, threads));
  }

  py::array_t<float> forward(const py::handle& token_ids, const py::handle& positions, const py::handle& slot_mapping,
                             const py::handle& seq_index, const py::handle& block_tables,
                             const py::handle& context_lens, const py::handle& logits_rows) {
    std::vector<py::ssize_t> bt_shape;
    const auto ids = int_array(token_ids, "token_ids", 1, nullptr);
    const auto pos = int_array(positions, "positions", 1, nullptr);
    const auto slots = int_array(slot_mapping, "slot_mapping", 1, nullptr);
    const auto seq = int_array(seq_index, "seq_index", 1, nullptr);
    const auto bt = int_array(block_tables, "block_tables", 2, &bt_shape);
    const auto ctx = int_array(context_lens, "context_lens", 1, nullptr);
    const auto rows = int_array(logits_rows, "logits_rows", 1, nullptr);
    const size_t T = ids.size();
    if (pos.size() != T || slots.size() != T || seq.size() != T)
      throw std::invalid_argument("token_ids, positions, slot_mapping and seq_index must have one length (got " +
                                  std::to_string(T) + ", " + std::to_string(pos.size()) + ", " +
                                  std::to_string(slots.size()) + ", " + std::to_string(seq.size()) + ")");
    if ((size_t)bt_shape[0] != ctx.size())
      throw std::invalid_argument("block_tables has " + std::to_string(bt_shape[0]) + " rows but context_lens " +
                                  std::to_string(ctx.size()) + " entries");
    StepBatch b;
    b.n_tokens = (int)T;
    b.token_ids = ids.data();
    b.positions = pos.data();
    b.slot_mapping = slots.data();
    b.seq_index = seq.data();
    b.n_seq = (int)bt_shape[0];
    b.max_blocks = (int)bt_shape[1];
    b.block_tables = bt.data();
    b.context_lens = ctx.data();
    b.n_logits = (int)rows.size();
    b.logits_rows = rows.data();
    const int n_vocab = model->config().n_vocab;
    py::array_t<float> out({(py::ssize_t)rows.size(), (py::ssize_t)n_vocab});
    float* op = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      model->forward(b, op);
    }
    return out;
  }
};

// x: float32 [n, k] C-contiguous (k whole blocks of the type) -> a copy; names the argument otherwise
py::array_t<float> kv_rows_in(const py::array& x, const char* name) {
  auto a = py::array_t<float, py::array::c_style>::ensure(x);
  if (!a || a.ndim() != 2 || !py::isinstance<py::array_t<float>>(x))
    throw std::invalid_argument(std::string(name) + " must be a 2-D float32 array");
  return a;
}

// x: float32 [n, k] -> uint8 [n, kv_row_bytes(type, k)]: the KV cache's write, row by row
py::array_t<uint8_t> kv_quantize_py(const std::string& type, const py::array& x) {
  const KvType t = kv_type_of(type, "type");
  auto a = kv_rows_in(x, "x");
  const int n = (int)a.shape(0), k = (int)a.shape(1);
  kv_check_len(t, k, "x");
  const size_t rb = kv_row_bytes(t, k);
  py::array_t<uint8_t> out({(py::ssize_t)n, (py::ssize_t)rb});
  for (int r = 0; r < n; ++r) kv_quantize_row(t, a.data() + (size_t)r * k, k, out.mutable_data() + r * rb);
  return out;
}

// rows: uint8 [n, kv_row_bytes(type, k)] -> float32 [n, k]: what the attention reads
py::array_t<float> kv_dequantize_py(const std::string& type, const py::array& rows, int k) {
  const KvType t = kv_type_of(type, "type");
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
  auto a = kv_rows_in(x, "x");
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

void bind_model(py::module_& m) {
  m.def("silu_mul", &silu_mul_py, py::arg("g"), py::arg("u"), "g * sigmoid(g) * u, as the FFN computes it");
  m.def("kv_quantize", &kv_quantize_py, py::arg("type"), py::arg("x"),
        "KV rows float32 [n, k] -> uint8 [n, row bytes] in 'f16', 'q8_0' or 'q4_0'");
  m.def("kv_dequantize", &kv_dequantize_py, py::arg("type"), py::arg("rows"), py::arg("k"),
        "KV rows uint8 [n, row bytes] -> float32 [n, k]");
  m.def("hadamard", &hadamard_py, py::arg("x"), "float32 [n, dim] -> H x / sqrt(m) per group of m dims");
  py::class_<PyModel>(m, "Model",
                      "the decoder block over mmapped weights and a paged KV cache (private: use localllm.model)")
      .def(py::init<const py::dict&, const py::dict&, const py::list&, int, int, const std::string&,
                    const std::string&, bool, bool, bool, int>(),
           py::arg("config"), py::arg("weights"), py::arg("layers"), py::arg("n_blocks"), py::arg("block_size"),
           py::arg("k_type"), py::arg("v_type"), py::arg("kv_rotate"), py::arg("kv_center"), py::arg("kv_equalize"), py::arg("threads"))
      .def("forward", &PyModel::forward, py::arg("token_ids"), py::arg("positions"), py::arg("slot_mapping"),
           py::arg("seq_index"), py::arg("block_tables"), py::arg("context_lens"), py::arg("logits_rows"),
           "one engine step -> logits [len(logits_rows), n_vocab] float32")
      .def_property_readonly("n_blocks", [](const PyModel& p) { return p.model->kv_cache().n_blocks(); })
      .def_property_readonly("block_size", [](const PyModel& p) { return p.model->kv_cache().block_size(); })
      .def_property_readonly("kv_bytes", [](const PyModel& p) { return p.model->kv_cache().bytes(); })
      .def_property_readonly("k_type", [](const PyModel& p) { return kv_type_name(p.model->kv_cache().k_type()); })
      .def_property_readonly("v_type", [](const PyModel& p) { return kv_type_name(p.model->kv_cache().v_type()); })
      .def_property_readonly("rotate_k", [](const PyModel& p) { return p.model->rotate_k(); })
      .def_property_readonly("rotate_v", [](const PyModel& p) { return p.model->rotate_v(); })
      .def_property_readonly("center_k", [](const PyModel& p) { return p.model->center_k(); })
      .def_property_readonly("center_v", [](const PyModel& p) { return p.model->center_v(); })
      .def_property_readonly("equalize_k", [](const PyModel& p) { return p.model->equalize_k(); })
      .def_property_readonly(
          "k_scales",
          [](const PyModel& p) -> py::object {
            if (!p.model->equalize_k()) return py::none();
            const ModelConfig& c = p.model->config();
            const int kvd = c.n_kv_head * c.head_dim;
            py::array_t<float> out({(py::ssize_t)c.n_layers, (py::ssize_t)kvd});
            for (int l = 0; l < c.n_layers; ++l)
              std::memcpy(out.mutable_data() + (size_t)l * kvd, p.model->k_scale(l).data(), kvd * sizeof(float));
            return out;
          },
          "float32 [n_layers, n_kv_head * head_dim]: K's per-channel divisors, or None")
      .def_property_readonly("threads", [](const PyModel& p) { return p.model->threads(); });
}

}  // namespace
// ---- end Model ------------------------------------------------------------------------------------

PYBIND11_MODULE(_native, m) {
  m.doc() = "localllm native core (private: import localllm.kernels instead)";
  m.def("available_paths", &available_paths, "CPU kernel paths this machine can run, best last");
  m.def("configure", &configure, py::arg("path") = "", py::arg("threads") = 0,
        "select the CPU path ('' = best) and thread count (0 = all cores); rebuilds the thread pool");
  m.def("current_path", [] { return std::string(backend().kernels().name); });
  m.def("threads", [] { return backend().threads(); });
  m.def("type_supported", [](int id) { return type_info(id) != nullptr; });
  m.def("matmul", &matmul_py, py::arg("type_id"), py::arg("w"), py::arg("k"), py::arg("x"),
        "y[n, m] = x[n, k] @ W[m, k]^T for GGML-typed weight rows");
  m.def("activation_block", [](int type_id, int n) { return activation_block(backend().kernels(), type_id, n); },
        py::arg("type_id"), py::arg("n"), "values per activation scale a product uses on the current path (32 or 256)");
  m.def("matmul_multi", &matmul_multi_py, py::arg("products"), py::arg("k"), py::arg("x"),
        "[x @ W_j^T] for [(type_id, W_j)] sharing x: one activation quantization, one dispatch at small n");
  m.def("dequantize", &dequantize_py, py::arg("type_id"), py::arg("w"), py::arg("k"));
  m.def("quantize_x", &quantize_x_py, py::arg("x"), py::arg("block") = 32,
        "activations -> (xq int8 [n,k], dx [n,k/block], sum16 [n,k/16])");
  m.def("stream_read", &stream_read_py, py::arg("buf"), py::arg("streams") = 1);
  m.def("int8_peak", &int8_peak_py, py::arg("iters"));
  m.def("scan_strings", &scan_strings_py, py::arg("buf"), py::arg("pos"), py::arg("count"));
  m.def("decode_strings", &decode_strings_py, py::arg("buf"), py::arg("starts"), py::arg("ends"));
  m.def("merges_valid", &merges_valid_py, py::arg("tok_buf"), py::arg("t_starts"), py::arg("t_ends"), py::arg("m_buf"),
        py::arg("m_starts"), py::arg("m_ends"));
  bind_model(m);
}
