"""Weights repacked at load (native/repack.h): Q4_0, Q4_1, Q5_0 and Q5_1 rows regrouped into the internal X8 layouts,
and Q4_K's super-blocks with their scales unpacked (Q4_Kx) (native/quant_formats.h), which the AVX2 path's small-N
kernels decode with fewer instructions.

Checked against an independent numpy writer of the layout as native/quant_formats.h specifies it, against gguf-py's
dequantization of the original rows, and, on every path this CPU runs, products of the repacked rows bit-identical to
those of the rows as they lie in the file for every N (the batch-invariance contract survives the repacking)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from localllm import native
from quant_blocks import random_rows

# GGML type -> (internal X8 id, name, field offsets in a block: m, qh, qs; None where absent)
X8 = {
    T.Q4_0: (49, "Q4_0x8", None, None, 2),
    T.Q4_1: (50, "Q4_1x8", 2, None, 4),
    T.Q5_0: (48, "Q5_0x8", None, 2, 6),
    T.Q5_1: (51, "Q5_1x8", 2, 4, 8),
}
TYPES = [*X8, T.Q4_K]
Q4_KX = (52, "Q4_Kx")


def cases(x8_ks: tuple[int, ...], q4k_ks: tuple[int, ...]) -> list:
    """(type, k) pairs: the X8 types take rows of whole 4 blocks of 32, Q4_K whole super-blocks of 256."""
    return [(qt, k) for qt in X8 for k in x8_ks] + [(T.Q4_K, k) for k in q4k_ks]


@pytest.fixture(params=native.known_paths())
def path(request):
    if request.param not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    yield request.param
    native.configure()


def layout_reference(qt: T, rows: np.ndarray, k: int) -> np.ndarray:
    """Rows of qt -> X8 bytes, written from the format's description (quant_formats.h), block by block."""
    _, _, m_at, qh_at, qs_at = X8[qt]
    bb, nb = rows.shape[1] // (k // 32), k // 32
    blocks = rows.reshape(rows.shape[0], nb, bb)
    out = np.zeros_like(rows)
    for r in range(rows.shape[0]):
        for s0 in range(0, nb, 8):
            n = min(8, nb - s0)
            span = bytearray(bb * n)
            qs_base = 2 * n * (2 if m_at is not None else 1)
            for b in range(n):
                blk = blocks[r, s0 + b]
                span[2 * b : 2 * b + 2] = bytes(blk[0:2])
                if m_at is not None:
                    span[2 * n + 2 * b : 2 * n + 2 * b + 2] = bytes(blk[m_at : m_at + 2])
                qh = int.from_bytes(bytes(blk[qh_at : qh_at + 4]), "little") if qh_at is not None else 0
                qs = blk[qs_at : qs_at + 16]
                for j in range(32):
                    q4 = int(qs[j] & 15) if j < 16 else int(qs[j - 16] >> 4)
                    span[qs_base + 32 * (b // 2) + j] |= q4 << (4 * (b % 2))
                    if qh_at is None:
                        continue
                    bit = (qh >> j) & 1
                    if n == 8:
                        span[qs_base + 16 * n + j] |= bit << b
                    else:
                        span[qs_base + 16 * n + j % 16] |= bit << (b + 4 * (j // 16))
            out[r, bb * s0 : bb * (s0 + n)] = np.frombuffer(bytes(span), dtype=np.uint8)
    return out


def q4kx_reference(rows: np.ndarray, k: int) -> np.ndarray:
    """Q4_K rows -> Q4_Kx bytes, written from the format's description (quant_formats.h): per super-block d and -dmin
    as float32, the 8 six-bit scales and 8 mins (ggml's get_scale_min_k4) a byte each, then qs as they are."""
    blocks = rows.reshape(rows.shape[0], k // 256, 144)
    out = []
    for blk in blocks.reshape(-1, 144):
        d, dmin = blk[0:4].view(np.float16).astype(np.float32)
        q = [int(v) for v in blk[4:16]]
        sc = [q[j] & 63 if j < 4 else (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4) for j in range(8)]
        mn = [q[j + 4] & 63 if j < 4 else (q[j + 4] >> 4) | ((q[j] >> 6) << 4) for j in range(8)]
        out.append(np.float32(d).tobytes() + np.float32(-dmin).tobytes() + bytes(sc) + bytes(mn) + bytes(blk[16:]))
    return np.frombuffer(b"".join(out), dtype=np.uint8).reshape(rows.shape[0], -1)


@pytest.mark.parametrize(("qt", "k"), cases((128, 256, 384, 896), (256, 1536)), ids=str)
def test_layout_matches_its_description(qt, k):
    rows = random_rows(qt, 5, k, np.random.default_rng(k))
    to, packed = native.repack(int(qt), rows, k)
    if qt == T.Q4_K:
        assert (to, native.INTERNAL_TYPES[to]) == Q4_KX
        assert packed.shape == (5, k // 256 * 152)
        np.testing.assert_array_equal(packed, q4kx_reference(rows, k))
        return
    assert (to, native.INTERNAL_TYPES[to]) == X8[qt][:2]
    assert packed.shape == rows.shape
    np.testing.assert_array_equal(packed, layout_reference(qt, rows, k))


@pytest.mark.parametrize(("qt", "k"), cases((128, 896, 4864), (256, 4864)), ids=str)
def test_repacked_rows_dequantize_to_the_same_weights(path, qt, k):
    native.configure(path)
    rows = random_rows(qt, 19, k, np.random.default_rng(1))
    to, packed = native.repack(int(qt), rows, k)
    want = ref_dequantize(rows, qt).reshape(19, k)
    np.testing.assert_array_equal(native.dequantize_raw(to, packed, k), want)


@pytest.mark.parametrize(("qt", "k"), cases((256, 896, 1152), (256, 1536)), ids=str)
@pytest.mark.parametrize("threads", [1, 2])
def test_products_are_bit_identical_to_the_files_rows_for_every_n(path, qt, k, threads):
    """Same weights, scales and groups: the repacked product is the same float32 bits, N = 1 .. 33 (small-N, fused
    and tile kernels alike), so a model's rows do not depend on whether its stage repacked."""
    native.configure(path, threads=threads)
    rng = np.random.default_rng(k)
    rows = random_rows(qt, 37, k, rng)
    to, packed = native.repack(int(qt), rows, k)
    for n in (1, 2, 3, 4, 5, 8, 17, 33):
        x = rng.standard_normal((n, k), dtype=np.float32)
        want = native.matmul_raw(int(qt), rows, k, x)
        got = native.matmul_raw(to, packed, k, x)
        assert np.array_equal(got, want), f"{path}, n={n}: max |diff| {np.abs(got - want).max()}"


def test_row_views_with_a_stride_repack_like_copies():
    rows = random_rows(T.Q5_0, 8, 256, np.random.default_rng(3))
    wide = np.zeros((8, rows.shape[1] + 10), dtype=np.uint8)
    wide[:, : rows.shape[1]] = rows
    _, a = native.repack(int(T.Q5_0), wide[:, : rows.shape[1]], 256)
    _, b = native.repack(int(T.Q5_0), rows, 256)
    np.testing.assert_array_equal(a, b)


def test_repack_refuses_what_has_no_layout_by_name():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="Q8_0"):
        native.repack(int(T.Q8_0), random_rows(T.Q8_0, 2, 256, rng), 256)
    with pytest.raises(ValueError, match="Q5_0 rows of 96 weights"):  # 3 blocks: not whole spans of 4
        native.repack(int(T.Q5_0), random_rows(T.Q5_0, 2, 96, rng), 96)
    with pytest.raises(ValueError, match="Q6_K"):
        native.repack(int(T.Q6_K), random_rows(T.Q6_K, 2, 256, rng), 256)


def test_which_paths_ask_for_repacked_rows():
    """AVX2 decodes Q5_0 as it lies at about half the bytes per second of Q8_0, the 4-bit types gathering their
    scales from 8 blocks, and Q4_K unpacking its 6-bit scales (docs/performance.md), so it asks; the scalar reference
    reads the file's layout."""
    for qt in TYPES:
        assert native.wants_repack("scalar", int(qt)) is False
    if "avx2" in native.available_paths():
        assert all(native.wants_repack("avx2", int(qt)) for qt in TYPES)
        assert native.wants_repack("avx2", int(T.Q8_0)) is False
