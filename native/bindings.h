// What the binding files (bind_*.cpp, the only places that include pybind11) share: each area's bind
// function, called by module.cpp, and the argument checks more than one area uses.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "kernels.h"

namespace lll {

void bind_kernels(pybind11::module_& m);    // matrix products, the CPU path and thread count, bench loops
void bind_model(pybind11::module_& m);      // the native Model: the forward step over a paged KV cache
void bind_tokenizer(pybind11::module_& m);  // the GGUF loader's and the BPE tokenizer's byte helpers
void bind_testing(pybind11::module_& m);    // the `testing` submodule: entry points only the tests call
void bind_cuda(pybind11::module_& m, pybind11::module_& testing);  // the CUDA backend (cuda/cuda_api.h)

// w: uint8 [rows, row_bytes], rows contiguous (any row stride), each exactly k weights of type_id (matmul.h's
// checked_type); std::invalid_argument naming `what` otherwise
void check_weight_rows(const KernelTable& kt, int type_id, const pybind11::array& w, int k, const char* what);
// x: float32 [n, k] C-contiguous, as a product with weight rows w of type_id takes it (and check_weight_rows)
pybind11::array_t<float, pybind11::array::c_style> checked_product(const KernelTable& kt, int type_id,
                                                                   const pybind11::array& w, int k,
                                                                   const pybind11::array& x_in);

}  // namespace lll
