"""The KV cache row formats (native/kv_format.h, through localllm.native.testing) against gguf.quants and numpy.

- q8_0 quantize: the same float32 operations as ggml's reference quantizer (and gguf.quants, which reproduces
  it bit for bit), so the bytes must be equal; dequantize is d * q in float32: equal too.
- q4_0 quantize searches the block scale for the least squared error (kv_format.cpp, q4_0_scale): the bytes are
  GGML q4_0 blocks (gguf.quants decodes them to exactly our values), and every block's squared error is at most
  that of ggml's reference quantizer (whose scale is one of the candidates) and lower in total.
- f16: round to nearest even, equal to numpy's float16 cast.
- Hadamard: float32 butterflies; against the float64 product with the normalised Sylvester matrix each
  output is a sum of m terms of the same magnitude rounded log2(m) times, so the error is at most
  (log2(m) + 1) * u * sum|x| per group with u = 2^-24 (bound used: 2^-23 * (log2 m + 1) * sum|x|).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from gguf.quants import quantize as ref_quantize
from localllm import native

kv_quantize, kv_dequantize, hadamard = (
    native.testing.kv_quantize,
    native.testing.kv_dequantize,
    native.testing.hadamard,
)

QTYPES = {"q8_0": T.Q8_0, "q4_0": T.Q4_0}


def kv_rows(n: int, k: int, seed: int = 0) -> np.ndarray:
    """float32 [n, k]: Gaussian rows with a few large channels (as in real K), an all-zero block, a block
    whose largest magnitude is negative, one of equal values and (n >= 4, k >= 64) one of small integers with a
    tie of opposite signs for its largest magnitude."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[:, 3] *= 40
    x[:, k - 1] -= 90
    x[0, :32] = 0
    x[1, :32] = np.float32(-2.5)
    x[2, 5] = -1e4
    if n >= 4 and k >= 64:
        x[3, 32:64] = rng.integers(-3, 4, 32).astype(np.float32)
        x[3, 40], x[3, 50] = 7, -7
    return x


@pytest.mark.parametrize("k", [32, 64, 128, 256, 96])
def test_q4_0_is_ggml_q4_0_with_less_error(k):
    x = kv_rows(64, k)
    got = kv_quantize("q4_0", x)
    ref = ref_quantize(x, T.Q4_0)
    assert got.dtype == np.uint8 and got.shape == ref.shape
    back = kv_dequantize("q4_0", got, k)
    np.testing.assert_array_equal(back, ref_dequantize(got, T.Q4_0).reshape(64, k))
    err = ((back.astype(np.float64) - x) ** 2).reshape(-1, 32).sum(axis=1)
    ref_err = ((ref_dequantize(ref, T.Q4_0).reshape(64, k).astype(np.float64) - x) ** 2).reshape(-1, 32).sum(axis=1)
    # per block: no worse than the reference (1e-6 relative slack for float32 rounding of the candidates' errors)
    assert np.all(err <= ref_err * (1 + 1e-6) + 1e-30)
    g = np.random.default_rng(1).standard_normal((500, k)).astype(np.float32)  # no outliers: 0.886 measured
    sq = lambda q: float(((q.reshape(g.shape).astype(np.float64) - g) ** 2).sum())  # noqa: E731
    assert sq(kv_dequantize("q4_0", kv_quantize("q4_0", g), k)) < 0.92 * sq(
        ref_dequantize(ref_quantize(g, T.Q4_0), T.Q4_0)
    )
    assert np.all(back.reshape(64, -1, 32)[0, 0] == 0)  # the all-zero block stays zero


@pytest.mark.parametrize("k", [32, 64, 128, 256, 96])
@pytest.mark.parametrize("name", ["q8_0"])
def test_quantize_and_dequantize_match_gguf(name, k):
    x = kv_rows(7, k)
    got = kv_quantize(name, x)
    want = ref_quantize(x, QTYPES[name])
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    back = kv_dequantize(name, got, k)
    np.testing.assert_array_equal(back, ref_dequantize(want, QTYPES[name]).reshape(7, k))


def test_f16_rows_round_to_nearest_even():
    x = kv_rows(5, 40)
    x[4, :4] = [65520.0, 1e-8, 6e-8, np.float32(2.0**-25) * 3]  # overflow, underflow, subnormal ties
    got = kv_quantize("f16", x)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.float16), want)
    np.testing.assert_array_equal(kv_dequantize("f16", got, 40), want.astype(np.float32))


def sylvester(m: int) -> np.ndarray:
    h = np.ones((1, 1))
    while h.shape[0] < m:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(m)


@pytest.mark.parametrize("dim,m", [(64, 64), (128, 128), (256, 256), (96, 32), (80, 16), (6, 2)])
def test_hadamard_is_the_normalised_sylvester_rotation(dim, m):
    x = kv_rows(9, max(dim, 32), seed=1)[:, :dim].copy()
    got = hadamard(x)
    g = x.astype(np.float64).reshape(9, dim // m, m)
    want = (g @ sylvester(m).T).reshape(9, dim)
    bound = 2.0**-23 * (np.log2(m) + 1) * np.abs(g).sum(axis=2, keepdims=True)
    assert np.all(np.abs(got.reshape(9, dim // m, m) - want.reshape(9, dim // m, m)) <= bound)
    # orthogonal and symmetric: its own inverse, norms kept
    np.testing.assert_allclose(hadamard(got), x, rtol=0, atol=1e-5 * np.abs(x).max())
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(x, axis=1), rtol=1e-5)


def test_bad_input_raises_value_error():
    x = np.zeros((2, 64), np.float32)
    with pytest.raises(ValueError, match="kv_type: 'q5_0' is not one of f16, q8_0, q4_0"):
        kv_quantize("q5_0", x)
    with pytest.raises(ValueError, match="q4_0 needs a head_dim that is a multiple of 32, got 48"):
        kv_quantize("q4_0", np.zeros((2, 48), np.float32))
    with pytest.raises(ValueError, match="2-D float32"):
        kv_quantize("q8_0", np.zeros((2, 64)))
    with pytest.raises(ValueError, match="rows must be a uint8 array \\[n, 68\\]"):
        kv_dequantize("q8_0", np.zeros((2, 64), np.uint8), 64)
    with pytest.raises(ValueError, match="2-D float32"):
        hadamard(np.zeros(8, np.float32))
