"""The batched product (qgemm) and the embedding lookup (dequant_rows) on CUDA (native/cuda/gemm.cu), on a
machine with an NVIDIA GPU (tests marked gpu, skipped without one), against gguf's dequantize and the CPU.

dequant_rows computes each weight with the CPU's float operations in the CPU's order, then one float product
with the scale (as cpu_stage.cpp scales the embedding): bit-identical to gguf's dequantize (and the CPU's) times
np.float32(scale).

qgemm's error bound against the float64 product x . W^T of gguf-dequantized weights W. The device rounds each x
row, scaled by a power of two 2^-e (amax 2^-e in [2^14, 2^15)), and each dequantized weight to f16 (unit roundoff
u16 = 2^-11), multiplies them exactly in float and sums the products in float; the scaling is exact. Per term:
    |x~ w~ - x w| <= (2 u16 + u16^2) |x w| + 2^-25 |x| + (amax 2^-39 + 2^-125) |w|
(f16 round to nearest within u16 relative in the normal range; below it within half the subnormal spacing: 2^-25
for a weight, amax 2^-39 for a scaled x, or 2^-125 where amax < 2^-86 and the scale stops at 2^100). The float sum of k products in any order, with at most one ulp
(2^-23 relative, allowing for tensor cores that truncate) lost per addition, adds at most (k + 16) 2^-23 times the
sum of the products' magnitudes. So
    |y - x . W^T| <= (2^-10 + 2^-22 + (k + 16) 2^-23 (1 + 2^-9)) |x| . |W|^T + 2^-25 sum|x|
                     + (amax 2^-39 + 2^-125) sum|w|.
Against the CPU's product the bound is this plus the CPU's own (tests/native/test_kernels.py: int8 activations
per 32 for the quantized types, float fused multiply-adds for the float types).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu, no_gpu
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from localllm import native
from quant_blocks import TYPES, random_rows

U = 2.0**-23
U16 = 2.0**-11
FLOAT_TYPES = {T.F32, T.F16, T.BF16}
CUDA_TYPES = [t for t in TYPES if t != T.MXFP4]  # MXFP4 runs on the CPU only (native/cuda decodes no E8M0 scale)
SHAPES = [(37, 256), (160, 896), (896, 4864)]  # (m, k); k rounded up to whole blocks for the K-quants
N_LIST = [1, 7, 64, 130]
EMBED_SCALE = 33.94  # Gemma's sqrt(d_model) for d_model = 1152


def whole_blocks(qt: T, k: int) -> int:
    bs = GGML_QUANT_SIZES[qt][0]
    return (k + bs - 1) // bs * bs


def padded(rows: np.ndarray, pad: int) -> np.ndarray:
    """The same rows with row_bytes = packed bytes + pad (a view: the padding lies after each row)."""
    wide = np.zeros((rows.shape[0], rows.shape[1] + pad), np.uint8)
    wide[:, : rows.shape[1]] = rows
    return wide[:, : rows.shape[1]]


def activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """x [n, k]: heavy-tailed channels; when n > 3 a zero row, a row beyond f16's range and a row of tiny values."""
    x = rng.standard_normal((n, k), dtype=np.float32) * np.exp(rng.standard_normal(k)).astype(np.float32)
    if n > 3:
        x[1] = 0.0
        x[2] *= np.float32(1e5)  # up to ~1e7: overflows f16 without the row's power-of-two scale
        x[3] *= np.float32(1e-6)  # f16 subnormals without the scale
    return x


def qgemm_bound(x64: np.ndarray, w64: np.ndarray) -> np.ndarray:
    k = x64.shape[1]
    ax, aw = np.abs(x64), np.abs(w64)
    amax = ax.max(axis=1, keepdims=True)
    rel = 2 * U16 + U16**2 + (k + 16) * U * (1 + 2.0**-9)
    tiny = (amax * 2.0**-39 + 2.0**-125) * aw.sum(axis=1)[None, :]
    return rel * (ax @ aw.T) + 2.0**-25 * ax.sum(axis=1, keepdims=True) + tiny


def cpu_bound(qt: T, x64: np.ndarray, w64: np.ndarray) -> np.ndarray:
    k = x64.shape[1]
    aw = np.abs(w64).T
    if qt in FLOAT_TYPES:
        return (k + 4) * U * (np.abs(x64) @ aw)
    n = x64.shape[0]
    dx = np.abs(x64).reshape(n, -1, 32).max(axis=2) / 127
    act_err = np.repeat(dx, 32, axis=1) / 2 + 8 * U * np.abs(x64)  # int8 rounding per 32 (test_kernels.py)
    return act_err @ aw + (k / 16 + 16) * U * ((np.abs(x64) + act_err) @ aw)


@no_gpu
def test_entry_points_fail_cleanly_without_a_device():
    rows = random_rows(T.Q8_0, 4, 64, np.random.default_rng(0))
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        native.testing.cuda_qgemm(int(T.Q8_0), rows, 64, np.ones((2, 64), np.float32))
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        native.testing.cuda_dequant_rows(int(T.Q8_0), rows, 64, np.array([0, 3], np.int32), 1.0)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", CUDA_TYPES, ids=lambda t: t.name)
def test_qgemm_matches_the_float64_product_and_the_cpu(qt):
    rng = np.random.default_rng(300 + int(qt))
    shapes = SHAPES + ([(33, 13), (33, 40)] if qt in FLOAT_TYPES else [])  # float rows: any k
    for m, k in shapes:
        k = whole_blocks(qt, k)
        rows = random_rows(qt, m, k, rng)
        w64 = ref_dequantize(rows, qt).reshape(m, k).astype(np.float64)
        for n in N_LIST:
            x = activations(n, k, rng)
            y = native.testing.cuda_qgemm(int(qt), rows, k, x)
            assert y.shape == (n, m) and y.dtype == np.float32
            x64 = x.astype(np.float64)
            bound = qgemm_bound(x64, w64)
            err = np.abs(y - x64 @ w64.T)
            assert np.all(err <= bound), f"{qt.name} m={m} k={k} n={n}: max excess {np.max(err - bound)}"
            cpu = native.matmul_raw(int(qt), rows, k, x)
            gap = np.abs(y.astype(np.float64) - cpu)
            both = bound + cpu_bound(qt, x64, w64)
            assert np.all(gap <= both), f"{qt.name} m={m} k={k} n={n}: device and CPU differ beyond both bounds"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", CUDA_TYPES, ids=lambda t: t.name)
def test_qgemm_reads_rows_with_a_longer_stride(qt):
    rng = np.random.default_rng(400 + int(qt))
    m, k = 70, whole_blocks(qt, 512)
    rows = random_rows(qt, m, k, rng)
    x = activations(9, k, rng)
    pad = 8 if qt == T.F32 else 6  # keeps F32 rows 4-byte aligned, leaves the others only 2-byte aligned
    np.testing.assert_array_equal(
        native.testing.cuda_qgemm(int(qt), padded(rows, pad), k, x), native.testing.cuda_qgemm(int(qt), rows, k, x)
    )


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", CUDA_TYPES, ids=lambda t: t.name)
def test_qgemm_rows_do_not_depend_on_the_batch(qt):
    # each output row is computed from its own x row and scale only: the product of a row alone is the same bits
    rng = np.random.default_rng(500 + int(qt))
    m, k = 100, whole_blocks(qt, 768)
    rows = random_rows(qt, m, k, rng)
    x = activations(70, k, rng)
    y = native.testing.cuda_qgemm(int(qt), rows, k, x)
    for c in (0, 2, 3, 69):
        np.testing.assert_array_equal(y[c : c + 1], native.testing.cuda_qgemm(int(qt), rows, k, x[c : c + 1]))


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("qt", CUDA_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("scale", [1.0, EMBED_SCALE])
def test_dequant_rows_equal_gguf_and_the_cpu(qt, scale):
    rng = np.random.default_rng(600 + int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    ks = sorted({max(bs, 32), 256, 4864} | ({40, 13} if bs == 1 else set()))
    for k in ks:
        rows = random_rows(qt, 11, k, rng)
        ids = np.array([3, 0, 10, 3, 7, 1], np.int32)
        ref = ref_dequantize(rows, qt).reshape(11, k)[ids] * np.float32(scale)
        cpu = native.dequantize_raw(int(qt), rows, k)[ids] * np.float32(scale)
        pad = 8 if qt == T.F32 else 6
        for w in (rows, padded(rows, pad)):
            got = native.testing.cuda_dequant_rows(int(qt), w, k, ids, scale)
            assert got.shape == (len(ids), k) and got.dtype == np.float32
            np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), err_msg=f"{qt.name} k={k}")
            np.testing.assert_array_equal(got.view(np.uint32), cpu.view(np.uint32), err_msg=f"{qt.name} k={k}")


@gpu
@pytest.mark.gpu
def test_entry_points_refuse_what_they_cannot_run():
    rows = random_rows(T.Q4_K, 4, 256, np.random.default_rng(0))
    with pytest.raises(ValueError, match="not a row"):
        native.testing.cuda_dequant_rows(int(T.Q4_K), rows, 256, np.array([0, 4], np.int32), 1.0)
    with pytest.raises(ValueError, match="not a row"):
        native.testing.cuda_dequant_rows(int(T.Q4_K), rows, 256, np.array([-1], np.int32), 1.0)
    with pytest.raises(ValueError, match="int32"):
        native.testing.cuda_dequant_rows(int(T.Q4_K), rows, 256, np.array([0], np.int64), 1.0)
    with pytest.raises(ValueError, match="n must be"):
        native.testing.cuda_qgemm(int(T.Q4_K), rows, 256, np.ones((0, 256), np.float32))
    with pytest.raises(ValueError, match="whole number of blocks"):
        native.testing.cuda_qgemm(int(T.Q4_K), rows[:, :72], 128, np.ones((1, 128), np.float32))
