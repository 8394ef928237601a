"""The summation order docs/cuda.md sets out for an int8 tensor-core product that keeps qgemv's bits: a chunk's 32
terms combined by a warp's xor-shuffle tree (offsets 16, 8, 4, 2, 1) equal, bit for bit, the same terms taken one
at a time in bit-reversed order with a stack of partial sums (what a tile kernel, which sees one step at a time,
can do with five registers per output). Float32 addition is commutative but not associative, so only that order
agrees; the natural order does not (checked too, so the test can tell)."""

from __future__ import annotations

import numpy as np

F = np.float32


def butterfly(t: np.ndarray) -> np.ndarray:
    """Every lane's value after v += shfl_xor(v, o) for o = 16, 8, 4, 2, 1 (lane l starts with t[l]), in float32."""
    v = t.astype(F).copy()
    for o in (16, 8, 4, 2, 1):
        v = (v + v[np.arange(32) ^ o]).astype(F)
    return v


def bit_reversed(j: int) -> int:
    return int(f"{j:05b}"[::-1], 2)


def stack_sum(t: np.ndarray, order: list[int]) -> F:
    """The terms in `order`, one at a time: push, then while the top two sums cover equal spans, add them (the older
    first)."""
    stack: list[tuple[F, int]] = []
    for s in order:
        stack.append((F(t[s]), 1))
        while len(stack) > 1 and stack[-1][1] == stack[-2][1]:
            (b, n), (a, _) = stack.pop(), stack.pop()
            stack.append((F(a + b), 2 * n))
    assert len(stack) == 1
    return stack[0][0]


def test_bit_reversed_stack_order_is_the_xor_tree():
    rng = np.random.default_rng(0)
    natural_differs = 0
    for trial in range(2000):
        # terms of mixed sizes and signs (the partial products of a row's steps), some exactly cancelling
        t = (rng.standard_normal(32) * np.exp(rng.uniform(-8, 8, 32))).astype(F)
        if trial % 7 == 0:
            t[16:24] = -t[:8]  # pairs the tree's first level cancels exactly
        lanes = butterfly(t)
        assert np.all(lanes.view(np.uint32) == lanes[0].view(np.uint32)), "the lanes disagree"
        got = stack_sum(t, [bit_reversed(j) for j in range(32)])
        assert got.view(np.uint32) == lanes[0].view(np.uint32), f"trial {trial}: {got!r} != {lanes[0]!r}"
        natural_differs += stack_sum(t, list(range(32))).view(np.uint32) != lanes[0].view(np.uint32)
    assert natural_differs > 100  # the property is the order's, not float32 addition's
