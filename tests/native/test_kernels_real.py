"""Kernels on the real tensors of the test models: dequantization equals gguf's, products match float64."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODEL_NAMES, model_file
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from localllm import native
from localllm.model.gguf import GGUFFile
from test_kernels import check_product


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_real_tensors(name):
    with GGUFFile(model_file(name)) as f:
        seen = {}
        for t in f.tensors.values():
            seen.setdefault(t.type.name, []).append(t)
        rng = np.random.default_rng(0)
        for tname, ts in sorted(seen.items()):
            for t in (ts[0], ts[-1]):
                rows = t.rows()[:40] if len(t.dims) == 2 else t.data.reshape(1, -1)
                k = t.row_len
                ref = ref_dequantize(np.array(rows), T(t.type.id)).reshape(rows.shape[0], k)
                np.testing.assert_array_equal(
                    native.dequantize_raw(t.type.id, rows, k, t.name), ref, err_msg=f"{name}: {t.name} ({tname})"
                )
                if (len(t.dims) == 2 and t.type.id != 0) or (tname == "F32" and len(t.dims) == 2):
                    x = rng.standard_normal((5, k), dtype=np.float32)
                    check_product(T(t.type.id), native.matmul_raw(t.type.id, rows, k, x), ref.astype(np.float64), x)
