"""The summation order both CUDA int8 products keep (native/cuda/qstep.cuh): a chunk's 32 terms combined by a
warp's xor-shuffle tree at offsets 1, 2, 4, 8, 16 (qgemv_kernel.cuh, lane l holding term l) equal, bit for bit, the
same terms taken one at a time in step order with a stack of partial sums (mmq_kernel.cuh's tree_push, five
registers per output). Float32 addition is commutative but not associative, so only that pairing agrees: the tree
at offsets 16, 8, ..., 1 (the decode kernel's reduction before) does not (checked too, so the test can tell).
tests/native/test_cuda_emulated.py checks the kernels themselves."""

from __future__ import annotations

import numpy as np

F = np.float32


def butterfly(t: np.ndarray, offsets: tuple[int, ...]) -> np.ndarray:
    """Every lane's value after v += shfl_xor(v, o) for each offset (lane l starts with t[l]), in float32."""
    v = t.astype(F).copy()
    for o in offsets:
        v = (v + v[np.arange(32) ^ o]).astype(F)
    return v


def stack_sum(t: np.ndarray) -> F:
    """The terms in step order, as tree_push takes them: slot l holds a sum of 2^l terms while bit l of the count so
    far is set; a new term merges with the slots below its first clear bit (the older sum first)."""
    slots: list[F | None] = [None] * 5
    for i, term in enumerate(t):
        v = F(term)
        for lvl in range(5):
            if not (i >> lvl) & 1:
                slots[lvl] = v
                break
            v = F(slots[lvl] + v)
        else:
            slots[0] = v
    return slots[0]


def test_step_order_stack_is_the_xor_tree():
    rng = np.random.default_rng(0)
    other_tree_differs = 0
    for trial in range(2000):
        # terms of mixed sizes and signs (the partial products of a row's steps), some exactly cancelling, some zero
        # (a short last chunk's missing steps)
        t = (rng.standard_normal(32) * np.exp(rng.uniform(-8, 8, 32))).astype(F)
        if trial % 7 == 0:
            t[1:16:2] = -t[0:16:2]  # pairs the tree's first level cancels exactly
        if trial % 5 == 0:
            t[rng.integers(1, 32) :] = 0.0
        lanes = butterfly(t, (1, 2, 4, 8, 16))
        assert np.all(lanes.view(np.uint32) == lanes[0].view(np.uint32)), "the lanes disagree"
        got = stack_sum(t)
        assert got.view(np.uint32) == lanes[0].view(np.uint32), f"trial {trial}: {got!r} != {lanes[0]!r}"
        other = butterfly(t, (16, 8, 4, 2, 1))[0]
        other_tree_differs += other.view(np.uint32) != lanes[0].view(np.uint32)
    assert other_tree_differs > 100  # the property is the order's, not float32 addition's
