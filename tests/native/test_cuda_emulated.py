"""The CUDA backend's int8 products run on the CPU: the source of native/cuda/qgemv_kernel.cuh (the decode kernel)
and mmq_kernel.cuh (the tensor-core tile kernel) compiled for the host and run by the warp emulator
(native/warp_emulator.h: a fiber per thread, barriers, shuffles and mma fragments as the PTX ISA lays them out).
So kernels no card has run yet still run in every build: against the float64 product of gguf's dequantized
weights, and against each other bit for bit, which is what lets the device choose either at any step size without
a row's bits depending on the step (the batch-invariance contract, kernels.h). tests/native/test_cuda.py checks on
a card that the device computes the emulator's bits."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize as ref_dequantize
from localllm import native
from quant_blocks import random_rows

U = 2.0**-23
GPU_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K]
KERNELS = ["qgemv", "mmq"]


def product(qt, rows, k, x, kernel, **kw):
    return native.testing.cuda_emulated_product(int(qt), rows, k, x, kernel, **kw)


def activations(rng, n, k):
    x = rng.standard_normal((n, k), dtype=np.float32) * np.exp(rng.standard_normal(k)).astype(np.float32)
    x[min(3, n - 1), :] = 0.0  # an all-zero row
    x[n // 2, 64:96] *= 3000.0  # a massive activation block
    return x


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("qt", GPU_TYPES, ids=lambda t: t.name)
def test_emulated_products_match_the_float64_product(qt, kernel):
    rng = np.random.default_rng(int(qt) * 10 + len(kernel))
    # 40 and 48 steps: a whole chunk of 32 and a short one; 70 rows: a whole tile of 64 and a partial one
    k = 1536 if qt in (T.Q4_K, T.Q6_K) else 1280
    m = 70
    rows = random_rows(qt, m, k, rng)
    w64 = ref_dequantize(rows, qt).reshape(m, k).astype(np.float64)
    for n in (1, 9, 70):
        x = activations(rng, n, k)
        y = product(qt, rows, k, x, kernel)
        x64 = x.astype(np.float64)
        dx = np.abs(x64).reshape(n, -1, 32).max(axis=2) / 127
        act_err = np.repeat(dx, 32, axis=1) / 2 + 8 * U * np.abs(x64)  # int8 rounding per 32, as on the CPU
        bound = act_err @ np.abs(w64).T + (k / 16 + 16) * U * ((np.abs(x64) + act_err) @ np.abs(w64).T)
        err = np.abs(y - x64 @ w64.T)
        assert np.all(err <= bound), f"{qt.name} {kernel} n={n}: max excess {np.max(err - bound)}"


@pytest.mark.parametrize("qt", GPU_TYPES, ids=lambda t: t.name)
def test_mmq_gives_the_decode_kernels_bits_at_every_n(qt):
    """Each output of either kernel, among any rows at any step size, is the decode kernel's bits for that row
    alone: 80 steps (two chunks of 32 and a short one), 70 weight rows (a tile and a part), steps of 1 to 140 rows
    (8-row and 32-row decode blocks, full and partial, 1 to 3 tiles of 64)."""
    rng = np.random.default_rng(900 + int(qt))
    m, k = 70, 2560
    rows = random_rows(qt, m, k, rng)
    x = activations(rng, 140, k)
    alone = {c: product(qt, rows, k, x[c : c + 1], "qgemv")[0] for c in (0, 3, 8, 40, 70, 100, 139)}
    # qgemv's blocks of 2 to 8 rows and of 9 to 32 meet their rows' chunk sums 8 at a time (chunk_sums), a block of
    # one row alone
    cases = [("qgemv", 0, 2), ("qgemv", 2, 7), ("qgemv", 39, 2), ("qgemv", 136, 4), ("qgemv", 0, 9), ("qgemv", 3, 40)]
    # blocks of several rows share the activations' int8 sums (qgemv_kernel.cuh); LOCALLLM_CUDA_XSUM=0's kernel
    # finds them in each warp: the same bits
    cases += [("qgemv-own-sums", 2, 7), ("qgemv-own-sums", 3, 40)]
    for kernel, start, n in cases + [("mmq", 0, 1), ("mmq", 3, 5), ("mmq", 0, 140)]:
        y = product(qt, rows, k, x[start : start + n], kernel)
        bad = [c for c in alone if start <= c < start + n and np.any(y[c - start] != alone[c])]
        assert not bad, f"{qt.name} {kernel}: N={n} from row {start}: rows {bad} differ from the row alone"


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_bias_and_the_residual_are_added_as_the_separate_kernels_add_them(kernel):
    """qgemv's store adds the bias, then the result to y (the residual stream's h += a), one float32 addition each:
    the bits of add_bias and add run apart."""
    rng = np.random.default_rng(5)
    qt, m, k, n = T.Q8_0, 70, 512, 70
    rows = random_rows(qt, m, k, rng)
    x = activations(rng, n, k)
    bias = rng.standard_normal(m).astype(np.float32)
    h = rng.standard_normal((n, m)).astype(np.float32)
    plain = product(qt, rows, k, x, kernel)
    both = product(qt, rows, k, x, kernel, bias=bias, y_in=h)
    assert np.array_equal(both, h + (plain + bias))
    assert np.array_equal(product(qt, rows, k, x, kernel, bias=bias), plain + bias)


def test_the_emulated_product_refuses_what_the_device_does_not_take():
    rows = random_rows(T.Q5_K, 4, 256, np.random.default_rng(0))
    with pytest.raises(ValueError, match="int8 products take"):
        product(T.Q5_K, rows, 256, np.ones((1, 256), np.float32), "qgemv")
    rows = random_rows(T.Q8_0, 4, 64, np.random.default_rng(0))
    with pytest.raises(ValueError, match="kernel must be"):
        product(T.Q8_0, rows, 64, np.ones((1, 64), np.float32), "wmma")


def then(qt, rows, k, x, **kw):
    return native.testing.cuda_emulated_then(int(qt), rows, k, x, **kw)


def quantized(v):
    """quantize_x's per-32 quantization of float32 values (kernels.h), in float32 as the device computes it."""
    b = v.reshape(v.shape[0], -1, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(b * inv).astype(np.int8).reshape(v.shape)
    return q, (amax / np.float32(127.0)).astype(np.float32)[:, :, 0]


@pytest.mark.parametrize("silu", [True, False], ids=["silu", "gelu"])
@pytest.mark.parametrize("qt", [T.Q4_0, T.Q6_K], ids=lambda t: t.name)
def test_the_gated_activation_in_the_decode_kernels_tail(qt, silu):
    """Gate and up in one launch, then the last block to finish each 32 outputs of its rows quantizes act(gate) * up
    for the down product (act_mul_quantize's work): the products are the plain product's bits, the quantization is
    the float32 activation's (to the last place of the library's exp or tanh), and it does not depend on the rows
    beside it (steps of 1 to 40 rows: one or two blocks of rows, 3 pieces of 32 outputs)."""
    rng = np.random.default_rng(77 + int(qt))
    m, k = 96, 512
    gate, up = random_rows(qt, m, k, rng), random_rows(qt, m, k, rng)
    x = activations(rng, 40, k)
    alone = [then(qt, gate, k, x[c : c + 1], up=up, silu=silu) for c in range(40)]
    for n in (1, 5, 9, 40):
        g, u, none, xq, xd = then(qt, gate, k, x[:n], up=up, silu=silu)
        assert none is None
        assert np.array_equal(g, product(qt, gate, k, x[:n], "qgemv"))
        assert np.array_equal(u, product(qt, up, k, x[:n], "qgemv"))
        for c in range(n):
            assert np.array_equal(xq[c], alone[c][3][0]) and np.array_equal(xd[c], alone[c][4][0]), f"n={n} row {c}"
        g64, u64 = g.astype(np.float64), u.astype(np.float64)
        if silu:
            act = g64 * (0.5 + 0.5 * np.tanh(g64 / 2)) * u64
        else:
            act = 0.5 * g64 * (1 + np.tanh(0.7978845608028654 * (g64 + 0.044715 * g64**3))) * u64
        q_ref, d_ref = quantized(act.astype(np.float32))
        np.testing.assert_allclose(xd, d_ref, rtol=1e-5)
        assert np.abs(xq.astype(int) - q_ref).max() <= 1 and np.mean(xq != q_ref) < 0.01, f"n={n}"


@pytest.mark.parametrize("qt", [T.Q8_0, T.Q4_K], ids=lambda t: t.name)
def test_the_norm_in_the_residual_products_tail(qt):
    """h += x . W^T, then the last block of the launch normalizes h's rows (RMSNorm, squares summed in double) and
    quantizes them for the next products: h is the residual product's bits, the norm the float64 RMSNorm's to float32
    rounding, its quantization exactly that of the normed values, and each row's bits the row's alone."""
    rng = np.random.default_rng(31 + int(qt))
    m, k = 320, 512  # 320 outputs: a norm of more values than the block's 128 threads, and 80 blocks to count
    rows = random_rows(qt, m, k, rng)
    x = activations(rng, 40, k)
    h = rng.standard_normal((40, m)).astype(np.float32)
    w = (1 + rng.standard_normal(m) / 4).astype(np.float32)
    alone = [then(qt, rows, k, x[c : c + 1], norm=w, eps=1e-6, y_in=h[c : c + 1]) for c in range(40)]
    for n in (1, 2, 9, 40):
        y, none, out, xq, xd = then(qt, rows, k, x[:n], norm=w, eps=1e-6, y_in=h[:n])
        assert none is None
        assert np.array_equal(y, product(qt, rows, k, x[:n], "qgemv", y_in=h[:n]))
        y64 = y.astype(np.float64)
        ref = y64 / np.sqrt(np.mean(y64**2, axis=1, keepdims=True) + 1e-6) * w
        np.testing.assert_allclose(out, ref, rtol=4 * U, atol=1e-30)
        q_ref, d_ref = quantized(out)
        assert np.array_equal(xq, q_ref) and np.array_equal(xd, d_ref), f"n={n}"
        for c in range(n):
            assert np.array_equal(out[c], alone[c][2][0]) and np.array_equal(xq[c], alone[c][3][0]), f"n={n} row {c}"


@pytest.mark.parametrize("tail", ["act", "norm"])
def test_the_tails_give_the_same_bits_whichever_block_ends_last(tail, reversed_order):
    """The tails run in the block that finds itself last on its piece's counter: with blocks run in reverse, another
    block is last, and every output (products, the activation or norm, its quantization) has the same bits."""
    rng = np.random.default_rng(9)
    m, k, n = 320, 256, 9
    rows, up = random_rows(T.Q4_0, m, k, rng), random_rows(T.Q4_0, m, k, rng)
    x = activations(rng, n, k)
    kw = (
        {"up": up}
        if tail == "act"
        else {
            "norm": (1 + rng.standard_normal(m) / 4).astype(np.float32),
            "y_in": rng.standard_normal((n, m)).astype(np.float32),
        }
    )
    reverse = then(T.Q4_0, rows, k, x, **kw)
    native.testing.emulator_reverse(False)
    forward = then(T.Q4_0, rows, k, x, **kw)
    for a, b in zip(reverse, forward):
        assert (a is None and b is None) or np.array_equal(a, b)


def test_a_follow_up_is_refused_where_it_cannot_run():
    rows = random_rows(T.Q8_0, 48, 64, np.random.default_rng(0))
    x = np.ones((1, 64), np.float32)
    with pytest.raises(ValueError, match="multiple of 32"):
        then(T.Q8_0, rows, 64, x, norm=np.ones(48, np.float32))
    with pytest.raises(ValueError, match="one of them"):
        then(T.Q8_0, rows[:32], 64, x)


def test_the_emulator_runs_barriers_as_a_card_does():
    """Two warps of 32 threads: a value passed through shared memory across barriers arrives, and a warp that
    returned before a barrier does not hold up the other (PTX's exit releases it)."""
    # round 1: cell[t] = 64 - t, round 2: cell[t] = t + 2 -> sum over t < 64
    assert native.testing.emulated_barrier_case("aligned") == sum(t + 2 for t in range(64))
    assert native.testing.emulated_barrier_case("early-exit") == 32


@pytest.fixture
def reversed_order():
    """The emulator runs blocks, and each block's threads, in reverse order for the test (forward after)."""
    was = native.testing.emulator_reverse(True)
    yield
    native.testing.emulator_reverse(was)


def test_a_race_shows_as_a_difference_between_the_orders(reversed_order):
    """A read of what another thread writes between the same two barriers depends on which thread runs first: the
    reverse order is how the tests see it (a card promises neither order)."""
    reverse = native.testing.emulated_barrier_case("racy")  # thread t reads t + 1's cell after t + 1 wrote it
    native.testing.emulator_reverse(False)
    forward = native.testing.emulated_barrier_case("racy")  # before: the -1 every cell starts with
    assert (forward, reverse) == (-63, sum(range(1, 64)) - 1)


def test_a_bad_emulator_order_is_refused_naming_it():
    """LOCALLLM_EMULATOR_ORDER is read at the first launch (a fresh process here): a value other than forward or
    reverse is an error there that names it, not a silent forward run."""
    code = "from localllm import native; native.testing.emulated_barrier_case('aligned')"
    env = {**os.environ, "LOCALLLM_EMULATOR_ORDER": "sideways"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "LOCALLLM_EMULATOR_ORDER must be forward or reverse, got 'sideways'" in r.stderr
    env["LOCALLLM_EMULATOR_ORDER"] = "reverse"
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == 0


@pytest.mark.parametrize("kernel", KERNELS + ["qgemv-own-sums"])
@pytest.mark.parametrize("qt", [T.Q4_K, T.Q8_0], ids=lambda t: t.name)
def test_the_products_give_the_same_bits_in_either_order(qt, kernel, reversed_order):
    """The decode and tile kernels share activation sums through shared memory and write through counters: with
    blocks and threads run in reverse, the same bits as forward (a race or an order-dependent "last block" would
    differ)."""
    rng = np.random.default_rng(5)
    k, m, n = 512, 96, 11
    rows = random_rows(qt, m, k, rng)
    x = activations(rng, n, k)
    reverse = product(qt, rows, k, x, kernel)
    native.testing.emulator_reverse(False)
    assert np.array_equal(reverse, product(qt, rows, k, x, kernel))


@pytest.mark.parametrize(
    "case,match",
    [
        # __syncthreads is barrier.sync.aligned: one instruction for every thread of the block
        ("divergent", r"met __syncthreads at different places \(.*emulated_products\.cpp:\d+ and .*:\d+\)"),
        ("deadlock", "deadlock"),
        ("exit-in-collective", "exited while its warp's lanes wait in a collective"),
    ],
)
def test_the_emulator_refuses_what_a_card_leaves_undefined(case, match):
    """What would hang a card or leave its result undefined is an error naming it, not a kernel that happens to
    pass here: the emulator runs every kernel of the tests under these rules."""
    with pytest.raises(RuntimeError, match=match):
        native.testing.emulated_barrier_case(case)
    with pytest.raises(ValueError, match="unknown case 'nope'"):
        native.testing.emulated_barrier_case("nope")
