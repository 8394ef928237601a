"""Native kernels against independent references: gguf.quants.dequantize and float64 numpy.

Error bounds (why the thresholds are what they are):
- Dequantization is exact: the same float32 operations as the reference, so results must be equal.
- Quantized types: activations are rounded to int8 per 32 (x ~= dx * xq, |x - dx*xq| <= dx/2) on every path
  and for every N (native/kernels.h), integer dot products are exact, and each group of G weights adds one scaled float32 term. Against the float64
  product with the *quantized* activations x^ the only error is float32 rounding: at most
  (K/G + 4) * u * sum|w * x^| with u = 2^-23 (one rounding per group term plus the final scaling).
  Against the float64 product with the original x, activation rounding adds at most
  sum_k |w_k| * (dx_k / 2 + 8u|x_k|) (the kernel scales by the float32 reciprocal 127/amax, so a value
  a few ulps from a rounding tie may round the other way).
- Float types (F32, F16, BF16): x is not quantized; one fused multiply-add per weight, so the bound is
  (K + 4) * u * sum|w * x|.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from gguf.quants import quantize as ref_quantize
from localllm import native
from localllm.model import quant_types
from quant_blocks import TYPES, random_rows

U = 2.0**-23
FLOAT_TYPES = {T.F32, T.F16, T.BF16}
PATHS = native.known_paths()
N_LIST = list(range(1, 18)) + [64, 512]


def group_of(qt: T) -> int:
    return 16 if qt in (T.Q2_K, T.Q3_K, T.Q6_K) else 32


@pytest.fixture(params=PATHS)
def path(request):
    if request.param not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    yield request.param
    native.configure()


def ref_weights(qt: T, rows: np.ndarray, k: int) -> np.ndarray:
    return ref_dequantize(rows, qt).reshape(rows.shape[0], k).astype(np.float64)


def check_product(qt: T, y: np.ndarray, w64: np.ndarray, x: np.ndarray) -> None:
    """y: [n, m] from the kernels; w64: [m, k] float64 weights; x: [n, k] float32 activations."""
    k = x.shape[1]
    x64 = x.astype(np.float64)
    if qt in FLOAT_TYPES:
        bound = (k + 4) * U * (np.abs(x64) @ np.abs(w64).T)
        err = np.abs(y - x64 @ w64.T)
        assert np.all(err <= bound + 1e-30), f"{qt.name}: max excess {np.max(err - bound)}"
        return
    blk = 32
    xq, dx, _ = native.testing.quantize_x(x)
    xhat = (xq.reshape(x.shape[0], -1, blk).astype(np.float64) * dx[:, :, None]).reshape(x.shape)
    # round to nearest of x * (127 / amax): within dx/2, plus a few ulps of x for the rounded reciprocal
    act_err = np.repeat(dx, blk, axis=1).astype(np.float64) / 2 + 8 * U * np.abs(x64)
    assert np.all(np.abs(x64 - xhat) <= act_err)
    exact_q = xhat @ w64.T
    bound_q = (k / group_of(qt) + 4) * U * (np.abs(xhat) @ np.abs(w64).T)
    err_q = np.abs(y - exact_q)
    assert np.all(err_q <= bound_q + 1e-30), f"{qt.name}: vs quantized x, max excess {np.max(err_q - bound_q)}"
    bound_x = bound_q + act_err @ np.abs(w64).T
    err_x = np.abs(y - x64 @ w64.T)
    assert np.all(err_x <= bound_x * (1 + 1e-9)), f"{qt.name}: vs exact x, max excess {np.max(err_x - bound_x)}"


@pytest.mark.parametrize("qt", TYPES, ids=lambda t: t.name)
def test_dequantize_random_blocks_equal_gguf(qt, path):
    native.configure(path=path, threads=1)
    rng = np.random.default_rng(int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    for k in sorted({max(bs, 32), 256, 4864}):
        rows = random_rows(qt, 7, k, rng)
        got = native.dequantize_raw(int(qt), rows, k)
        np.testing.assert_array_equal(got, ref_dequantize(rows, qt).reshape(7, k))


def mxfp4_every_exponent_rows(k: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [rows, k / 32 * 17]: MXFP4 rows of k weights whose blocks hold every E8M0 exponent 0 .. 255 (shuffled,
    so each lands at several positions of an 8-block span) and, in each block, every nibble 0 .. 15 as both a low
    and a high nibble (qs[j] = p(j) | q(j) << 4 for random permutations p, q)."""
    nb = k // 32
    rows = -(-512 // nb)  # every exponent at least twice
    blocks = np.empty((rows * nb, 17), np.uint8)
    blocks[:, 0] = rng.permutation(np.resize(np.arange(256, dtype=np.uint8), rows * nb))
    for b in range(rows * nb):
        blocks[b, 1:] = rng.permutation(16).astype(np.uint8) | rng.permutation(16).astype(np.uint8) << 4
    return blocks.reshape(rows, nb * 17)


@pytest.mark.parametrize("k", [32, 96, 224, 896, 1024])
def test_mxfp4_dequantize_every_exponent_and_nibble_equals_gguf(path, k):
    """E8M0 scales 2^(e - 128) for all 256 e (e = 0, 1: float32 subnormals; e = 255: 2^127, whose products with the
    larger codebook values overflow to inf as ggml's do), every codebook value,
    whole and partial 8-block spans (k = 96, 224, 896: 3, 7 and a tail of 4 blocks): bit for bit gguf's values."""
    native.configure(path=path, threads=1)
    rows = mxfp4_every_exponent_rows(k, np.random.default_rng(39 + k))
    got = native.dequantize_raw(int(T.MXFP4), rows, k)
    with np.errstate(over="ignore"):  # e = 255 (2^127) times 2 .. 12 overflows to inf, in ggml too
        want = ref_dequantize(rows, T.MXFP4).reshape(-1, k)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for v in (2.0**-128, -(2.0**-127), 2.0**127, np.inf, -np.inf):  # the extremes are reached
        assert np.any(got == np.float32(v)), v


@pytest.mark.parametrize("qt", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_matches_float64(qt, path, threads):
    native.configure(path=path, threads=threads)
    rng = np.random.default_rng(1000 + int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    # 896 (the 0.5B's rows): three spans of 8 blocks and a tail of 4, which the AVX2 kernels unroll apart
    ks = [32, 256, 896, 4864, 8960] if bs == 32 else [256, 4864, 8960]
    if bs == 1:  # 7 and 901: rows whose last k % 8 weights the small-N float kernel takes one at a time
        ks = [7, 32, 256, 896, 901, 4864, 8960]
    for k in ks:
        rows = random_rows(qt, 33, k, rng)
        w64 = ref_weights(qt, rows, k)
        x = rng.standard_normal((512, k), dtype=np.float32)
        x[3, :] = 0.0  # an all-zero activation row (dx = 0)
        x[5, : min(k, 40)] *= 1000.0  # outliers in one block
        # every odd row count with a few N; all N on the full 33 rows
        for m in (1, 3, 7):
            for n in (1, 5, 17):
                check_product(qt, native.matmul_raw(int(qt), rows[:m], k, x[:n]), w64[:m], x[:n])
        for n in N_LIST if k <= 4864 else [1, 2, 9, 16, 17, 64]:
            check_product(qt, native.matmul_raw(int(qt), rows, k, x[:n]), w64, x[:n])


# Accuracy across paths (issue 18): every path sums the same exact int32 group terms, the min and offset terms
# included (native/kernels.h), so a SIMD path's float32 rounding must be no larger than the scalar path's. Weights
# as model files hold them (gguf's quantizer: a Q4_1/Q5_1 block's min is about -8 or -16 scales, so the min term
# cancels most of each group's product), activations with heavy-tailed channels. Measured, the RMS over 4096 outputs
# of |y - exact| / sum|w x^| on AVX2 relative to the scalar path's: 0.56-0.80 (fused multiply-adds, 8 sets).
ACCURACY_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
ACCURACY_RATIO = 1.25


@pytest.mark.parametrize("qt", ACCURACY_TYPES, ids=lambda t: t.name)
def test_simd_paths_as_accurate_as_scalar(qt):
    paths = native.available_paths()
    if paths == ["scalar"]:
        pytest.skip("this CPU runs the scalar path only")
    rng = np.random.default_rng(18)
    try:
        for k in (576, 1536):  # smollm2's rows
            rows = ref_quantize((rng.standard_normal((64, k)) * 0.05 + 0.01).astype(np.float32), qt)
            w64 = ref_weights(qt, rows, k)
            x = rng.standard_normal((64, k), dtype=np.float32) * np.exp(rng.standard_normal(k)).astype(np.float32)
            rms = {}
            for p in paths:
                native.configure(path=p, threads=2)
                xq, dx, _ = native.testing.quantize_x(x)
                xhat = (xq.reshape(64, -1, 32).astype(np.float64) * dx[:, :, None]).reshape(x.shape)
                err = np.abs(native.matmul_raw(int(qt), rows, k, x) - xhat @ w64.T) / (np.abs(xhat) @ np.abs(w64).T)
                rms[p] = float(np.sqrt(np.mean(err**2)))
            print(f"{qt.name} k={k}: RMS relative error {rms}")
            assert all(e <= ACCURACY_RATIO * rms["scalar"] for e in rms.values()), f"{qt.name} k={k}: {rms}"
    finally:
        native.configure()


def test_paths_and_threads_agree_exactly_where_arithmetic_is_identical():
    """Thread count must not change results: tiles are independent and summed in a fixed order."""
    rng = np.random.default_rng(7)
    rows = random_rows(T.Q4_K, 100, 4864, rng)
    x = rng.standard_normal((9, 4864), dtype=np.float32)
    outs = []
    for th in (1, 2):
        native.configure(threads=th)
        outs.append(native.matmul_raw(int(T.Q4_K), rows, 4864, x))
    native.configure()
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("qt", [T.Q8_0, T.Q4_K, T.Q6_K], ids=lambda t: t.name)
def test_tile_column_blocks_leave_columns_unchanged(qt, path):
    """Long rows (k = 4864, 8960) with many columns run the tile path in column blocks (their activations would
    not stay in L2 otherwise): every column must come out bit-identical to the same column of a product short
    enough (16 columns) to run unblocked, whichever block and panel it falls in."""
    native.configure(path=path, threads=2)
    rng = np.random.default_rng(2000 + int(qt))
    for k in (4864, 8960):
        rows = random_rows(qt, 21, k, rng)
        x = rng.standard_normal((200, k), dtype=np.float32)
        y = native.matmul_raw(int(qt), rows, k, x)
        for c0 in (0, 48, 184):
            np.testing.assert_array_equal(y[c0 : c0 + 16], native.matmul_raw(int(qt), rows, k, x[c0 : c0 + 16]))
    native.configure()


UNPACK_IL_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL, T.Q4_K, T.Q6_K]


@pytest.mark.parametrize("il_path", ["avx512", "avx512s8"])
@pytest.mark.parametrize("qt", UNPACK_IL_TYPES, ids=lambda t: t.name)
def test_unpack_straight_to_tiles_equals_unpack_and_interleave(qt, il_path):
    """The AVX-512 paths unpack 16 rows' packed bytes straight into the tile layout (unpack_il, used by avx512's tile
    and small-N kernels and avx512s8's tile kernel): weights, scales and mins must be the bits that unpack +
    interleave16 give, for whole and partial tiles (lanes past the rows are unspecified). avx512s8 reads Q4_K in
    AVX2's repacked layout (Q4_Kx), so it is checked there too."""
    if il_path not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {il_path} path")
    native.configure(path=il_path, threads=1)
    rng = np.random.default_rng(3000 + int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    try:
        for k in [bs, 2 * bs, 4864] if bs == 256 else [32, 96, 896]:
            for nr in (1, 7, 16):
                rows = random_rows(qt, nr, k, rng)
                type_id = int(qt)
                if il_path == "avx512s8" and qt == T.Q4_K:
                    type_id, rows = native.repack(type_id, rows, k)
                direct = native.testing.unpack_tile(type_id, rows, k, True)
                ref = native.testing.unpack_tile(type_id, rows, k, False)
                np.testing.assert_array_equal(direct[0][:, :nr], ref[0][:, :nr], err_msg=f"weights k={k} nr={nr}")
                for a, b, what in ((direct[1], ref[1], "scales"), (direct[2], ref[2], "mins")):
                    np.testing.assert_array_equal(
                        a[:, :nr].view(np.uint32), b[:, :nr].view(np.uint32), err_msg=f"{what} k={k} nr={nr}"
                    )
    finally:
        native.configure()


def test_unsupported_type_names_type_and_tensor():
    rows = np.zeros((2, 66), dtype=np.uint8)
    with pytest.raises(native.UnsupportedTypeError, match=r"blk\.0\.attn_q\.weight.*IQ2_XXS"):
        native.matmul_raw(int(T.IQ2_XXS), rows, 256, np.zeros((1, 256), np.float32), "blk.0.attn_q.weight")
    with pytest.raises(ValueError, match="unknown GGML tensor type"):
        native.matmul_raw(99, rows, 256, np.zeros((1, 256), np.float32))


def test_bad_shapes_raise_value_error():
    rows = np.zeros((4, 144), dtype=np.uint8)
    with pytest.raises(ValueError, match="columns"):
        native.matmul_raw(int(T.Q4_K), rows, 256, np.zeros((1, 128), np.float32))
    with pytest.raises(ValueError, match="bytes"):
        native.matmul_raw(int(T.Q4_K), rows[:, :100], 256, np.zeros((1, 256), np.float32))
    with pytest.raises(ValueError, match="whole number of blocks"):
        native.matmul_raw(int(T.Q4_K), rows, 100, np.zeros((1, 100), np.float32))
    with pytest.raises(ValueError, match="threads"):
        native.configure(threads=0)


@pytest.mark.parametrize("want", PATHS)
def test_env_var_forces_path(want):
    env = dict(os.environ, LOCALLLM_CPU=want)
    r = subprocess.run(
        [sys.executable, "-c", "from localllm import native; print(native.current_path())"],
        env=env,
        capture_output=True,
        text=True,
    )
    if want in native.available_paths():
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == want
    else:
        assert r.returncode != 0 and "not supported on this machine" in r.stderr


def test_env_var_rejects_unknown_path():
    env = dict(os.environ, LOCALLLM_CPU="sse9")
    r = subprocess.run([sys.executable, "-c", "import localllm.native"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "unknown CPU path 'sse9'" in r.stderr


def test_quant_table_matches_gguf_constants():
    for t in quant_types.BY_ID.values():
        if t.name == "Q8_1":
            continue  # gguf-py lists float32 d and s (40 bytes); ggml's block_q8_1 holds two halves (36)
        qt = T(t.id)
        assert (t.block_size, t.type_size) == GGML_QUANT_SIZES[qt], t.name
        assert t.name == qt.name


@pytest.mark.parametrize("n", [1, 3, 6, 9, 34])
def test_matmul_multi_equals_separate_products(path, n):
    """q/k/v and gate/up go through one call: mixed types (shared and distinct activation layouts, a float
    type between quantized ones; for large n the tile path quantizes x once and packs it again only when the
    layout changes: Q4_1 after Q4_K reuses the packing) must give exactly what separate products give."""
    native.configure(path=path, threads=2)
    rng = np.random.default_rng(11)
    k = 512
    mix = [(T.Q5_0, 40), (T.Q8_0, 17), (T.Q5_0, 3), (T.F16, 5), (T.Q6_K, 33), (T.Q4_K, 16), (T.Q4_1, 8)]
    products = [(int(qt), random_rows(qt, m, k, rng)) for qt, m in mix]
    x = rng.standard_normal((n, k), dtype=np.float32)
    got = native.testing.matmul_multi(products, k, x)
    assert len(got) == len(products)
    for (type_id, rows), y in zip(products, got):
        assert y.shape == (n, rows.shape[0])
        np.testing.assert_array_equal(y, native.matmul_raw(type_id, rows, k, x))


def test_matmul_multi_rejects_a_product_of_another_row_length():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((1, 256), dtype=np.float32)
    good = (int(T.Q8_0), random_rows(T.Q8_0, 4, 256, rng))
    bad = (int(T.Q8_0), random_rows(T.Q8_0, 4, 512, rng))
    with pytest.raises(ValueError, match="Q8_0"):
        native.testing.matmul_multi([good, bad], 256, x)


def test_quantize_activations_per_32(path):
    """x ~= dx * xq per block of 32 (Q8_0-style): dx = amax / 127, xq = x * (127 / amax) in float32 rounded to
    nearest even (every path the same bytes), sums of xq per 16 exact; an all-zero block gets dx = 0."""
    native.configure(path=path, threads=2)
    rng = np.random.default_rng(32)
    x = rng.standard_normal((3, 4 * 256), dtype=np.float32)
    x[1, :32] = 0.0
    x[2, 5] = 300.0  # an outlier: its block's scale only
    x[0, 64:96] = np.arange(-16, 16, dtype=np.float32) + 0.5  # ties: halves ...
    x[0, 64] = -127.0  # ... kept halves by amax 127 (id = 1)
    x[0, 96:128] = np.float32(1e-38)  # 127 / amax overflows: zeros, as an all-zero block
    xq, dx, s16 = native.testing.quantize_x(x)
    assert xq.shape == x.shape and dx.shape == (3, x.shape[1] // 32) and s16.shape == (3, x.shape[1] // 16)

    def expected(x):  # (dx, the bytes) in float32 as kernels.h says; amax skips NaNs
        amax = np.nanmax(np.abs(x.reshape(len(x), -1, 32)), axis=-1)
        with np.errstate(divide="ignore", over="ignore"):
            idv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
        idv[~np.isfinite(idv)] = 0
        return amax / np.float32(127.0), np.rint(np.nan_to_num(x) * np.repeat(idv, 32, axis=1)).astype(np.int8)

    want_dx, want_xq = expected(x)
    np.testing.assert_array_equal(dx, want_dx)
    np.testing.assert_array_equal(xq, want_xq)
    assert set(xq[0, 65:96].tolist()) >= {-14, -12, 0, 2, 14}  # halves went to even
    assert not xq[0, 96:128].any() and dx[0, 3] > 0
    x2 = rng.standard_normal((1, 64), dtype=np.float32)
    x2[0, 3] = x2[0, 31] = x2[0, 40] = np.nan  # skipped by amax; a NaN's own byte is unspecified
    xq2, dx2, _ = native.testing.quantize_x(x2)
    want_dx, want_xq = expected(x2)
    np.testing.assert_array_equal(dx2, want_dx)
    finite = np.isfinite(x2)
    np.testing.assert_array_equal(xq2[finite], want_xq[finite])
    assert dx[1, 0] == 0 and np.all(xq[1, :32] == 0)
    assert np.abs(xq).max() <= 127
    err = np.abs(x - np.repeat(dx, 32, axis=1) * xq.astype(np.float32))
    assert np.all(err <= np.repeat(dx, 32, axis=1) * (0.5 + 1e-5) + 1e-30)
    np.testing.assert_array_equal(s16, xq.reshape(3, -1, 16).astype(np.int64).sum(axis=-1))
    with pytest.raises(ValueError, match="multiple of 32"):
        native.testing.quantize_x(x[:, :48])


def test_silu_mul_matches_float64():
    """The FFN's SiLU (native/ops.cpp: a polynomial e^x that vectorises) within a few float32 ulps of
    g * u / (1 + e^-g), down to where the result underflows, and finite far out."""
    rng = np.random.default_rng(5)
    g = np.concatenate(
        [
            np.linspace(-30, 30, 20001, dtype=np.float32),
            rng.standard_normal(4096, dtype=np.float32) * 4,
            np.array([-1000, -88, -87.5, 87.5, 88, 1000, 0, -0.0], dtype=np.float32),
            np.linspace(-180, 180, 20001, dtype=np.float32),
        ]
    )
    u = rng.standard_normal(g.size, dtype=np.float32)
    got = native.testing.silu_mul(g, u).astype(np.float64)
    g64, u64 = g.astype(np.float64), u.astype(np.float64)
    want = g64 * u64 / (1.0 + np.exp(-g64))
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got - want) <= 8 * U * np.abs(want) + 1e-37)


def test_swiglu_oai_mul_matches_float64():
    """gpt-oss's clamped SwiGLU (ggml_swiglu_oai: alpha 1.702, limit 7) within a few float32 ulps of the float64
    formula, on both sides of both clamps: g above 7 acts as 7, u outside [-7, 7] as its bound."""
    rng = np.random.default_rng(6)
    g = np.concatenate([np.linspace(-40, 40, 8001, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32) * 8])
    u = np.concatenate([np.linspace(30, -30, 8001, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32) * 8])
    got = native.testing.swiglu_oai_mul(g, u).astype(np.float64)
    x, y = np.minimum(g.astype(np.float64), 7.0), np.clip(u.astype(np.float64), -7.0, 7.0)
    # the exponent as float32 computes it (-1.702f * x: its rounding is the formula's, ggml's too), then float64
    glu = x / (1.0 + np.exp((np.float32(-1.702) * x.astype(np.float32)).astype(np.float64)))
    want = glu * (y + 1.0)
    assert np.all(np.isfinite(got))
    # relative to the factors' sizes: y + 1 is rounded to float32 (cancelling near y = -1) as ggml rounds it
    assert np.all(np.abs(got - want) <= 8 * U * np.abs(glu) * (np.abs(y) + 1.0) + 1e-37)
    assert np.any(g > 7) and np.any(u > 7) and np.any(u < -7)
    np.testing.assert_allclose(got[g > 7], (glu[g > 7] * (y[g > 7] + 1.0)), rtol=8 * U)


def test_layer_norm_matches_float64():
    """An encoder's LayerNorm (native/ops.cpp: mean and variance summed in double, the mean then a float as ggml_norm
    keeps it) within a few float32 ulps of the float64 formula, plus the float mean's rounding scaled by 1 / std,
    with and without a bias, on rows with a large common offset (where a one-pass variance would cancel) and on odd
    widths."""
    from reference_forward import layer_norm

    rng = np.random.default_rng(7)
    for dim in (1, 7, 128, 384, 1000):
        x = rng.standard_normal((5, dim), dtype=np.float32) * 3
        x[1] += 1000.0  # a large mean
        x[2] *= 1e-3
        w = (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32)
        b = (0.1 * rng.standard_normal(dim)).astype(np.float32)
        for bias in (b, None):
            got = native.testing.layer_norm(x, w, bias, 1e-12).astype(np.float64)
            want = layer_norm(x.astype(np.float64), w.astype(np.float64), bias, 1e-12)
            x64 = x.astype(np.float64)
            offset = np.abs(x64.mean(1, keepdims=True)) / np.maximum(x64.std(1, keepdims=True), 1e-30)
            assert np.all(np.abs(got - want) <= 16 * U * (np.abs(want) + np.abs(w) * (1 + offset))), dim


def test_gelu_matches_float64():
    """BERT's GELU (the tanh approximation llama.cpp's ggml_gelu computes) within a few float32 ulps of the float64
    formula, finite far out."""
    from reference_forward import gelu_tanh

    x = np.concatenate([np.linspace(-20, 20, 40001, dtype=np.float32), np.array([-1e4, 1e4, 0], dtype=np.float32)])
    got = native.testing.gelu(x).astype(np.float64)
    want = gelu_tanh(x.astype(np.float64))
    assert np.all(np.isfinite(got))
    assert np.all(np.abs(got - want) <= 8 * U * np.abs(x.astype(np.float64)) + 1e-37)


def test_silu_mul_propagates_nan_and_inf():
    """A NaN activation stays NaN through SiLU (the polynomial e^x converts no NaN to an integer: undefined in
    C++), +inf stays +inf (times u), and -inf gives no finite number (-inf here: (g h) h with h = e^-87 after
    the clamp; NaN, as torch and ggml give, would do too): nothing finite that would hide a broken model."""
    g = np.array([np.nan, -np.nan, np.inf, -np.inf, 1.0] * 8, dtype=np.float32)  # a vector's worth and a tail
    u = np.full(g.size, 2.0, dtype=np.float32)
    got = native.testing.silu_mul(g, u)
    assert np.all(np.isnan(got[0::5])) and np.all(np.isnan(got[1::5]))
    assert np.all(got[2::5] == np.inf)
    assert not np.any(np.isfinite(got[3::5]))
    np.testing.assert_allclose(got[4::5], 2.0 / (1.0 + np.exp(-1.0)), rtol=1e-6)


def int8_peak_reference(path: str, iters: int) -> int | None:
    """kernels.h's int8 peak chains in Python: PEAK_CHAINS (12) chains whose lanes all hold one value, chain c's
    bytes starting at c + 1, each step adding 3 * (the sum of the lane's unsigned bytes), wrapping at the lane's
    width (avx2: vpmaddubsw pairs into 16-bit lanes, never saturating: 3 * 2 * 255 < 2^15; avx512: vpdpbusd
    quads into 32-bit lanes); checksum: the lanes' unsigned values summed (16 lanes a chain on either path)."""
    if path == "scalar" or (native.EMULATED_AVX512 and path.startswith("avx512")):
        return None
    nbytes = {"avx2": 2, "avx512": 4, "avx512s8": 4}[path]
    total = 0
    for c in range(12):
        v = int.from_bytes(bytes([c + 1] * nbytes), "little")
        for _ in range(iters):
            v = (v + 3 * sum(v.to_bytes(nbytes, "little"))) % (1 << 8 * nbytes)
        total += 16 * v
    return total


@pytest.mark.parametrize("threads", [1, 2])
def test_int8_peak_loop(path, threads):
    """bench kernels' compute roofline runs the loop kernels.h describes, on every thread: its checksum is the
    chains' value computed in Python, and the multiply-adds it reports are threads * iters * per-step count."""
    native.configure(path, threads=threads)
    try:
        for iters in (1, 2, 37):
            got = native.int8_peak(iters)
            want = int8_peak_reference(path, iters)
            if want is None:
                assert got is None
                continue
            macs, checksum = got
            assert checksum == want
            assert macs == threads * iters * 12 * {"avx2": 32, "avx512": 64, "avx512s8": 64}[path]
        with pytest.raises(ValueError, match="iters"):
            native.int8_peak(0)
    finally:
        native.configure()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("streams", [1, 4, 16])
def test_stream_read_reads_every_byte(threads, streams):
    """The read-bandwidth probe behind `bench`: its checksum (the uint64 words of the whole 64-byte chunks plus the
    remaining bytes, mod 2^64) proves every byte was read once, whatever the thread and stream split."""
    native.configure(threads=threads)
    rng = np.random.default_rng(streams)
    for n in (0, 63, 1000, 64 * 37 + 5, (1 << 20) + 4099):  # 1000: whole chunks but no whole stream part
        buf = rng.integers(0, 256, n, dtype=np.uint8)
        whole = n // 64 * 64
        want = (int(buf[:whole].view(np.uint64).astype(object).sum()) + int(buf[whole:].astype(np.int64).sum())) % 2**64
        assert native.stream_read(buf, streams) == want
    native.configure()
    with pytest.raises(ValueError, match="streams"):
        native.stream_read(np.zeros(64, np.uint8), 0)
