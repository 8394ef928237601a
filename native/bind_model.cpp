// Bindings of the native Model (model.h): builds its config and weight views from Python dicts (naming a
// missing or mistyped key), reads the step's StepBatch (its int32 arrays in place, other integer arrays checked and
// copied), and runs the step with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "model.h"
#include "cpu_features.h"
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

// ffn_act: "silu" | "gelu_tanh" | "swiglu_oai" | "gelu"
template <>
FfnAct get_key<FfnAct>(const py::dict& d, const char* key, const char* what) {
  const std::string act = get_key<std::string>(d, key, what);
  if (act == "silu") return FfnAct::Silu;
  if (act == "gelu_tanh") return FfnAct::GeluTanh;
  if (act == "swiglu_oai") return FfnAct::SwigluOai;
  if (act == "gelu") return FfnAct::Gelu;
  throw std::invalid_argument(std::string(what) + ": " + key + " '" + act +
                              "' is not one of silu, gelu_tanh, swiglu_oai, gelu");
}

// {"config": [...], "weights": [...], "layer": [...], "layer_weights": [...]}: the names of model_config.h's lists
py::dict model_fields() {
  py::list config, weights, layer, layer_weights;
#define LLL_NAME(type, name) config.append(#name);
  LLL_CONFIG_FIELDS(LLL_NAME)
#undef LLL_NAME
#define LLL_NAME(type, name) layer.append(#name);
  LLL_LAYER_FIELDS(LLL_NAME)
#undef LLL_NAME
#define LLL_NAME(name) weights.append(#name);
  LLL_MODEL_WEIGHTS(LLL_NAME)
#undef LLL_NAME
#define LLL_NAME(name) layer_weights.append(#name);
  LLL_LAYER_WEIGHTS(LLL_NAME)
#undef LLL_NAME
  py::dict d;
  d["config"] = config;
  d["weights"] = weights;
  d["layer"] = layer;
  d["layer_weights"] = layer_weights;
  return d;
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


// A step array as int32: the caller's buffer itself when it is int32 and C-contiguous (what a StepBatchBuilder
// makes: no copy), otherwise a checked copy (int_array). `held` keeps the viewed array alive for the call.
struct IntArray {
  py::array held;
  std::vector<int32_t> copy;
  const int32_t* data = nullptr;
  size_t size = 0;
  std::vector<py::ssize_t> shape;
};

IntArray step_array(const py::object& batch, const char* name, int ndim) {
  if (!py::hasattr(batch, name)) throw std::invalid_argument(std::string("the batch has no ") + name);
  py::object obj = batch.attr(name);
  IntArray out;
  if (py::isinstance<py::array>(obj)) {
    py::array a = py::reinterpret_borrow<py::array>(obj);
    if (a.dtype().is(py::dtype::of<int32_t>()) && (a.flags() & py::array::c_style) && a.ndim() == ndim) {
      out.held = a;
      out.data = static_cast<const int32_t*>(a.data());
      out.size = (size_t)a.size();
      out.shape.assign(a.shape(), a.shape() + a.ndim());
      return out;
    }
  }
  out.copy = int_array(obj, name, ndim, &out.shape);
  out.data = out.copy.data();
  out.size = out.copy.size();
  return out;
}

// A StepBatch's arrays checked and viewed (they stay alive in `batch` while this lives).
struct StepArrays {
  IntArray ids, pos, slots, seq, bt, ctx, rows;
  StepBatch b;
  explicit StepArrays(const py::object& batch)
      : ids(step_array(batch, "token_ids", 1)),
        pos(step_array(batch, "positions", 1)),
        slots(step_array(batch, "slot_mapping", 1)),
        seq(step_array(batch, "seq_index", 1)),
        bt(step_array(batch, "block_tables", 2)),
        ctx(step_array(batch, "context_lens", 1)),
        rows(step_array(batch, "logits_rows", 1)) {
    const std::vector<py::ssize_t>& bt_shape = bt.shape;
    const size_t T = ids.size;
    if (pos.size != T || slots.size != T || seq.size != T)
      throw std::invalid_argument("token_ids, positions, slot_mapping and seq_index must have one length (got " +
                                  std::to_string(T) + ", " + std::to_string(pos.size) + ", " +
                                  std::to_string(slots.size) + ", " + std::to_string(seq.size) + ")");
    if ((size_t)bt_shape[0] != ctx.size)
      throw std::invalid_argument("block_tables has " + std::to_string(bt_shape[0]) + " rows but context_lens " +
                                  std::to_string(ctx.size) + " entries");
    b.n_tokens = (int)T;
    b.token_ids = ids.data;
    b.positions = pos.data;
    b.slot_mapping = slots.data;
    b.seq_index = seq.data;
    b.n_seq = (int)bt_shape[0];
    b.max_blocks = (int)bt_shape[1];
    b.block_tables = bt.data;
    b.context_lens = ctx.data;
    b.n_logits = (int)rows.size;
    b.logits_rows = rows.data;
  }
};

struct PyModel {
  std::unique_ptr<Model> model;
  std::vector<py::object> keep;  // the arrays the weight views point into (and so the mmap)

  // kv: {n_blocks, block_size, k_type, v_type, rotate, center, equalize} (localllm.native.new_model); cpu_path: the
  // kernel path of its CPU stages ("" = the process's)
  PyModel(const py::dict& cfg, const py::dict& weights, const py::list& layers, const py::dict& kv_dict, int threads,
          const std::vector<std::pair<std::string, int>>& placement, const std::string& cpu_path) {
    ModelConfig c;
#define LLL_READ(type, name) c.name = get_key<type>(cfg, #name, "config");
    LLL_CONFIG_FIELDS(LLL_READ)
#undef LLL_READ
    if (threads < 1 || threads > 1024) throw std::invalid_argument("threads must be between 1 and 1024");

    // weights: absent or None where the model has no such tensor (the Model names a required one missing)
    auto opt = [](const py::dict& d, const char* key) -> py::object {
      return d.contains(key) ? py::reinterpret_borrow<py::object>(d[key]) : py::none();
    };
    const KernelTable* kt = cpu_path.empty() ? kernel_context().kernels : kernels_for(cpu_path);
    ModelWeights w;
#define LLL_READ(name) w.name = weight_view(*kt, opt(weights, #name), #name, keep);
    LLL_MODEL_WEIGHTS(LLL_READ)
#undef LLL_READ
    for (size_t i = 0; i < layers.size(); ++i) {
      if (!py::isinstance<py::dict>(layers[i]))
        throw std::invalid_argument("layers[" + std::to_string(i) + "] must be a dict");
      const py::dict ld = layers[i].cast<py::dict>();
      const std::string b = "blk." + std::to_string(i) + ".";
      LayerWeights L;
#define LLL_READ(type, name) L.name = get_key<type>(ld, #name, b.c_str());
      LLL_LAYER_FIELDS(LLL_READ)
#undef LLL_READ
#define LLL_READ(name) L.name = weight_view(*kt, opt(ld, #name), b + #name, keep);
      LLL_LAYER_WEIGHTS(LLL_READ)
#undef LLL_READ
      w.layers.push_back(L);
    }
    const int n_blocks = get_key<int>(kv_dict, "n_blocks", "kv");
    const int block_size = get_key<int>(kv_dict, "block_size", "kv");
    KvConfig kv;
    kv.k_type = kv_type_of(get_key<std::string>(kv_dict, "k_type", "kv"), "k_type");
    kv.v_type = kv_type_of(get_key<std::string>(kv_dict, "v_type", "kv"), "v_type");
    kv.rotate = get_key<bool>(kv_dict, "rotate", "kv");
    kv.center = get_key<bool>(kv_dict, "center", "kv");
    kv.equalize = get_key<bool>(kv_dict, "equalize", "kv");
    std::vector<Model::Placement> place;
    for (const auto& p : placement) place.push_back({p.first, p.second});
    // the copies and measurements of a load run without the GIL: the caller's other threads (the tokenizer being
    // read beside it, localllm.llm) go on meanwhile
    py::gil_scoped_release nogil;
    model.reset(new Model(c, std::move(w), n_blocks, block_size, kv, kt, threads, place));
  }

  // batch: a localllm.model.step_batch.StepBatch (its seven arrays by name)
  py::object forward(const py::object& batch, int top_k, int n_valid, bool hidden) {
    StepArrays a(batch);
    const IntArray& rows = a.rows;
    StepBatch& b = a.b;
    if (n_valid < 0) throw std::invalid_argument("n_valid must be 0 (all columns) or positive");
    if (top_k > 0) {  // the candidates of each row (top_k.h) instead of its logits
      TopK top;
      top.k = top_k;
      top.n_valid = n_valid > 0 ? n_valid : model->config().n_vocab;
      py::array_t<int32_t> top_ids({(py::ssize_t)rows.size, (py::ssize_t)top_k});
      py::array_t<float> vals({(py::ssize_t)rows.size, (py::ssize_t)top_k});
      top.ids = top_ids.mutable_data();
      top.vals = vals.mutable_data();
      {
        py::gil_scoped_release nogil;
        model->forward(b, nullptr, &top);
      }
      return py::make_tuple(top_ids, vals);
    }
    const int width = hidden ? model->config().d_model : model->config().n_vocab;
    py::array_t<float> out({(py::ssize_t)rows.size, (py::ssize_t)width});
    float* op = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      model->forward(b, op, nullptr, hidden);
    }
    return out;
  }

  // forward's step launched (Model::launch): its shape (n_logits, k); collect() gives what forward would have
  py::tuple launch(const py::object& batch, int top_k, int n_valid, bool feed) {
    StepArrays a(batch);
    if (n_valid < 0) throw std::invalid_argument("n_valid must be 0 (all columns) or positive");
    TopK top;
    top.k = top_k;
    top.n_valid = n_valid > 0 ? n_valid : model->config().n_vocab;
    Model::Launched shape;
    {
      py::gil_scoped_release nogil;
      shape = model->launch(a.b, top_k > 0 ? &top : nullptr, feed);
    }
    return py::make_tuple(shape.n_logits, shape.k);
  }

  py::object collect() {
    const Model::Launched shape = model->next_collected();
    if (shape.k > 0) {
      TopK top;
      top.k = shape.k;
      py::array_t<int32_t> top_ids({(py::ssize_t)shape.n_logits, (py::ssize_t)shape.k});
      py::array_t<float> vals({(py::ssize_t)shape.n_logits, (py::ssize_t)shape.k});
      top.ids = top_ids.mutable_data();
      top.vals = vals.mutable_data();
      {
        py::gil_scoped_release nogil;
        model->collect(nullptr, &top);
      }
      return py::make_tuple(top_ids, vals);
    }
    py::array_t<float> out({(py::ssize_t)shape.n_logits, (py::ssize_t)model->config().n_vocab});
    float* op = out.mutable_data();
    {
      py::gil_scoped_release nogil;
      model->collect(op, nullptr);
    }
    return out;
  }
};


}  // namespace

void bind_model(py::module_& m) {
  m.def("model_fields", &model_fields,
        "{'config', 'weights', 'layer', 'layer_weights'}: the names the Model's dicts are keyed by (model_config.h)");
  py::class_<PyModel>(m, "Model",
                      "the decoder block over mmapped weights and a paged KV cache (private: use localllm.model.model)")
      .def(py::init<const py::dict&, const py::dict&, const py::list&, const py::dict&, int,
                    const std::vector<std::pair<std::string, int>>&, const std::string&>(),
           py::arg("config"), py::arg("weights"), py::arg("layers"), py::arg("kv"), py::arg("threads"),
           py::arg("placement") = std::vector<std::pair<std::string, int>>{}, py::arg("cpu_path") = "",
           "placement: [(device, last layer)] per stage in order ('cpu' | 'cuda'); empty: all on the CPU")
      .def("forward", &PyModel::forward, py::arg("batch"), py::arg("top_k") = 0, py::arg("n_valid") = 0,
           py::arg("hidden") = false,
           "one engine step (a StepBatch) -> logits [len(logits_rows), n_vocab] float32, or with top_k > 0 each row's top_k "
           "candidates among its first n_valid (0: all) columns: (ids int32, vals float32) [len(logits_rows), top_k]; "
           "hidden: each logits row's final hidden state [len(logits_rows), d_model] instead (embeddings)")
      .def("launch", &PyModel::launch, py::arg("batch"), py::arg("top_k") = 0, py::arg("n_valid") = 0,
           py::arg("feed") = false,
           "forward's step without waiting for it where the device can (a GPU; the CPU computes it now): its shape "
           "(n_logits, k); at most 2 launched and not collected. feed: token ids -1 - j are the top candidate of "
           "row j of the step run before")
      .def("collect", &PyModel::collect, "the oldest launched step's result, as forward returns it (waits for it)")
      .def_property_readonly("n_blocks", [](const PyModel& p) { return p.model->kv_pool().n_blocks; })
      .def_property_readonly("block_size", [](const PyModel& p) { return p.model->kv_pool().block_size; })
      .def_property_readonly("kv_bytes", [](const PyModel& p) { return p.model->kv_bytes(); })
      .def_property_readonly("k_type", [](const PyModel& p) { return kv_type_name(p.model->kv_pool().k_type); })
      .def_property_readonly("v_type", [](const PyModel& p) { return kv_type_name(p.model->kv_pool().v_type); })
      .def_property_readonly(
          "stages",
          [](const PyModel& p) {
            py::list out;
            for (const Model::StageInfo& s : p.model->stages()) out.append(py::make_tuple(s.device, s.first, s.last));
            return out;
          },
          "[(device, first layer, last layer)]: where the layers run, in step order")
      .def_property_readonly(
          "graph_nodes", [](const PyModel& p) { return p.model->graph_nodes(); },
          "per stage, the kernels of the CUDA graph it captured last (a decode step's launches); -1: none")
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
      .def_property_readonly("threads", [](const PyModel& p) { return p.model->threads(); })
      .def_property_readonly("cpu_path", [](const PyModel& p) { return std::string(p.model->kernels()->name); },
                             "the kernel path of its CPU stages");
}

}  // namespace lll
