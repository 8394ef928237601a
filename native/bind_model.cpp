// Bindings of the native Model (forward.h): builds its config and weight views from Python dicts (naming a
// missing or mistyped key), checks the step's integer arrays, and runs the step with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "forward.h"
#include "kernel_context.h"

namespace py = pybind11;

namespace lll {

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
WeightView weight_view(const KernelTable& kt, const py::handle& spec, const std::string& name,
                       std::vector<py::object>& keep) {
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
  check_weight_rows(kt, type_id, rows, row_len, name.c_str());
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
    const KernelTable* kt = kernel_context().kernels;
    ModelWeights w;
    for (const char* key : {"token_embd", "output_norm", "output"})
      if (!weights.contains(key)) throw std::invalid_argument(cfg_key("weights", key) + " missing");
    w.token_embd = weight_view(*kt, weights["token_embd"], "token_embd", keep);
    w.output_norm = weight_view(*kt, weights["output_norm"], "output_norm", keep);
    w.output = weight_view(*kt, weights["output"], "output", keep);
    w.rope_freqs = weight_view(*kt, opt(weights, "rope_freqs"), "rope_freqs", keep);
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
      for (const auto& f : fields) *f.second = weight_view(*kt, opt(ld, f.first), b + f.first, keep);
      w.layers.push_back(L);
    }
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

}  // namespace

void bind_model(py::module_& m) {
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
      .def_property_readonly("rotate_k", [](const PyModel& p) { return p.model->kv_transforms().rotate_k(); })
      .def_property_readonly("rotate_v", [](const PyModel& p) { return p.model->kv_transforms().rotate_v(); })
      .def_property_readonly("center_k", [](const PyModel& p) { return p.model->kv_transforms().center_k(); })
      .def_property_readonly("center_v", [](const PyModel& p) { return p.model->kv_transforms().center_v(); })
      .def_property_readonly("equalize_k", [](const PyModel& p) { return p.model->kv_transforms().equalize_k(); })
      .def_property_readonly(
          "k_scales",
          [](const PyModel& p) -> py::object {
            if (!p.model->kv_transforms().equalize_k()) return py::none();
            const ModelConfig& c = p.model->config();
            const int kvd = c.n_kv_head * c.head_dim;
            py::array_t<float> out({(py::ssize_t)c.n_layers, (py::ssize_t)kvd});
            for (int l = 0; l < c.n_layers; ++l)
              std::memcpy(out.mutable_data() + (size_t)l * kvd, p.model->kv_transforms().k_scale(l).data(), kvd * sizeof(float));
            return out;
          },
          "float32 [n_layers, n_kv_head * head_dim]: K's per-channel divisors, or None")
      .def_property_readonly("threads", [](const PyModel& p) { return p.model->threads(); });
}

}  // namespace lll
