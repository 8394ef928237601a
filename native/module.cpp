// The extension module localllm._native (private: localllm.native is its only importer): one bind_* call per area.
#include "bindings.h"

PYBIND11_MODULE(_native, m) {
  m.doc() = "localllm native core (private: import localllm.native instead)";
  lll::bind_kernels(m);
  lll::bind_model(m);
  lll::bind_tokenizer(m);
  pybind11::module_ testing = m.def_submodule("testing", "entry points only the tests call");
  lll::bind_testing(testing);
  lll::bind_cuda(m, testing);
}
