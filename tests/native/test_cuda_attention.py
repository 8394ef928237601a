"""The KV cache and attention kernels of the CUDA backend (native/cuda/kv.cu) against their CPU twins, on a
machine with an NVIDIA GPU (tests marked gpu, skipped without one):

- kv_write: the bytes of native.testing.kv_quantize (kv_format.cpp's kv_quantize_row, as KvCache::write calls it
  on a whole row of n_kv_head * head_dim values) exactly, for f16, q8_0 and q4_0 (whose scale search the device
  repeats with the CPU's float / double operations in the CPU's order);
- the KV transforms: KvTransforms::to_cache / from_cache written out with numpy's float32 operations (each
  correctly rounded, as the CPU's) and native.testing.hadamard (the CPU's butterflies); the device runs the
  same operations in the same order, so the tolerance is a few units of float32 rounding only;
- paged attention: the float64 softmax over the keys and values as the CPU dequantizes them
  (native.testing.kv_dequantize), within 1e-4 of the values' magnitude (the device sums in float32 in its own
  order). Slots no sequence owns hold 0xff bytes, a NaN in every KV type: a read outside the block tables shows.

Without a device each entry point raises RuntimeError (the backend not compiled in, or the CUDA error), after
the argument checks, which raise ValueError with or without one.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu, no_gpu
from localllm import native
from test_kv_format import kv_rows

KV_TYPES = ["f16", "q8_0", "q4_0"]
# (n_head, n_kv_head, head_dim): Qwen2.5 0.5B's GQA, 128 and 256 dims, and a head of three 32-blocks (its
# Hadamard groups are 32 wide)
SHAPES = [(14, 2, 64), (8, 2, 128), (4, 1, 256), (6, 3, 96)]


def rows_bytes(kv_type: str, row: int) -> int:
    return native.testing.kv_quantize(kv_type, np.zeros((1, row), np.float32)).shape[1]


# ---- kv_write ----


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kv_type", KV_TYPES)
@pytest.mark.parametrize("n_kv_head,head_dim", [(2, 64), (8, 128), (1, 256), (3, 96)])
def test_kv_write_is_the_cpu_bytes(kv_type, n_kv_head, head_dim):
    rng = np.random.default_rng(head_dim * 10 + n_kv_head)
    row, T, n_slots = n_kv_head * head_dim, 300, 512
    x = kv_rows(T, row, seed=head_dim * 10 + n_kv_head)
    x[10:20] *= np.float32(1e-3)  # small scales: f16 subnormals for the block scales of the smallest
    x[20:30] = rng.standard_normal((10, row)).astype(np.float32)  # no outliers: q4_0's search picks inner scales
    slots = rng.permutation(n_slots)[:T].astype(np.int32)
    pool = rng.integers(0, 256, (n_slots, rows_bytes(kv_type, row)), dtype=np.uint8)
    got = native.testing.cuda_kv_write(kv_type, x, head_dim, slots, pool)
    want = pool.copy()
    want[slots] = native.testing.kv_quantize(kv_type, x)
    assert got.dtype == np.uint8 and got.shape == pool.shape
    bad = np.nonzero(np.any(got != want, axis=1))[0]
    assert bad.size == 0, f"{kv_type}: {bad.size} slots differ from the CPU's bytes, first {bad[:5]}"


@gpu
@pytest.mark.gpu
def test_kv_write_refuses_a_slot_written_twice():
    x = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match="slots"):
        native.testing.cuda_kv_write("q8_0", x, 64, np.array([3, 3], np.int32), np.zeros((4, 68), np.uint8))
    with pytest.raises(ValueError, match="slots"):
        native.testing.cuda_kv_write("q8_0", x, 64, np.array([0, 4], np.int32), np.zeros((4, 68), np.uint8))


# ---- the KV transforms ----


def cpu_transforms(q, k, v, att, *, rotate_k, rotate_v, center_k, center_v, k_scale, k_bias, v_bias):
    """KvTransforms::to_cache then from_cache (kv_transforms.cpp) in float32 numpy, the CPU's Hadamard."""
    n_head, n_kv_head, hd = q.shape[1], k.shape[1], q.shape[2]
    group = n_head // n_kv_head

    def rot(a):
        return native.testing.hadamard(np.ascontiguousarray(a).reshape(-1, hd)).reshape(a.shape)

    if center_k:
        k = k - k_bias.reshape(n_kv_head, hd)
    if k_scale is not None:
        s = k_scale.reshape(n_kv_head, hd)
        k = k / s
        q = q * np.repeat(s, group, axis=0)  # query head h reads kv head h / group
    if rotate_k:
        q, k = rot(q), rot(k)
    if rotate_v:
        v, att = rot(v), rot(att)
    if center_v:
        att = att + np.repeat(v_bias.reshape(n_kv_head, hd), group, axis=0)
    return q, k, v, att


# (rotate_k, rotate_v, center_k, center_v, equalize)
FLAGS = [
    (True, True, True, True, True),
    (True, True, False, False, False),
    (False, False, True, True, True),
    (False, True, False, True, False),
    (True, False, False, False, True),
]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n_head,n_kv_head,head_dim", SHAPES)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "".join("RrCcE"[i] if on else "-" for i, on in enumerate(f)))
def test_kv_transforms_match_the_cpu(n_head, n_kv_head, head_dim, flags):
    rotate_k, rotate_v, center_k, center_v, equalize = flags
    rng = np.random.default_rng(n_head * 1000 + head_dim)
    n, ch = 7, n_kv_head * head_dim
    f32 = np.float32
    q = rng.standard_normal((n, n_head, head_dim)).astype(f32) * f32(3)
    k = rng.standard_normal((n, n_kv_head, head_dim)).astype(f32) * f32(5)
    v = rng.standard_normal((n, n_kv_head, head_dim)).astype(f32)
    att = rng.standard_normal((n, n_head, head_dim)).astype(f32)
    k_scale = np.exp(rng.standard_normal(ch) * 0.7).astype(f32) if equalize else None
    k_bias = (rng.standard_normal(ch) * 4).astype(f32)
    v_bias = rng.standard_normal(ch).astype(f32)
    kw = dict(rotate_k=rotate_k, rotate_v=rotate_v, center_k=center_k, center_v=center_v, k_scale=k_scale)
    got = native.testing.cuda_kv_transforms(q, k, v, att, k_bias=k_bias, v_bias=v_bias, **kw)
    want = cpu_transforms(q, k, v, att, k_bias=k_bias, v_bias=v_bias, **kw)
    for name, g, w in zip(("q", "k", "v", "att"), got, want):
        assert g.dtype == np.float32 and g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=0, atol=2.0**-20 * np.abs(w).max(), err_msg=name)
    # without att: to_cache alone, att comes back None
    q2, k2, v2, none = native.testing.cuda_kv_transforms(q, k, v, k_bias=k_bias, v_bias=v_bias, **kw)
    assert none is None
    for g2, g in zip((q2, k2, v2), got):
        np.testing.assert_array_equal(g2, g)


# ---- paged attention ----


def attention_case(rng, n_head, n_kv_head, hd, k_type, v_type, block_size=16, lengths=(37, 5, 70, 1), rows=None):
    """A paged cache of several sequences (blocks scattered over the pool, spare blocks and the tables' unused
    entries pointing nowhere) and a batch of rows: all of sequence 0 (prefill), the last position of sequence 1
    (decode), the last 6 of sequence 2 (a prefill chunk after cached positions), the one of sequence 3; or the
    (sequence, position) pairs `rows` when given."""
    row = n_kv_head * hd
    n_blocks_of = [-(-length // block_size) for length in lengths]
    n_blocks = sum(n_blocks_of) + 3
    max_blocks = max(n_blocks_of) + 1
    order = rng.permutation(n_blocks)
    tables = np.full((len(lengths), max_blocks), -1, np.int32)
    at = 0
    for s, nb in enumerate(n_blocks_of):
        tables[s, :nb] = order[at : at + nb]
        at += nb
    n_slots = n_blocks * block_size
    pools = {}
    for name, kv_type in (("k", k_type), ("v", v_type)):
        pool = np.full((n_slots, rows_bytes(kv_type, row)), 0xFF, np.uint8)
        for s, length in enumerate(lengths):
            j = np.arange(length)
            slots = tables[s, j // block_size] * block_size + j % block_size
            x = rng.standard_normal((length, row)).astype(np.float32)
            x[:, 5] *= 8  # an outlier channel
            pool[slots] = native.testing.kv_quantize(kv_type, x)
        pools[name] = pool
    if rows is None:
        rows = [(0, p) for p in range(lengths[0])] + [(1, lengths[1] - 1)]
        rows += [(2, p) for p in range(lengths[2] - 6, lengths[2])] + [(3, lengths[3] - 1)]
    seq_index = np.array([s for s, _ in rows], np.int32)
    positions = np.array([p for _, p in rows], np.int32)
    q = (rng.standard_normal((len(rows), n_head, hd)) * 2).astype(np.float32)
    return q, pools["k"], pools["v"], positions, seq_index, tables


def reference_attention(
    q, k_type, k_pool, v_type, v_pool, positions, seq_index, tables, *, n_kv_head, block_size, scale, softcap, window
):
    """float64 causal GQA over the keys and values as the CPU dequantizes them; also the largest |value| read."""
    T, n_head, hd = q.shape
    group = n_head // n_kv_head
    K = native.testing.kv_dequantize(k_type, k_pool, n_kv_head * hd).reshape(-1, n_kv_head, hd).astype(np.float64)
    V = native.testing.kv_dequantize(v_type, v_pool, n_kv_head * hd).reshape(-1, n_kv_head, hd).astype(np.float64)
    out = np.zeros((T, n_head, hd))
    vmax = 0.0
    for t in range(T):
        p = int(positions[t])
        lo = max(0, p - window + 1) if window > 0 else 0
        j = np.arange(lo, p + 1)
        slots = tables[seq_index[t], j // block_size] * block_size + j % block_size
        for h in range(n_head):
            s = K[slots, h // group] @ q[t, h].astype(np.float64) * scale
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            w = np.exp(s - s.max())
            out[t, h] = w @ V[slots, h // group] / w.sum()
        vmax = max(vmax, float(np.abs(V[slots]).max()))
    return out, vmax


# the two kernels: row by row (kv.cu) and by tiles of consecutive rows (attention_tiles.cu)
KERNELS = ["rows", "tiles"]


def check_attention(
    n_head, n_kv_head, hd, k_type, v_type, seed, *, kernel="rows", block_size=16, softcap=0.0, window=0, **case
):
    """The kernel against the float64 softmax; the tiled one also against the per-row one (within 1e-5 of the
    values' magnitude: both sum in float32, in their own orders)."""
    rng = np.random.default_rng(seed)
    q, k_pool, v_pool, positions, seq_index, tables = attention_case(
        rng, n_head, n_kv_head, hd, k_type, v_type, block_size, **case
    )
    args = (q, k_type, k_pool, v_type, v_pool, positions, seq_index, tables)
    kw = dict(n_kv_head=n_kv_head, block_size=block_size, scale=float(hd**-0.5), softcap=softcap, window=window)
    per_row = native.testing.cuda_paged_attention(*args, **kw)
    got = native.testing.cuda_paged_attention_tiled(*args, **kw) if kernel == "tiles" else per_row
    want, vmax = reference_attention(*args, **kw)
    assert got.dtype == np.float32 and got.shape == q.shape
    assert np.all(np.isfinite(got)), "a read outside the sequences' blocks (NaN slots)"
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * vmax)
    np.testing.assert_allclose(got, per_row, rtol=1e-5, atol=1e-5 * vmax)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n_head,n_kv_head,head_dim", SHAPES)
@pytest.mark.parametrize(
    "k_type,v_type", [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "q4_0"), ("f16", "q8_0")]
)
@pytest.mark.parametrize("kernel", KERNELS)
def test_paged_attention_matches_the_float64_softmax(n_head, n_kv_head, head_dim, k_type, v_type, kernel):
    check_attention(n_head, n_kv_head, head_dim, k_type, v_type, seed=n_head * 100 + head_dim, kernel=kernel)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("k_type,v_type", [("f16", "f16"), ("q4_0", "q8_0")])
@pytest.mark.parametrize(
    "variant",
    [
        dict(window=8),  # windows start mid-block and cross block boundaries
        dict(window=1),  # each row sees only itself
        dict(softcap=2.0),  # scores of magnitude ~2 and more: the cap bends them
        dict(block_size=5),  # blocks that are not a power of two
        dict(block_size=5, window=7, softcap=3.0),
    ],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()),
)
@pytest.mark.parametrize("kernel", KERNELS)
def test_paged_attention_window_softcap_and_block_size(k_type, v_type, variant, kernel):
    check_attention(14, 2, 64, k_type, v_type, seed=7, kernel=kernel, **variant)
    check_attention(8, 2, 128, k_type, v_type, seed=8, kernel=kernel, **variant)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
def test_paged_attention_refuses_a_row_past_its_blocks(kernel):
    rng = np.random.default_rng(0)
    q, k_pool, v_pool, positions, seq_index, tables = attention_case(rng, 2, 1, 64, "f16", "f16")
    positions = positions.copy()
    positions[-1] = 40  # sequence 3 owns one block of 16 positions; its table's second entry is -1
    entry = native.testing.cuda_paged_attention_tiled if kernel == "tiles" else native.testing.cuda_paged_attention
    with pytest.raises(ValueError, match="block_tables"):
        entry(q, "f16", k_pool, "f16", v_pool, positions, seq_index, tables, n_kv_head=1, block_size=16, scale=0.125)


# ---- the tiled prefill kernel (cuda/attention_tiles.cu): tiles of up to 16 consecutive rows of one sequence ----


# a 300-token prompt (19 tiles, the last of 12 rows; 10 key chunks for its last tile); two sequences' prefill
# chunks after cached positions (tiles starting mid-block), with a decode row of a third between them
LONG = {
    "prompt": dict(lengths=(300,), rows=[(0, p) for p in range(300)]),
    "chunks": dict(
        lengths=(200, 150, 9), rows=[(0, p) for p in range(120, 200)] + [(2, 8)] + [(1, p) for p in range(41, 150)]
    ),
}


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("case", LONG)
@pytest.mark.parametrize("n_head,n_kv_head,head_dim", [(14, 2, 64), (4, 1, 256)])
@pytest.mark.parametrize("k_type,v_type", [("f16", "f16"), ("q4_0", "q8_0")])
@pytest.mark.parametrize(
    "variant",
    [dict(), dict(window=40), dict(window=5, softcap=3.0), dict(block_size=5, softcap=2.0)],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "plain",
)
def test_tiled_attention_long_prompts(case, n_head, n_kv_head, head_dim, k_type, v_type, variant):
    check_attention(n_head, n_kv_head, head_dim, k_type, v_type, seed=head_dim, kernel="tiles", **LONG[case], **variant)


# runs of 15, 16, 17 and 33 rows (a tile ends at 16 rows and at a run's end); one sequence's prefill broken by
# another's decode row (the run goes on after it: a new tile); a run whose positions jump (10 -> 13: a new tile)
BOUNDARY_ROWS = (
    [(0, p) for p in range(15)]
    + [(1, p) for p in range(16)]
    + [(2, p) for p in range(17)]
    + [(3, p) for p in range(33)]
    + [(4, p) for p in range(20)]
    + [(5, 49)]
    + [(4, p) for p in range(20, 40)]
    + [(6, p) for p in range(10)]
    + [(6, p) for p in range(13, 30)]
)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n_head,n_kv_head,head_dim", [(14, 2, 64), (6, 3, 96)])
@pytest.mark.parametrize(
    "variant",
    [dict(), dict(window=7), dict(block_size=5, window=20, softcap=3.0)],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "plain",
)
def test_tiled_attention_tile_boundaries(n_head, n_kv_head, head_dim, variant):
    lengths = (15, 16, 17, 33, 40, 50, 30)
    check_attention(
        n_head,
        n_kv_head,
        head_dim,
        "q8_0",
        "q4_0",
        seed=head_dim,
        kernel="tiles",
        lengths=lengths,
        rows=BOUNDARY_ROWS,
        **variant,
    )


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("window", [0, 4])
def test_tiled_attention_keys_a_row_does_not_see_add_nothing(window):
    """A tile loads keys some of its rows do not see (its later positions; with a window, keys before a later
    row's window), which the per-row kernel never reads: their weight must add nothing, not 0 * V. Position 20's V
    is +inf (f16 0x7c00); the rows that do not see it (p < 20, and p >= 20 + window) stay finite and equal the
    per-row kernel's and the float64 softmax's."""
    rng = np.random.default_rng(3)
    n_head, n_kv_head, hd, bs, length = 4, 2, 64, 16, 48
    q, k_pool, v_pool, positions, seq_index, tables = attention_case(
        rng, n_head, n_kv_head, hd, "f16", "f16", bs, lengths=(length,), rows=[(0, p) for p in range(length)]
    )
    v_pool = v_pool.copy()
    v_pool[tables[0, 20 // bs] * bs + 20 % bs] = np.frombuffer(np.full(n_kv_head * hd, 0x7C00, np.uint16), np.uint8)
    kw = dict(n_kv_head=n_kv_head, block_size=bs, scale=float(hd**-0.5), softcap=0.0, window=window)
    args = (q, "f16", k_pool, "f16", v_pool, positions, seq_index, tables)
    got = native.testing.cuda_paged_attention_tiled(*args, **kw)
    per_row = native.testing.cuda_paged_attention(*args, **kw)
    blind = (positions < 20) | ((positions >= 20 + window) if window else False)
    assert blind.sum() == (20 if not window else 20 + length - 24)
    sub = (q[blind], "f16", k_pool, "f16", v_pool, positions[blind], seq_index[blind], tables)
    want, vmax = reference_attention(*sub, **kw)
    assert np.all(np.isfinite(got[blind])), "a key the row does not see reached its output"
    np.testing.assert_allclose(got[blind], want, rtol=1e-4, atol=1e-4 * vmax)
    np.testing.assert_allclose(got[blind], per_row[blind], rtol=1e-5, atol=1e-5 * vmax)


# ---- chunks (device_ops.cuh): a row's keys summed by chunks of 128 positions, merged in order; a decode-sized step
# gives each chunk a thread block of its own (split) and the row's last block merges them: the same bits ----

# decode rows over long contexts (6 chunks, a chunk's last and first positions, exactly one chunk), a row that sees
# one key, and prefill rows of a chunk that starts mid-prompt
SPLIT_ROWS = [(0, 699), (1, 299), (2, 128), (3, 4), (4, 127), (0, 255), (0, 256), (1, 0), (0, 383), (0, 384)]
SPLIT_LENGTHS = (700, 300, 129, 5, 128)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("n_head,n_kv_head,head_dim", [(14, 2, 64), (4, 1, 256)])
@pytest.mark.parametrize("k_type,v_type", [("f16", "f16"), ("q4_0", "q8_0")])
@pytest.mark.parametrize(
    "variant",
    [dict(), dict(window=200), dict(window=129, softcap=3.0), dict(block_size=5)],
    ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "plain",
)
def test_split_attention_gives_the_per_row_kernels_bits(n_head, n_kv_head, head_dim, k_type, v_type, variant):
    """Split and not, the same bits; both the float64 softmax's within float32 rounding; each row's bits alone
    the same as beside the others (what the engine's batch invariance asks of the attention)."""
    rng = np.random.default_rng(head_dim + len(variant))
    block_size = variant.get("block_size", 16)
    q, k_pool, v_pool, positions, seq_index, tables = attention_case(
        rng, n_head, n_kv_head, head_dim, k_type, v_type, block_size, lengths=SPLIT_LENGTHS, rows=SPLIT_ROWS
    )
    kw = dict(
        n_kv_head=n_kv_head,
        block_size=block_size,
        scale=float(head_dim**-0.5),
        softcap=variant.get("softcap", 0.0),
        window=variant.get("window", 0),
    )
    pools = (k_type, k_pool, v_type, v_pool)
    attend = native.testing.cuda_paged_attention
    per_row = attend(q, *pools, positions, seq_index, tables, **kw)
    split = attend(q, *pools, positions, seq_index, tables, split=True, **kw)
    np.testing.assert_array_equal(split, per_row)
    want, vmax = reference_attention(q, *pools, positions, seq_index, tables, **kw)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-4 * vmax)
    for i in (0, 1, 5):
        for how in (False, True):
            one = attend(q[i : i + 1], *pools, positions[i : i + 1], seq_index[i : i + 1], tables, split=how, **kw)
            np.testing.assert_array_equal(one[0], split[i], err_msg=f"row {i} alone, split={how}")


# ---- without a device ----


def test_entry_points_check_their_arguments():
    t = native.testing
    x = np.ones((2, 64), np.float32)
    with pytest.raises(ValueError, match="kv_type"):
        t.cuda_kv_write("q5_0", x, 64, np.arange(2, dtype=np.int32), np.zeros((4, 128), np.uint8))
    with pytest.raises(ValueError, match="head_dim"):
        t.cuda_kv_write(
            "q8_0", np.ones((2, 96), np.float32), 48, np.arange(2, dtype=np.int32), np.zeros((4, 102), np.uint8)
        )
    with pytest.raises(ValueError, match="pool"):
        t.cuda_kv_write("q8_0", x, 64, np.arange(2, dtype=np.int32), np.zeros((4, 64), np.uint8))
    q = np.ones((1, 2, 64), np.float32)
    with pytest.raises(ValueError, match="k and v"):
        t.cuda_kv_transforms(
            q, np.ones((1, 1, 32), np.float32), q, rotate_k=True, rotate_v=False, center_k=False, center_v=False
        )
    one, table = np.zeros(1, np.int32), np.zeros((1, 1), np.int32)
    k_pool, v_pool = np.zeros((16, 128), np.uint8), np.zeros((16, 68), np.uint8)  # q8_0 rows of 64: 68 bytes
    for attention in (t.cuda_paged_attention, t.cuda_paged_attention_tiled):
        with pytest.raises(ValueError, match="k_pool"):
            attention(q, "q8_0", k_pool, "q8_0", v_pool, one, one, table, n_kv_head=1, block_size=16, scale=1)


@no_gpu
def test_entry_points_fail_cleanly_without_a_device():
    t = native.testing
    x = np.ones((1, 64), np.float32)
    pool = np.zeros((16, 128), np.uint8)  # 16 slots of one f16 head of 64
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        t.cuda_kv_write("f16", x, 64, np.zeros(1, np.int32), pool)
    q, k = np.ones((1, 2, 64), np.float32), np.ones((1, 1, 64), np.float32)
    with pytest.raises(RuntimeError, match="CUDA|not compiled"):
        t.cuda_kv_transforms(q, k, k, rotate_k=True, rotate_v=True, center_k=False, center_v=False)
    one, table = np.zeros(1, np.int32), np.zeros((1, 1), np.int32)
    for attention in (t.cuda_paged_attention, t.cuda_paged_attention_tiled):
        with pytest.raises(RuntimeError, match="CUDA|not compiled"):
            attention(q, "f16", pool, "f16", pool, one, one, table, n_kv_head=1, block_size=16, scale=0.125)
