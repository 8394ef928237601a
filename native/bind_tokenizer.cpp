// Bindings of the GGUF loader's and the BPE tokenizer's byte helpers (vocab_bytes.h): string-array scanning,
// decoding to str, merge validation. Checks every buffer and offset before the pybind-free code reads it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "vocab_bytes.h"

namespace py = pybind11;

namespace lll {

namespace {

void check_bytes(const py::array& buf, const char* what) {
  if (buf.ndim() != 1 || buf.itemsize() != 1) throw std::invalid_argument(std::string(what) + " must be 1-D uint8");
}

// GGUF string arrays: [u64 length][bytes] * count from byte pos of buf -> (starts, ends, end)
py::tuple scan_strings_py(const py::array& buf, size_t pos, size_t count) {
  check_bytes(buf, "buf");
  const size_t end = (size_t)buf.shape(0);
  if (count > (end - std::min(pos, end)) / 8)  // before allocating count offsets
    throw std::invalid_argument("index 0: absurd array length");
  py::array_t<int64_t> starts((py::ssize_t)count), ends((py::ssize_t)count);
  pos = scan_strings((const uint8_t*)buf.data(), end, pos, count, starts.mutable_data(), ends.mutable_data());
  return py::make_tuple(starts, ends, pos);
}

// the strings [starts[i], ends[i]) of buf as views; std::invalid_argument for an offset outside buf
std::vector<std::string_view> views(const py::array& buf, const py::array_t<int64_t>& starts,
                                    const py::array_t<int64_t>& ends, const char* what) {
  if (buf.ndim() != 1 || buf.itemsize() != 1 || starts.ndim() != 1 || ends.ndim() != 1 ||
      starts.shape(0) != ends.shape(0))
    throw std::invalid_argument(std::string(what) + ": strings must be a 1-D uint8 buffer with 1-D starts and ends");
  const char* p = (const char*)buf.data();
  const int64_t size = (int64_t)buf.shape(0);
  std::vector<std::string_view> out((size_t)starts.shape(0));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t s = starts.data()[i], e = ends.data()[i];
    if (s < 0 || s > e || e > size) throw std::invalid_argument("string " + std::to_string(i) + " out of range");
    out[i] = std::string_view(p + s, (size_t)(e - s));
  }
  return out;
}

// the strings at [starts[i], ends[i]) of buf as a list of str, invalid UTF-8 replaced by U+FFFD: what
// bytes.decode("utf-8", "replace") gives, without a Python loop over 150k tokens
py::list decode_strings_py(const py::array& buf, const py::array_t<int64_t>& starts, const py::array_t<int64_t>& ends) {
  const auto strings = views(buf, starts, ends, "decode_strings");
  py::list out(strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    PyObject* u = PyUnicode_DecodeUTF8(strings[i].data(), (Py_ssize_t)strings[i].size(), "replace");
    if (!u) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), (py::ssize_t)i, u);
  }
  return out;
}

bool merges_valid_py(const py::array& tok_buf, const py::array_t<int64_t>& t_starts, const py::array_t<int64_t>& t_ends,
                     const py::array& m_buf, const py::array_t<int64_t>& m_starts, const py::array_t<int64_t>& m_ends) {
  const auto tokens = views(tok_buf, t_starts, t_ends, "merges_valid");
  const auto merges = views(m_buf, m_starts, m_ends, "merges_valid");
  py::gil_scoped_release nogil;
  return merges_valid(tokens, merges);
}

}  // namespace

void bind_tokenizer(py::module_& m) {
  m.def("scan_strings", &scan_strings_py, py::arg("buf"), py::arg("pos"), py::arg("count"),
        "GGUF string array of count strings at byte pos of buf -> (starts, ends, end); ValueError('index N: ...')");
  m.def("decode_strings", &decode_strings_py, py::arg("buf"), py::arg("starts"), py::arg("ends"),
        "[buf[starts[i]:ends[i]].decode('utf-8', 'replace')]");
  m.def("merges_valid", &merges_valid_py, py::arg("tok_buf"), py::arg("t_starts"), py::arg("t_ends"), py::arg("m_buf"),
        py::arg("m_starts"), py::arg("m_ends"),
        "True when every BPE merge splits at its first space into two token texts whose join is one too");
}

}  // namespace lll
