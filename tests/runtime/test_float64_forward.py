"""The native logits against a float64 forward over the same dequantized weights (tests/reference_forward.py,
float64=True), the accuracy judge issue 18 asks for: on a few short sequences per architecture (llama:
smollm2 Q4_1; qwen2: the 0.5B Q4_K_M; gemma3: the 270M Q4_K_M), on every CPU path this machine runs, the native top-1 is float64's
wherever float64's top-1/top-2 margin is clear, and the logits of float64's top 10 stay within a bound.
Rows come from one step over the whole sequence and, on the SIMD paths (whose small-N kernels differ), from
one step per token."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_file
from localllm import native
from localllm.llm import LLM
from localllm.model.gguf import GGUFFile
from reference_forward import ReferenceModel

PATHS = native.known_paths()

TEXTS = [
    "The capital of France is Paris. The capital of the United States is",
    "def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n",
    # on Qwen, token 474 at position 0: the massive activations of issue 18
    "import the rest of the sentence from the old document before you start writing.",
]

# Per model: bounds on |native - float64| over float64's top 10 ids at every position (max, mean per sequence).
# Measured on the AVX2 and scalar paths (AMD EPYC, no AVX-512) over these sequences, one step and one token
# per step: smollm2 max 0.96, mean <= 0.28 (the 8-bit rounding of the activations of its 576-wide Q4_1
# products; the float reference with act_quant moves as much); the 0.5B max 0.43, mean <= 0.07. The bounds
# leave about 1.5x.
# qwen2.5-coder-1.5b is left out for time (its float64 forward takes about a minute here); its massive-activation
# position (token 474 at position 0), which per-256 activation blocks used to flip to 15, keeps float64's top-1
# 16 at every N now (tests/native/test_batch_invariance.py).
MODELS = {
    "smollm2-135m-instruct-q4_1": (1.4, 0.4),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": (0.65, 0.1),
    # gemma (soft-capped logits up to ~36, GELU, sliding windows): scalar max 2.58, mean <= 0.48; AVX2 max 2.12,
    # mean <= 0.45 (2026-11-27, this machine). llama.cpp on the same sequences: max 2.64, mean <= 0.54.
    "gemma-3-270m-q4_k_m": (3.5, 0.7),
}
# The native top-1 must be float64's wherever float64's margin reaches this. Measured flips on the llama and qwen2
# models (longer sequences too, every path) sit at margins 0.011-0.22: near-ties the 8-bit activation rounding
# reorders. gemma's logits are ~36 wide and its flips larger: scalar 0.07-0.70, AVX2 0.07-1.72 over these
# sequences (llama.cpp's there: 0.07 and 0.54).
TOP1_MARGIN = {"gemma-3-270m-q4_k_m": 2.0}
TOP1_MARGIN_DEFAULT = 0.25


@pytest.fixture(scope="module")
def float64_logits():
    """name -> (sequences, [T, n_vocab] float64 logits of each), computed once per model."""
    done = {}

    def get(name):
        if name not in done:
            path = model_file(name)
            with LLM(path, n_threads=1, ctx_size=64) as llm:
                seqs = [llm.tokenize(t, add_special=False) for t in TEXTS]
            if name.startswith("qwen"):
                assert seqs[2][0] == 474  # "import"
            with GGUFFile(path) as f:
                done[name] = seqs, ReferenceModel(f, float64=True).logits_batch(seqs)
        return done[name]

    return get


@pytest.fixture(params=PATHS)
def cpu_path(request):
    if request.param not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    native.configure(request.param)
    yield request.param
    native.configure()


def check_rows(got: np.ndarray, want: np.ndarray, bounds, what: str) -> None:
    """got: [T, n_vocab] native float32 logits; want: the float64 ones."""
    top = np.argsort(-want, axis=1)[:, :10]
    diff = np.abs(np.take_along_axis(got.astype(np.float64), top, 1) - np.take_along_axis(want, top, 1))
    rows = np.arange(len(want))
    margin = want[rows, top[:, 0]] - want[rows, top[:, 1]]
    ours = got.argmax(1)
    flips = [
        (int(p), int(ours[p]), int(top[p, 0]), round(float(margin[p]), 3)) for p in np.nonzero(ours != top[:, 0])[0]
    ]
    print(
        f"{what}: top-10 max |diff| {diff.max():.3f}, mean {diff.mean():.3f}; flips (pos, ours, float64's, margin) {flips}"
    )
    margin_bound = TOP1_MARGIN.get(what.split()[0], TOP1_MARGIN_DEFAULT)
    assert not [f for f in flips if f[3] >= margin_bound], f"{what}: top-1 differs from float64's at {flips}"
    assert diff.max() <= bounds[0] and diff.mean() <= bounds[1], f"{what}: |diff| max {diff.max()}, mean {diff.mean()}"


@pytest.mark.model
@pytest.mark.parametrize("name", list(MODELS))
def test_native_logits_match_float64(float64_logits, cpu_path, name):
    seqs, want = float64_logits(name)
    with LLM(model_file(name), n_threads=2, ctx_size=64) as llm:
        for i, ids in enumerate(seqs):
            check_rows(llm.logits(ids), want[i], MODELS[name], f"{name} {cpu_path} sequence {i}, one step")
            if cpu_path == "scalar":
                continue  # its rows do not depend on the step (tests/runtime/test_forward.py checks decode = prefill)
            steps = llm.exclusive(
                lambda seq, ids=ids: [seq.step(np.array(ids[k : k + 1]), k, np.array([0])) for k in range(len(ids))]
            )
            check_rows(np.concatenate(steps), want[i], MODELS[name], f"{name} {cpu_path} sequence {i}, token by token")


# Ordinary prose on the Q4_1 model (issue 18): the SIMD paths' logits differ from the scalar path's, over 24 such
# prompts (454 positions) by up to 2.6 (mean 0.17 over the vocabulary), yet each is as close to float64: top-10
# mean |diff| scalar 0.164, AVX2 0.164; top-1 float64's at 438 and 434 positions, every miss at a float64 margin
# <= 0.32 on both. The products are not the cause (the AVX2 ones are the more accurate, test_kernels.py
# test_simd_paths_as_accurate_as_scalar): the next product's int8 activation rounding turns a last-bit difference
# into a whole rounding step, and 30 layers compound it. A float64 forward with the same per-32 rounding moves as
# much when each product's outputs are perturbed by a relative 1e-7 (mean 0.15, max 1.3-1.8 over the vocabulary),
# and not at all without the rounding. So the paths are held to the scalar path's distance, not to its bits: on
# these 6 prompts that float64 forward, unperturbed and under 11 perturbation seeds, spans 0.144-0.162 (scalar
# 0.155, AVX2 0.161), and AVX2's misses sit at float64 margins up to 0.27.
PROSE = [
    "Once upon a time, in a small village at the edge of a great forest, there lived an old woodcutter and his wife.",
    "The weather today is mild, with a light breeze from the west and a few clouds drifting over the hills.",
    "She opened the letter slowly, unsure whether the news inside would bring relief or another reason to worry.",
    "In the early morning the market fills with farmers selling bread, cheese, fresh vegetables and flowers.",
    "Scientists have long debated why some birds migrate thousands of miles each year while others stay put.",
    "My grandmother kept a small notebook of recipes, each one written in her careful, looping handwriting.",
]
PROSE_RATIO = 1.25  # a SIMD path's top-10 mean |diff| from float64, at most this times the scalar path's
PROSE_MARGIN = 0.5  # every path's top-1 is float64's wherever float64's margin reaches this


@pytest.mark.model
def test_simd_paths_as_close_to_float64_as_scalar_on_prose():
    name = "smollm2-135m-instruct-q4_1"
    path = model_file(name)
    paths = native.available_paths()
    if paths == ["scalar"]:
        pytest.skip("this CPU runs the scalar path only")
    with LLM(path, n_threads=1, ctx_size=64) as llm:
        seqs = [llm.tokenize(t, add_special=False) for t in PROSE]
    with GGUFFile(path) as f:
        want = ReferenceModel(f, float64=True).logits_batch(seqs)
    dist, flips = {}, {}
    try:
        for p in paths:
            native.configure(p)
            with LLM(path, n_threads=2, ctx_size=64) as llm:
                got = [llm.logits(ids) for ids in seqs]
            diffs, flips[p] = [], []
            for i, (g, w) in enumerate(zip(got, want)):
                top = np.argsort(-w, axis=1)[:, :10]
                diffs.append(np.abs(np.take_along_axis(g.astype(np.float64), top, 1) - np.take_along_axis(w, top, 1)))
                margin = np.take_along_axis(w, top[:, :1], 1)[:, 0] - np.take_along_axis(w, top[:, 1:2], 1)[:, 0]
                flips[p] += [(i, int(t), round(float(margin[t]), 3)) for t in np.nonzero(g.argmax(1) != top[:, 0])[0]]
            dist[p] = float(np.mean(np.concatenate(diffs)))
    finally:
        native.configure()
    print(f"top-10 mean |diff| from float64 {dist}; top-1 misses (sequence, position, float64's margin) {flips}")
    for p in paths:
        assert dist[p] <= PROSE_RATIO * dist["scalar"], f"{p}: {dist[p]:.4f} from float64, scalar {dist['scalar']:.4f}"
        assert not [f for f in flips[p] if f[2] >= PROSE_MARGIN], f"{p}: top-1 differs from float64's at {flips[p]}"
