"""Batch invariance (issue 18): a row's result is bit-identical whatever else is in the product or the step.

Every kernel of a path follows one reduction order per output (native/kernels.h, "the canonical reduction"):
activations per 32, one exact int32 sum per weight group, one float step per group in k order. So the
small-N kernels and the tile path agree bit for bit, and neither the number of activation rows, nor the
chunking of a prompt, nor the thread count changes a row. Checked per type and CPU path on synthetic
matrices, then on real models (one step = chunked = token by token through the KV cache).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_file
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from localllm import native
from localllm.llm import LLM
from quant_blocks import TYPES, random_rows

PATHS = native.known_paths()
N_LIST = list(range(1, 18)) + [64, 512]
# activation rows whose products are also computed alone (N = 1) and compared
ALONE = list(range(17)) + [40, 63, 300, 511]


@pytest.fixture(params=PATHS)
def path(request):
    if request.param not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    yield request.param
    native.configure()


@pytest.fixture
def restore_path():
    yield
    native.configure()


def activations(k: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal((512, k), dtype=np.float32)
    x[3, :] = 0.0  # an all-zero row (dx = 0)
    x[5, :40] *= 1000.0  # outliers in one block
    x[9, 64:96] *= 3000.0  # a massive activation block, as Qwen's position 0 carries
    return x


@pytest.mark.parametrize("qt", TYPES, ids=lambda t: t.name)
def test_row_results_do_not_depend_on_n_or_threads(qt, path):
    """y[c] computed among N rows (N = 1..17, 64, 512) equals y[c] computed alone, with 1 and 2 threads, for
    m = 37 weight rows (two whole 16-row tiles and a part, whose last 8-row block is partial too; floats also 45)."""
    rng = np.random.default_rng(500 + int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    # float types also k = 7 and 901 (the small-N float kernel, N <= 2, takes a row's last k % 8 weights one at a
    # time) and m = 45 (a last tile of 13 rows: its second 8-row half partly filled)
    for k, m in (
        [(7, 45), (896, 37), (901, 45), (4864, 37)]
        if bs == 1
        else [(k, 37) for k in ([896, 4864] if bs < 256 else [4864])]
    ):
        rows = random_rows(qt, m, k, rng)
        x = activations(k, rng)
        native.configure(path=path, threads=1)
        alone = {c: native.matmul_raw(int(qt), rows, k, x[c : c + 1])[0] for c in ALONE}
        for threads in (1, 2):
            native.configure(path=path, threads=threads)
            for n in N_LIST:
                y = native.matmul_raw(int(qt), rows, k, x[:n])
                for c in (c for c in ALONE if c < n):
                    assert np.array_equal(y[c], alone[c]), f"{qt.name} k={k} threads={threads}: row {c} of N={n}"
            # the rows alone again, on this thread count
            for c in (0, 5, 9):
                assert np.array_equal(native.matmul_raw(int(qt), rows, k, x[c : c + 1])[0], alone[c])


def test_products_sharing_an_input_do_not_depend_on_n(path):
    """q/k/v and gate/up run as one call (matmul_multi): a row's results there do not depend on N either."""
    native.configure(path=path, threads=2)
    rng = np.random.default_rng(77)
    k = 896
    mix = [(T.Q5_0, 37), (T.Q8_0, 19), (T.Q4_1, 24), (T.F16, 5), (T.Q4_0, 9)]
    products = [(int(qt), random_rows(qt, m, k, rng)) for qt, m in mix]
    x = activations(k, rng)
    alone = [native.testing.matmul_multi(products, k, x[c : c + 1]) for c in range(9)]
    for n in (2, 3, 4, 5, 8, 9, 16):
        got = native.testing.matmul_multi(products, k, x[:n])
        for c in range(min(n, 9)):
            for j, y in enumerate(got):
                assert np.array_equal(y[c], alone[c][j][0]), f"product {j}: row {c} of N={n}"


@pytest.mark.parametrize("qt", TYPES, ids=lambda t: t.name)
def test_avx512s8_gives_the_avx2_bits(qt):
    """avx512s8 runs the avx2 order (native/kernels.h) with an AVX-512 tile kernel: every product at every N is the
    avx2 path's bits, the small-N kernels (AVX2's, on vpdpbusd) and the tile path (another kernel) alike; rows shorter
    than a chunk's 8 groups included (k = 96: the sets they leave empty)."""
    if "avx512s8" not in native.available_paths():
        pytest.skip("this CPU cannot run the avx512s8 path")
    rng = np.random.default_rng(900 + int(qt))
    bs = GGML_QUANT_SIZES[qt][0]
    try:
        for k in [96, 896, 4864] if bs < 256 else [256, 4864]:
            rows = random_rows(qt, 37, k, rng)
            x = activations(k, rng)
            for n in (1, 2, 3, 4, 7, 8, 9, 17, 64, 512):  # the small-N kernels' column groups of 1..4, then tiles
                native.configure(path="avx2", threads=2)
                want = native.matmul_raw(int(qt), rows, k, x[:n])
                native.configure(path="avx512s8", threads=2)
                got = native.matmul_raw(int(qt), rows, k, x[:n])
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), f"{qt.name} k={k} N={n}"
    finally:
        native.configure()


# ---- real models --------------------------------------------------------------------------------------

TEXT = (
    "The quick brown fox jumps over the lazy dog because it was very tired of running around the old farm all day long."
)


# the 0.5B on the scalar path would take 30 s (its 151936-row output product); the scalar table has one kernel
# for every N, which smollm2 covers
CASES = [(p, n) for p in PATHS for n in ("smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m")]
CASES.remove(("scalar", "qwen2.5-coder-0.5b-instruct-q4_k_m"))


@pytest.mark.model
@pytest.mark.parametrize(("cpu", "name"), CASES)
def test_prompt_logits_alike_in_one_step_chunked_and_token_by_token(cpu, name, restore_path):
    if cpu not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {cpu} path")
    native.configure(cpu)
    with LLM(model_file(name), n_threads=2, ctx_size=64) as llm:
        ids = np.array(llm.tokenize(TEXT, add_special=False)[:20], dtype=np.int32)
        n = len(ids)
        assert n == 20

        def steps(seq):
            whole = seq.step(ids, 0, np.arange(n, dtype=np.int32))
            chunked = np.concatenate(
                [
                    seq.step(ids[:5], 0, np.arange(5, dtype=np.int32)),
                    seq.step(ids[5:], 5, np.arange(n - 5, dtype=np.int32)),
                ]
            )
            assert np.array_equal(chunked, whole), f"5 + {n - 5}: max |diff| {np.abs(chunked - whole).max()}"
            chunked = np.concatenate(
                [seq.step(ids[i : i + 3], i, np.arange(len(ids[i : i + 3]), dtype=np.int32)) for i in range(0, n, 3)]
            )
            assert np.array_equal(chunked, whole), f"3 at a time: max |diff| {np.abs(chunked - whole).max()}"
            decode = np.concatenate([seq.step(ids[i : i + 1], i, np.zeros(1, dtype=np.int32)) for i in range(n)])
            return whole, decode

        whole, decode = llm.exclusive(steps)
        assert np.array_equal(decode, whole), f"token by token: max |diff| {np.abs(decode - whole).max()}"


@pytest.mark.model
def test_qwen_1_5b_massive_activation_position_keeps_its_top1_at_every_n(path):
    """qwen2.5-coder-1.5b, "import" (token 474) at position 0: that position carries activations in the
    thousands, which per-256 activation blocks flattened (top-1 15 at N <= 8 on AVX2 before, 16 from 9 on;
    float64 says 16 at 10.62, 13 at 9.92). Row 0 is now the same bits at every N, and its top-1 is 16 on every
    path (the scalar path's, which the float64 forward agrees with; that forward takes about a minute here)."""
    native.configure(path)
    with LLM(model_file("qwen2.5-coder-1.5b-instruct-q4_k_m"), n_threads=2, ctx_size=64) as llm:
        ids = np.array(llm.tokenize("import the rest of the sentence from the old document", add_special=False))
        assert ids[0] == 474
        counts = [1, 2, 4, 5, 9] if path != "scalar" else [1]
        rows = llm.exclusive(lambda seq: [seq.step(ids[:n], 0, np.zeros(1, dtype=np.int32))[0] for n in counts])
        for n, r in zip(counts, rows):
            assert np.array_equal(r, rows[0]), f"row 0 with {n} tokens in the step differs from 1 token"
        assert int(np.argmax(rows[0])) == 16


@pytest.mark.model
@pytest.mark.parametrize("name", ["smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m"])
def test_avx512s8_logits_are_the_avx2_logits(name, restore_path):
    """A model on avx512s8 (its weights repacked for AVX2's kernels, a prompt through the AVX-512 tile kernel, then
    tokens through AVX2's) gives the avx2 path's logits bit for bit."""
    if "avx512s8" not in native.available_paths():
        pytest.skip("this CPU cannot run the avx512s8 path")

    def steps(seq, ids):  # a prompt of 16 (the tile path), then 4 tokens one by one (the small-N kernels)
        prompt = seq.step(ids[:16], 0, np.arange(16, dtype=np.int32))
        return np.concatenate(
            [prompt, *[seq.step(ids[i : i + 1], i, np.zeros(1, dtype=np.int32)) for i in range(16, 20)]]
        )

    out = {}
    for cpu in ("avx2", "avx512s8"):
        native.configure(cpu)
        with LLM(model_file(name), n_threads=2, ctx_size=64) as llm:
            ids = np.array(llm.tokenize(TEXT, add_special=False)[:20], dtype=np.int32)
            out[cpu] = llm.exclusive(lambda seq, ids=ids: steps(seq, ids))
    assert np.array_equal(out["avx512s8"].view(np.uint32), out["avx2"].view(np.uint32))
