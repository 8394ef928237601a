"""Sampling's candidate selection on the device (native/cuda/top_k.cu) against the specification, on a machine
with an NVIDIA GPU (tests marked gpu, skipped without one): cuda_top_k(x [n, stride], n_valid, k) gives, for each
row, the k largest of x[:, :n_valid] by value descending with ties by index ascending, in numpy's sort order (NaN
above +inf, -0.0 equal to +0.0), and the values as stored (bit for bit). The reference below is a stable numpy
sort; on finite rows the result is also sampling._largest's, the CPU path it replaces. Exact equality throughout:
the kernel is a radix select, independent of scheduling.

Without a device the entry point raises RuntimeError (the backend not compiled in, or the CUDA error).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu, no_gpu
from localllm import native
from localllm.sampling import _largest

F32_MAX = np.finfo(np.float32).max


def reference(row: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest of row (1-D) by value descending, ties by index ascending, NaN largest: a stable
    ascending sort of the reversed row puts ties in descending index order, so read backwards it is the order."""
    n = row.size
    return (n - 1 - np.argsort(row[::-1], kind="stable"))[::-1][:k]


def check(x: np.ndarray, n_valid: int, k: int) -> None:
    """Both ways: by slices of the row and their candidates (as a step takes rows of 8,192 and more), and by one
    thread block a row."""
    ids, vals = native.testing.cuda_top_k(x, n_valid, k)
    whole_ids, whole_vals = native.testing.cuda_top_k(x, n_valid, k, sliced=False)
    assert np.array_equal(whole_ids, ids) and np.array_equal(whole_vals.view(np.uint32), vals.view(np.uint32))
    assert ids.shape == (x.shape[0], k) and ids.dtype == np.int32
    assert vals.shape == (x.shape[0], k) and vals.dtype == np.float32
    for r in range(x.shape[0]):
        row = x[r, :n_valid]
        want = reference(row, k)
        assert np.array_equal(ids[r], want), f"row {r}: ids {ids[r][:8]}..., want {want[:8]}..."
        assert np.array_equal(vals[r].view(np.uint32), row[want].view(np.uint32)), f"row {r}: vals not as stored"
        if np.all(np.isfinite(row)):
            assert np.array_equal(ids[r], _largest(row.copy(), k)), f"row {r}: differs from sampling._largest"


@no_gpu
def test_entry_point_fails_cleanly_without_a_device():
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        native.testing.cuda_top_k(np.ones((1, 64), np.float32), 64, 4)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 40, 256])
@pytest.mark.parametrize("n, m", [(1, 151_936), (7, 49_152), (64, 151_936), (3, 262_144)])
def test_random_rows(n, m, k):
    rng = np.random.default_rng(n * 1000 + k)
    check(rng.standard_normal((n, m), dtype=np.float32) * 4, m, k)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 40, 256])
def test_ties_at_the_boundary_keep_the_lowest_indices(k):
    rng = np.random.default_rng(k)
    levels = np.array([-3.0, 0.5, 1.0, 2.0], np.float32)
    check(rng.choice(levels, size=(7, 151_936)), 151_936, k)  # hundreds of thousands of ties
    check(rng.choice(levels[2:], size=(3, 5_000), p=[0.97, 0.03]), 5_000, k)  # the boundary inside the lower level
    check(np.full((64, 2_500), 1.5, np.float32), 2_500, k)  # all equal: the first k
    check(np.full((1, 151_936), -7.0, np.float32), 151_936, k)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 40, 256])
def test_values_differing_in_the_last_digit_only(k):
    """Every pass of the radix select but the last finds one digit for all: the boundary and its ties are decided
    by the lowest 8 bits (4 values next to 1.0, and next to -1.0 where a larger key is a smaller magnitude)."""
    rng = np.random.default_rng(k)
    low = rng.integers(0, 4, size=(4, 20_000)).astype(np.uint32)
    check((np.uint32(0x3F800000) + low).view(np.float32), 20_000, k)
    check((np.uint32(0xBF800000) + low).view(np.float32), 20_000, k)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 3, 40, 256])
def test_masked_rows(k):
    x = np.full((3, 151_936), -np.inf, np.float32)  # -inf everywhere but a few: -inf ties fill the rest
    x[0, [5, 123, 60_000]] = [1.0, -1.0, 2.0]
    x[1, 151_935] = 0.0
    x[2, ::1000] = np.arange(152, dtype=np.float32)
    check(x, 151_936, k)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 40, 256])
def test_special_values(k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((2, 8_000), dtype=np.float32)
    neg_nan = np.array([0xFFC00001], np.uint32).view(np.float32)[0]  # a negative NaN with a payload
    x[0, [7, 3_000, 11]] = np.nan
    x[0, 3_001] = neg_nan
    x[0, 9], x[0, 10], x[0, 12] = np.inf, -np.inf, F32_MAX  # NaN above +inf above every finite value
    x[1, :] = 0.0
    x[1, ::2] = -0.0  # -0.0 and +0.0 tie: by index, each keeping its sign
    x[1, [100, 50, 51]] = [-1e-45, 1e-45, -F32_MAX]
    check(x, 8_000, k)
    # five copies end to end (rows of 40,000 in 9 slices): every special value ties with its copies in other slices
    check(np.tile(x, 5), 40_000, k)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 40, 256])
def test_padding_past_n_valid_is_never_taken(k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((7, 151_936 + 64), dtype=np.float32)
    x[:, 151_936:] = F32_MAX
    x[0, 151_936:] = np.nan
    check(x, 151_936, k)
    check(x, 151_936 - 1001, k)  # n_valid not a multiple of anything


@gpu
@pytest.mark.gpu
def test_short_rows():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 300), dtype=np.float32)
    for n_valid, k in ((1, 1), (7, 7), (256, 256), (300, 256)):
        check(x, n_valid, k)
    check(rng.standard_normal((2, 1025), dtype=np.float32), 1025, 256)  # one element past a block's step


@gpu
@pytest.mark.gpu
def test_refuses_bad_arguments():
    x = np.ones((2, 300), np.float32)
    for n_valid, k, name in ((300, 0, "k"), (300, 257, "k"), (10, 11, "k"), (0, 1, "n_valid"), (301, 1, "n_valid")):
        with pytest.raises(ValueError, match=f"{name} must be"):
            native.testing.cuda_top_k(x, n_valid, k)
    with pytest.raises(ValueError, match="n must be"):
        native.testing.cuda_top_k(np.ones((0, 300), np.float32), 300, 1)
    with pytest.raises(ValueError, match="x must be"):
        native.testing.cuda_top_k(np.ones((2, 300), np.float64), 300, 1)
