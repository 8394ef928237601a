"""The native logits against a float64 forward over the same dequantized weights (tests/reference_forward.py,
float64=True), the accuracy judge issue 18 asks for: on a few short sequences per architecture (llama:
smollm2 Q4_1; qwen2: the 0.5B Q4_K_M), on every CPU path this machine runs, the native top-1 is float64's
wherever float64's top-1/top-2 margin is clear, and the logits of float64's top 10 stay within a bound.
Rows come from one step over the whole sequence and, on the SIMD paths (whose small-N kernels differ), from
one step per token."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_file
from localllm import kernels
from localllm.gguf import GGUFFile
from localllm.llm import LLM
from reference_forward import ReferenceModel

PATHS = ["scalar", "avx2", "avx512"]

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
}
# The native top-1 must be float64's wherever float64's margin reaches this. Measured flips on these models
# (longer sequences too, every path) sit at margins 0.011-0.22: near-ties the 8-bit activation rounding
# reorders.
TOP1_MARGIN = 0.25


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
    if request.param not in kernels.available_paths():
        pytest.skip(f"this CPU cannot run the {request.param} path")
    kernels.configure(request.param)
    yield request.param
    kernels.configure()


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
    assert not [f for f in flips if f[3] >= TOP1_MARGIN], f"{what}: top-1 differs from float64's at {flips}"
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
