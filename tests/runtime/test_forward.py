"""The native forward step (localllm.model.model.Model, localllm.llm.LLM): against the numpy reference forward on
tiny float32 models (every optional piece of the decoder block, paging through scrambled block tables,
mixed prefill/decode batches, bad input), and against llama.cpp's recorded logits and greedy tokens on the
four real test models."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import reference_forward
from conftest import gpu, model_file, reference
from localllm import native
from localllm.llm import LLM
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model, kv_block_bytes
from localllm.model.step_batch import StepBatch
from reference_forward import ReferenceModel
from test_model_spec import HEAD, VOCAB, write_model

# -- tiny float32 models against the numpy reference -----------------------------------------------


def _f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(x.dtype)


class F16CacheReference(ReferenceModel):
    """The numpy reference with K (after norm and rope) and V rounded to f16, as the native cache stores them."""

    def linear(self, x, w, b=None):
        y = super().linear(x, w, b)
        return _f16(y) if w.endswith("attn_v.weight") else y

    def attention(self, layer, x, pos):
        rope, calls = reference_forward.rope, []

        def rope_k_f16(*args):  # attention() ropes q first, then k
            calls.append(None)
            out = rope(*args)
            return _f16(out) if len(calls) == 2 else out

        reference_forward.rope = rope_k_f16
        try:
            return super().attention(layer, x, pos)
        finally:
            reference_forward.rope = rope


# Float32 norms, rope and softmax against the reference's float64: measured at most 2e-6 on these O(1) logits
# (without the f16 rounding emulated the difference reaches 4e-3).
TINY_ATOL = 2e-5

TINY_CASES = {
    "llama": dict(extra={"rope_freqs.weight": (HEAD // 2,)}),
    "qwen2": {},
    # window 2: layer 0 sliding, layer 1 global; both soft-caps small enough to bite
    "gemma3": dict(
        kv={
            "gemma3.attention.sliding_window_pattern": [True, False],
            "gemma3.attn_logit_softcapping": 1.5,
            "gemma3.final_logit_softcapping": 2.0,
        }
    ),
}


def one_sequence(model: Model, ids, start: int = 0, rows=None) -> np.ndarray:
    """ids at positions start.. of one sequence that owns blocks n_blocks-1, n_blocks-2, ... (reversed, so
    the block table is not the identity)."""
    bs, nb = model.block_size, model.n_blocks
    table = np.arange(nb - 1, -1, -1, dtype=np.int32)[None, :]
    pos = np.arange(start, start + len(ids))
    slots = table[0, pos // bs] * bs + pos % bs
    rows = np.arange(len(ids)) if rows is None else rows
    return model.forward(StepBatch(ids, pos, slots, np.zeros(len(ids), int), table, [start + len(ids)], rows))


@pytest.mark.parametrize("arch", list(TINY_CASES))
def test_tiny_model_matches_reference(tmp_path, arch):
    path = write_model(tmp_path / "m.gguf", arch, **TINY_CASES[arch])
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    with GGUFFile(path) as f:
        expected = F16CacheReference(f).logits(ids)
        model = Model(f, n_blocks=4, threads=2, block_size=4)
        got = one_sequence(model, ids)
        np.testing.assert_allclose(got, expected, rtol=0, atol=TINY_ATOL)
        # the same tokens again, one decode step at a time through the cache
        steps = np.concatenate([one_sequence(model, ids[i : i + 1], start=i) for i in range(len(ids))])
        np.testing.assert_allclose(steps, expected, rtol=0, atol=TINY_ATOL)


def test_block_size_changes_no_bit(tmp_path):
    """The attention reads keys in chunks of 16 whatever the KV block size: one division a chunk where a chunk lies in
    one block (sizes that are multiples of 16), key by key otherwise; reversed block tables either way. A prompt of
    45 tokens (three chunks, the last partial) in one step, then three decode steps past it."""
    path = write_model(tmp_path / "m.gguf", "llama", **TINY_CASES["llama"])
    ids = [(7 * i + 3) % VOCAB for i in range(48)]
    with GGUFFile(path) as f:
        got = {}
        for bs in (4, 16, 32):
            model = Model(f, n_blocks=-(-48 // bs), threads=2, block_size=bs)
            prompt = one_sequence(model, ids[:45])
            steps = [one_sequence(model, ids[i : i + 1], start=i) for i in range(45, 48)]
            got[bs] = np.concatenate([prompt, *steps])
    np.testing.assert_array_equal(got[16], got[4])
    np.testing.assert_array_equal(got[32], got[4])


def test_tiny_model_sliding_window_matters(tmp_path):
    """Positions beyond the window of a sliding layer change nothing; on a global layer they do."""
    for sliding in (True, False):
        path = write_model(
            tmp_path / f"{sliding}.gguf",
            "gemma3",
            n_layers=1,
            kv={"gemma3.attention.sliding_window_pattern": [sliding]},
        )
        with GGUFFile(path) as f:
            model = Model(f, n_blocks=2, threads=1, block_size=4)
            a, b = one_sequence(model, [1, 2, 3, 4, 5]), one_sequence(model, [7, 0, 3, 4, 5])
        assert np.array_equal(a[3:], b[3:]) == sliding  # window 2: position 3 sees 2 and 3 only


def test_mixed_batches_through_scrambled_block_tables(tmp_path):
    """Two sequences, chunked prefill and decode in the same steps, blocks interleaved in the pool."""
    path = write_model(tmp_path / "m.gguf", "gemma3", kv={"gemma3.attention.sliding_window_pattern": [True, False]})
    seq = {0: [3, 1, 4, 1, 5, 9, 2, 6, 5], 1: [2, 7, 1, 8, 2, 8, 1]}
    tables = np.array([[5, 2, 7], [1, 6, 0]], dtype=np.int32)  # block size 4; block 0 unused by seq 1
    # each step: (sequence, first position, count)
    steps = [[(0, 0, 5), (1, 0, 3)], [(1, 3, 4), (0, 5, 1)], [(0, 6, 3)]]
    with GGUFFile(path) as f:
        ref = F16CacheReference(f)
        expected = {s: ref.logits(ids) for s, ids in seq.items()}
        model = Model(f, n_blocks=8, threads=2, block_size=4)
        done = {0: 0, 1: 0}
        for step in steps:
            ids, pos, seq_index = [], [], []
            for s, p0, n in step:
                ids += seq[s][p0 : p0 + n]
                pos += list(range(p0, p0 + n))
                seq_index += [s] * n
                done[s] = p0 + n
            pos = np.array(pos)
            slots = tables[seq_index, pos // 4] * 4 + pos % 4
            rows = np.arange(len(ids))[::-1].copy()  # logits rows in any order
            got = model.forward(StepBatch(ids, pos, slots, seq_index, tables, [done[0], done[1]], rows))
            for out_row, r in enumerate(rows):
                want = expected[seq_index[r]][pos[r]]
                np.testing.assert_allclose(got[out_row], want, rtol=0, atol=TINY_ATOL)


def test_bad_steps_raise_and_leave_the_cache_alone(tmp_path):
    path = write_model(tmp_path / "m.gguf", "llama")
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=2, threads=1, block_size=4)
        t = np.array([[0, 1]])
        good = dict(
            token_ids=[1, 2],
            positions=[0, 1],
            slot_mapping=[0, 1],
            seq_index=[0, 0],
            block_tables=t,
            context_lens=[2],
            logits_rows=[1],
        )
        before = model.forward(StepBatch(**good))
        bad = [
            ({"token_ids": [1, VOCAB]}, "token_ids\\[1\\] = 12 is outside the vocabulary"),
            ({"token_ids": [1.0, 2.0]}, "token_ids must hold integers"),
            ({"positions": [0, 2]}, "positions\\[1\\] = 2 is outside"),
            ({"slot_mapping": [0, 5]}, "slot_mapping\\[1\\] = 5"),
            ({"positions": [0, 0], "slot_mapping": [0, 0]}, "slot 0 is written twice"),
            ({"seq_index": [0, 1]}, "seq_index\\[1\\] = 1"),
            ({"block_tables": [[0, 2]], "context_lens": [5]}, "block_tables\\[0, 1\\] = 2 is not a block"),
            ({"context_lens": [9]}, "context_lens\\[0\\] = 9 is outside"),
            ({"context_lens": [2, 2]}, "block_tables has 1 rows but context_lens 2"),
            ({"positions": [0]}, "must have one length"),
            ({"logits_rows": [2]}, "logits_rows\\[0\\] = 2"),
            ({"block_tables": [0, 1]}, "block_tables must be 2-D"),
            ({"token_ids": [], "positions": [], "slot_mapping": [], "seq_index": []}, "at least one token"),
        ]
        for change, message in bad:
            with pytest.raises(ValueError, match=message):
                model.forward(StepBatch(**{**good, **change}))
        np.testing.assert_array_equal(model.forward(StepBatch(**good)), before)
        with pytest.raises(TypeError, match="forward takes a StepBatch"):
            model.forward(tuple(good.values()))  # the arrays as the old positional form
        assert model.forward(StepBatch(**{**good, "logits_rows": []})).shape == (0, VOCAB)
        with pytest.raises(ValueError, match="n_blocks"):
            Model(f, n_blocks=0)


# -- the real models against llama.cpp ---------------------------------------------------------------

MODELS = {  # name: (teacher-forced prompts, bound on the mean |top-10 logit difference| per prompt)
    "smollm2-135m-instruct-q4_1": ([0, 1, 2, 3], 0.35),
    "qwen2.5-coder-0.5b-instruct-q4_k_m": ([0, 1, 2, 3], 0.1),
    "gemma-3-270m-q4_k_m": ([0, 1, 2], 0.5),
    "qwen2.5-coder-1.5b-instruct-q4_k_m": ([1], 0.11),
}
# Measured mean |top-10 difference| per prompt (avx512 kernels, two kernel builds): smollm2 0.144-0.241,
# qwen 0.5B 0.060-0.073, gemma3 0.183-0.392, qwen 1.5B 0.077 (position 0 left out, see below): the same size as the float
# reference's distance from llama.cpp (test_model_spec: 0.165-0.216, 0.060-0.072, 0.152-0.330, 0.080-0.103),
# which is llama.cpp's own 8-bit activation rounding; the bounds leave 1.3x to 1.45x headroom.
TOP1_MARGIN = 0.1
# Where our top-1 may differ from llama.cpp's although its top-1/top-2 margin is at least TOP1_MARGIN, as
# measured over successive kernel builds (which one flips depends on the kernels' summation order):
# (prompt, position) -> llama.cpp's margin. All are near-ties (margins 0.12 to 0.28) that the activation
# rounding reorders; the float reference flips the same way at qwen 0.5B (18: 0.221, 15: 0.153).
# Any other flip fails the test.
KNOWN_NEAR_TIES = {
    "smollm2-135m-instruct-q4_1": {(1, 9): 0.193, (2, 16): 0.273, (3, 17): 0.118},
    "qwen2.5-coder-0.5b-instruct-q4_k_m": {(0, 18): 0.221, (1, 15): 0.153},
    # (2, 23): llama.cpp 107 by 0.102; the scalar path 107 by 0.142, AVX2 107 by 0.018 with one accumulator per
    # output and 532 by 0.051 with eight (kernels.h)
    # (2, 2): llama.cpp 236743 by 0.182 over 6824; float64 236743 by 0.145; the vectorised GELU (a few ulps from
    # libm's tanh) moves the 8-bit rounding of the next products: localllm 6824 by 0.010, with 236743 0.002 from
    # float64's and 6824 0.156 (llama.cpp's: 0.32 and 0.35)
    "gemma-3-270m-q4_k_m": {(0, 1): 0.238, (2, 23): 0.102, (2, 2): 0.182},
    "qwen2.5-coder-1.5b-instruct-q4_k_m": {},
}
# Greedy decoding reads the prompt's K and V from the batched step and computes each new token in a decode
# step, whose matmuls sum in another order (see PREFILL_DECODE_MEAN): near-ties can flip there that the
# teacher-forced pass gets right. (prompt, position) -> llama.cpp's margin, beyond KNOWN_NEAR_TIES.
GREEDY_NEAR_TIES = {
    "smollm2-135m-instruct-q4_1": {},
    "qwen2.5-coder-0.5b-instruct-q4_k_m": {},
    "gemma-3-270m-q4_k_m": {(1, 16): 0.197},
    "qwen2.5-coder-1.5b-instruct-q4_k_m": {},
}
# The 1.5B's position 0 (the first prompt token) has hidden-state outliers in the thousands, and every
# 8-bit activation rounding loses the rest of their blocks: llama.cpp (per 256) puts the top-1 at 15 (14.44,
# next 16 at 13.35), the float reference at 16 (7.86), the reference with llama.cpp's rounding emulated at
# 15 (14.42), ours (per 32) at 16 (9.32; top-10 mean |diff| 1.36 from the float reference, 4.45 from
# llama.cpp). That position measures the rounding scheme, not the model, so it is left out here.
LLAMACPP_OUTLIER_POSITIONS = {"qwen2.5-coder-1.5b-instruct-q4_k_m": {0}}


def _is_the_real_model(path, name: str) -> bool:
    """Whether path holds the file llama.cpp's outputs were recorded on (not, say, a synthetic twin: .ci/gpu-check)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest() == reference(name)["sha256"]


@pytest.fixture(
    scope="module",
    params=[
        "cpu",
        pytest.param(
            "cuda",
            marks=[pytest.mark.gpu, gpu],
        ),
    ],
)
def llms(request):
    """The real models, on the CPU and (gpu) on a CUDA device: the same checks against llama.cpp's outputs."""
    opened: dict[str, LLM] = {}

    def get(name: str) -> LLM:
        if name not in opened:
            path = model_file(name)
            if request.param != "cpu" and not _is_the_real_model(path, name):
                pytest.skip(f"{path} is not the model llama.cpp's outputs were recorded on (a synthetic twin?)")
            opened[name] = LLM(path, n_threads=native.physical_cores(), ctx_size=256, device=request.param)
        return opened[name]

    yield get
    for llm in opened.values():
        llm.close()


def _margin(topk) -> float:
    return float(topk[0][1] - topk[1][1])


@pytest.mark.model
@pytest.mark.parametrize("name", list(MODELS))
def test_logits_match_llamacpp(llms, name):
    data, llm = reference(name), llms(name)
    prompts, bound = MODELS[name]
    skip = LLAMACPP_OUTLIER_POSITIONS.get(name, set())
    for i in prompts:
        case = data["teacher_forced"][i]
        ids = case["prompt_ids"] + case["greedy_ids"]
        logits = llm.logits(ids)
        assert logits.shape == (len(ids), llm.n_vocab) and logits.dtype == np.float32
        diffs, flips = [], {}
        for pos, topk in enumerate(case["topk_per_position"]):
            if pos in skip:
                continue
            top_ids = [t for t, _ in topk]
            diffs.append(np.abs(logits[pos, top_ids] - np.array([v for _, v in topk])))
            if int(np.argmax(logits[pos])) != top_ids[0] and _margin(topk) >= TOP1_MARGIN:
                flips[(i, pos)] = round(_margin(topk), 3)
        mean_diff = float(np.mean(diffs))
        print(f"{name} prompt {i}: {len(ids)} positions, top-10 mean |diff| {mean_diff:.4f}, near-tie flips {flips}")
        new = {k: v for k, v in flips.items() if k not in KNOWN_NEAR_TIES[name]}
        assert not new, f"prompt {i}: top-1 differs from llama.cpp's at (prompt, pos) -> its margin {new}"
        assert mean_diff < bound, f"prompt {i}: top-10 mean |logit diff| {mean_diff:.4f} >= {bound}"


@pytest.mark.model
@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_matches_llamacpp(llms, name):
    """Decode steps through the KV cache reproduce llama.cpp's greedy tokens up to the first position whose
    margin is under TOP1_MARGIN (or a documented near-tie)."""
    data, llm = reference(name), llms(name)
    ties = {**KNOWN_NEAR_TIES[name], **GREEDY_NEAR_TIES[name]}
    for i in MODELS[name][0]:
        case = data["teacher_forced"][i]
        prompt, theirs = case["prompt_ids"], case["greedy_ids"]
        ours = llm.greedy(prompt, len(theirs))
        n = 0
        while n < len(theirs):
            pos = len(prompt) - 1 + n  # the position whose logits chose greedy token n
            if _margin(case["topk_per_position"][pos]) < TOP1_MARGIN or (i, pos) in ties:
                break
            n += 1
        print(
            f"{name} prompt {i}: greedy compared over {n} of {len(theirs)}, equal over "
            f"{next((k for k in range(len(theirs)) if ours[k] != theirs[k]), len(theirs))}"
        )
        assert ours[:n] == theirs[:n]


@pytest.mark.model
def test_prefill_equals_decode_exactly_on_the_scalar_path():
    """On the scalar kernels one prefill step and token-by-token decode give bit-identical logits: the
    cache path computes exactly what the batched path does."""
    name = "smollm2-135m-instruct-q4_1"
    case = reference(name)["teacher_forced"][2]
    ids = case["prompt_ids"] + case["greedy_ids"][:8]
    native.configure("scalar", native.physical_cores())
    try:
        with LLM(model_file(name), ctx_size=64) as llm:
            batched = llm.logits(ids)
            steps = llm.exclusive(
                lambda seq: np.concatenate(
                    [seq.step(np.array(ids[k : k + 1]), k, np.array([0])) for k in range(len(ids))]
                )
            )
    finally:
        native.configure()
    np.testing.assert_array_equal(steps, batched)


# On the SIMD paths the batched (n >= 3 rows) and the decode (n <= 2) matmuls sum in different orders; a
# 1e-6 difference can move an activation across a Q8 rounding boundary, and 24 layers amplify that. Measured
# on the 0.5B over 37 positions: max 0.39-0.47, mean over the top-10 0.05.
PREFILL_DECODE_MEAN = 0.1


@pytest.mark.model
def test_prefill_matches_decode(llms):
    name = "qwen2.5-coder-0.5b-instruct-q4_k_m"
    case = reference(name)["teacher_forced"][0]
    ids = case["prompt_ids"] + case["greedy_ids"]
    llm = llms(name)
    batched = llm.logits(ids)
    steps = llm.exclusive(
        lambda seq: np.concatenate([seq.step(np.array(ids[k : k + 1]), k, np.array([0])) for k in range(len(ids))])
    )
    top = np.argsort(-batched, axis=1)[:, :10]
    diff = np.abs(np.take_along_axis(steps, top, 1) - np.take_along_axis(batched, top, 1))
    print(f"prefill vs decode: top-10 mean |diff| {diff.mean():.4f}, max {diff.max():.3f}")
    assert diff.mean() < PREFILL_DECODE_MEAN
    margins = np.take_along_axis(batched, top[:, :1], 1)[:, 0] - np.take_along_axis(batched, top[:, 1:2], 1)[:, 0]
    clear = margins >= 0.5
    assert (steps.argmax(1)[clear] == top[clear, 0]).all()


@pytest.mark.model
def test_llm_refuses_bad_ids_and_full_context():
    name = "smollm2-135m-instruct-q4_1"
    with LLM(model_file(name), n_threads=1, ctx_size=20) as llm:
        assert llm.ctx_size == 32  # whole blocks of 16
        ids = llm.tokenize("Hello world")
        assert llm.detokenize(ids) == "Hello world"
        with pytest.raises(ValueError, match="non-empty"):
            llm.logits([])
        with pytest.raises(ValueError, match=r"ids\[1\] = 49152 is outside the vocabulary"):
            llm.logits([1, llm.n_vocab])
        with pytest.raises(ValueError, match="exceed the context size 32"):
            llm.greedy(ids, 32)
        with pytest.raises(ValueError, match="n must be"):
            llm.greedy(ids, -1)
        assert len(llm.greedy(ids, 32 - len(ids))) == 32 - len(ids)  # fills the context exactly
    with pytest.raises(ValueError, match="closed"):
        llm.logits(ids)


# -- quantized KV cache (q8_0, q4_0) on tiny models with head_dim 64 ----------------------------------

QHEAD = 64
# Measured at most 4e-6 where both K and V are quantized (the reference feeds the quantizers the same float32
# values up to the last bit of rope and matmul: no rounding flips at this seed). With one part in f16, one f16
# rounding falls the other way between the native float32 and the reference float64 rope/matmul (one f16 ulp,
# 2^-11 relative; measured 3e-5), as TINY_ATOL's comment notes. A single q8_0 / q4_0 rounding flip or a wrong
# transform moves these logits by 1e-2 or more.
QUANT_ATOL = 1e-4


def fwht32(x: np.ndarray) -> np.ndarray:
    """float32 [..., dim]: native/kv_format.h's hadamard_rotate, the same float32 butterflies in the same order."""
    dim = x.shape[-1]
    m = dim & -dim
    g = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, m)
    h = 1
    while h < m:
        g = g.reshape(-1, m // (2 * h), 2, h)
        g = np.stack([g[:, :, 0] + g[:, :, 1], g[:, :, 0] - g[:, :, 1]], axis=2).reshape(-1, m)
        h *= 2
    return (g * (np.float32(1) / np.sqrt(np.float32(m)))).reshape(x.shape)


def fwht64(x: np.ndarray) -> np.ndarray:
    """float64 [..., dim]: the same rotation in float64 (its own inverse)."""
    dim = x.shape[-1]
    m = dim & -dim
    g = np.asarray(x, dtype=np.float64).reshape(-1, m)
    h = 1
    while h < m:
        g = g.reshape(-1, m // (2 * h), 2, h)
        g = np.stack([g[:, :, 0] + g[:, :, 1], g[:, :, 0] - g[:, :, 1]], axis=2).reshape(-1, m)
        h *= 2
    return (g / np.sqrt(m)).reshape(x.shape)


def roundtrip(x32: np.ndarray, kv_type: str) -> np.ndarray:
    """float32 [..., head_dim] -> the float64 values a KV row of kv_type holds: gguf.quants for q8_0 (ggml's
    reference quantizer); for q4_0 localllm's own least-squares quantizer (native.testing.kv_quantize), which
    tests/native/test_kv_format.py checks against gguf's q4_0 format and error."""
    if kv_type == "f16":
        return x32.astype(np.float16).astype(np.float64)
    if kv_type == "q4_0":
        flat = np.ascontiguousarray(x32.reshape(-1, x32.shape[-1]), dtype=np.float32)
        back = native.testing.kv_dequantize("q4_0", native.testing.kv_quantize("q4_0", flat), flat.shape[1])
        return back.reshape(x32.shape).astype(np.float64)
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    qt = GGMLQuantizationType.Q8_0 if kv_type == "q8_0" else GGMLQuantizationType.Q4_0
    flat = x32.reshape(-1, x32.shape[-1])
    return dequantize(quantize(flat, qt), qt).reshape(x32.shape).astype(np.float64)


class QuantCacheReference(ReferenceModel):
    """The numpy reference with K (after norm and rope) and V stored as the native cache stores them: for a
    quantized part, minus the bias (center: K's subtracted, V's never added), divided by the per-channel
    scales (K, equalize), Hadamard-rotated
    (rotate), each in float32 as the native code does; then rounded through gguf.quants and mapped back
    exactly (float64) into the attention, which these transforms leave unchanged."""

    def __init__(self, f, k_type, v_type, center, rotate, k_scales):
        super().__init__(f)
        self.k_type, self.v_type, self.center, self.rotate, self.k_scales = k_type, v_type, center, rotate, k_scales

    def store(self, x, kv_type, bias, scale, rotate):
        """x: [T, n_kv_head, head_dim] -> the values the attention reads, float64."""
        x32 = x.astype(np.float32)
        if kv_type == "f16":
            return roundtrip(x32, "f16")
        if bias is not None:
            x32 = x32 - bias.astype(np.float32).reshape(x32.shape[1:])
        if scale is not None:
            x32 = x32 / scale.reshape(x32.shape[1:])
        if rotate:
            x32 = fwht32(x32)
        y = roundtrip(x32, kv_type)
        if rotate:
            y = fwht64(y)
        if scale is not None:
            y = y * scale.reshape(x32.shape[1:]).astype(np.float64)
        if bias is not None:
            y = y + bias.astype(np.float32).reshape(x32.shape[1:])
        return y

    def linear(self, x, w, b=None):
        if not w.endswith("attn_v.weight"):
            return super().linear(x, w, b)
        layer, s = self._layer, self.spec
        center = self.center and layer.attn_v_bias is not None and self.v_type != "f16"
        y = super().linear(x, w, None if center else b)  # a centered V is stored without its bias ...
        v = self.store(y.reshape(len(y), s.n_kv_head, s.head_dim), self.v_type, None, None, self.rotate)
        v = v.reshape(y.shape)
        return v + self.weight(layer.attn_v_bias) if center else v  # ... which the attention's output gets back

    def attention(self, layer, x, pos):
        rope, calls, s = reference_forward.rope, [], self.spec
        idx = s.layers.index(layer)
        center_k = self.center and layer.attn_k_bias is not None and not s.attn_softcap
        bias = self.weight(layer.attn_k_bias) if center_k else None
        scale = None if self.k_scales is None else self.k_scales[idx]

        def rope_k(*args):  # attention() ropes q first, then k
            calls.append(None)
            out = rope(*args)
            return self.store(out, self.k_type, bias, scale, self.rotate) if len(calls) == 2 else out

        self._layer = layer
        reference_forward.rope = rope_k
        try:
            return super().attention(layer, x, pos)
        finally:
            reference_forward.rope = rope


def write_qhead_model(path, arch: str, head_dim: int = QHEAD, edit=None):
    """A tiny model of arch with head_dim 64 (whole q8_0 / q4_0 blocks), or another head_dim (edit: write_model's)."""
    from test_model_spec import N_HEAD, N_KV, D

    extra = {
        "blk.{}.attn_q.weight": (N_HEAD * head_dim, D),
        "blk.{}.attn_k.weight": (N_KV * head_dim, D),
        "blk.{}.attn_v.weight": (N_KV * head_dim, D),
        "blk.{}.attn_output.weight": (D, N_HEAD * head_dim),
    }
    if arch == "qwen2":
        extra.update(
            {
                "blk.{}.attn_q.bias": (N_HEAD * head_dim,),
                "blk.{}.attn_k.bias": (N_KV * head_dim,),
                "blk.{}.attn_v.bias": (N_KV * head_dim,),
            }
        )
    if arch == "gemma3":
        extra.update({"blk.{}.attn_q_norm.weight": (head_dim,), "blk.{}.attn_k_norm.weight": (head_dim,)})
    kv = {f"{arch}.attention.key_length": head_dim, f"{arch}.attention.value_length": head_dim}
    kv.update(TINY_CASES.get(arch, {}).get("kv", {}))
    shapes = {k.format(i): v for k, v in extra.items() for i in range(2)}
    if arch == "llama":
        shapes["rope_freqs.weight"] = (head_dim // 2,)
    return write_model(path, arch, kv=kv, extra=shapes, seed=3, edit=edit)


@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "llama"])
@pytest.mark.parametrize(
    "k_type,v_type,transforms",
    [
        ("q8_0", "q8_0", True),
        ("q4_0", "q4_0", True),
        ("q4_0", "q4_0", False),
        ("q4_0", "f16", True),
        ("f16", "q8_0", True),
    ],
)
def test_quantized_kv_matches_reference(tmp_path, arch, k_type, v_type, transforms):
    """Native attention over a quantized cache equals the reference attention over the same quantized values
    (same float32 inputs to the same quantizer), prefill and decode alike: the bound is TINY_ATOL's."""
    path = write_qhead_model(tmp_path / "m.gguf", arch)
    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    with GGUFFile(path) as f:
        model = Model(
            f,
            n_blocks=4,
            threads=2,
            block_size=4,
            k_type=k_type,
            v_type=v_type,
            kv_rotate=transforms,
            kv_center=transforms,
            kv_equalize=transforms,
        )
        assert model.kv_rotated == (transforms and k_type != "f16", transforms and v_type != "f16")
        assert model.kv_centered == (
            transforms and arch == "qwen2" and k_type != "f16",
            transforms and arch == "qwen2" and v_type != "f16",
        )
        expected = QuantCacheReference(f, k_type, v_type, transforms, transforms, model.k_scales).logits(ids)
        got = one_sequence(model, ids)
        steps = np.concatenate([one_sequence(model, ids[i : i + 1], start=i) for i in range(len(ids))])
    np.testing.assert_allclose(got, expected, rtol=0, atol=QUANT_ATOL)
    np.testing.assert_allclose(steps, expected, rtol=0, atol=QUANT_ATOL)


@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "llama"])
@pytest.mark.parametrize("threads", [1, 2])
def test_long_prompt_split_by_rows_matches_reference(tmp_path, arch, threads):
    """A 70-token prompt (64 rows or more: the per-row work between the products runs over row ranges on the
    pool, native/model.cpp) with q4_0 K and V and every transform equals the reference over the same
    quantized values, and token-by-token decode (one row, no split) agrees."""
    path = write_qhead_model(tmp_path / "m.gguf", arch)
    ids = [(7 * i + 3) % 10 for i in range(70)]
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=18, threads=threads, block_size=4, k_type="q4_0", v_type="q4_0")
        expected = QuantCacheReference(f, "q4_0", "q4_0", True, True, model.k_scales).logits(ids)
        got = one_sequence(model, ids)
        steps = np.concatenate([one_sequence(model, ids[i : i + 1], start=i) for i in range(len(ids))])
    np.testing.assert_allclose(got, expected, rtol=0, atol=QUANT_ATOL)
    np.testing.assert_allclose(steps, expected, rtol=0, atol=QUANT_ATOL)


@pytest.mark.parametrize("k_type", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("v_type", ["f16", "q4_0"])
def test_kv_block_bytes_is_what_the_model_allocates(tmp_path, k_type, v_type):
    """model.kv_block_bytes (which sizes the KV pool from a memory budget) from quant_types' block sizes equals
    the native cache's bytes per block."""
    path = write_qhead_model(tmp_path / "m.gguf", "qwen2")
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=3, threads=1, block_size=4, k_type=k_type, v_type=v_type)
        assert kv_block_bytes(model.spec, k_type, v_type, block_size=4) * 3 == model.kv_bytes


def test_models_and_kernels_share_one_set_of_worker_threads(tmp_path):
    """One set of worker threads per process (native/thread_pool.h): the kernels' 2 threads and models of 3, 3
    and 1 threads add workers only up to the largest count (2 workers), each model keeps its own count, and
    the logits do not depend on it."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc/self/task on this system (the test counts threads there)")
    path = write_model(tmp_path / "m.gguf", "qwen2")
    code = f"""
import os, numpy as np
from localllm import native
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model, kv_block_bytes
from localllm.model.step_batch import StepBatch
native.configure(threads=2)
base = len(os.listdir("/proc/self/task"))
f = GGUFFile({str(path)!r})
models = [Model(f, n_blocks=4, threads=t, block_size=4) for t in (3, 3, 1)]
out = [m.forward(StepBatch([1, 2, 3, 4, 5], range(5), range(5), [0] * 5, [[0, 1]], [5], range(5))) for m in models]
print(len(os.listdir("/proc/self/task")) - base, [m.threads for m in models], native.threads(),
      all(np.array_equal(o, out[0]) for o in out))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[0] == "1 [3, 3, 1] 2 True"


def test_models_stepping_in_parallel_threads_match_serial(tmp_path):
    """Two models stepped from two Python threads at once while a third runs native.matmul: runs on the shared
    workers take turns, so every result equals the one computed alone."""
    path = write_model(tmp_path / "m.gguf", "llama")
    ids = [(5 * i + 1) % VOCAB for i in range(9)]
    with GGUFFile(path) as f:
        models = [Model(f, n_blocks=4, threads=t, block_size=4) for t in (2, 3)]
        want = [one_sequence(m, ids) for m in models]
        w = f.tensor("blk.0.attn_q.weight")
        x = np.random.default_rng(0).standard_normal((3, w.row_len)).astype(np.float32)
        want_mm = native.matmul(w, x)
        got, errors = {}, []

        def work(i):
            try:
                for _ in range(30):
                    if i < 2:
                        got.setdefault(i, []).append(one_sequence(models[i], ids))
                    else:
                        got.setdefault(i, []).append(native.matmul(w, x))
            except Exception as e:
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for i in range(2):
        assert all(np.array_equal(g, want[i]) for g in got[i])
    assert all(np.array_equal(g, want_mm) for g in got[2])


@pytest.mark.parametrize("head_dim", [72, 80])
def test_head_dims_off_the_32_grid_match_reference(tmp_path, head_dim):
    """head_dim 72 and 80 (f16 cache): the attention's 32-dim P.V loop leaves a tail its 8-dim loop takes."""
    path = write_qhead_model(tmp_path / "m.gguf", "llama", head_dim=head_dim)
    ids = [(7 * i + 3) % 10 for i in range(20)]
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=6, threads=2, block_size=4)
        expected = QuantCacheReference(f, "f16", "f16", False, False, None).logits(ids)
        got = one_sequence(model, ids)
    np.testing.assert_allclose(got, expected, rtol=0, atol=QUANT_ATOL)


def k_scales_reference(f, model):
    """K's per-channel divisors in float64 numpy: s^2 the ratio of K's to q's rms channel magnitude (weights
    times attn_norm, the bias where it is kept, the head norm where there is one; one value per RoPE pair),
    a dead channel's magnitude floored at 1e-6 of its head's largest, rms 1 per head, clipped to [1e-3, 1e3]."""
    ref, s = ReferenceModel(f), model.spec
    half = s.rope.n_rot // 2
    i = np.arange(half)
    ia, ib = (i, i + half) if s.rope.neox else (2 * i, 2 * i + 1)

    def rms(matrix, norm, bias, head_norm, n_heads):
        w = ref.weight(matrix).astype(np.float64) * ref.weight(norm).astype(np.float64)
        ms = (w**2).sum(axis=1) + (0 if bias is None else ref.weight(bias).astype(np.float64) ** 2)
        ms = ms.reshape(n_heads, s.head_dim)
        if head_norm is None:
            return np.sqrt(ms)
        return np.abs(ref.weight(head_norm)) * np.sqrt(ms / ms.mean(axis=1, keepdims=True))

    want = []
    for layer in s.layers:
        centered = model.kv_centered[0]  # K stored minus its bias: the bias is not in its magnitude
        k = rms(layer.attn_k, layer.attn_norm, None if centered else layer.attn_k_bias, layer.attn_k_norm, s.n_kv_head)
        q = rms(layer.attn_q, layer.attn_norm, layer.attn_q_bias, layer.attn_q_norm, s.n_head)
        q = np.sqrt((q**2).reshape(s.n_kv_head, s.n_head // s.n_kv_head, s.head_dim).mean(axis=1))
        for g in (k, q):
            pair = np.sqrt((g[:, ia] ** 2 + g[:, ib] ** 2) / 2)
            g[:, ia], g[:, ib] = pair, pair
        floor = lambda g: np.maximum(g, 1e-6 * g.max(axis=1, keepdims=True) + 1e-30)  # noqa: E731
        r = floor(k) / floor(q)
        want.append(np.clip(np.sqrt(r / r.mean(axis=1, keepdims=True)), 1e-3, 1e3).ravel())
    return np.array(want)


@pytest.mark.parametrize("arch,center", [("qwen2", True), ("qwen2", False), ("gemma3", True), ("llama", True)])
def test_k_scales_follow_the_weights(tmp_path, arch, center):
    """K's per-channel divisors (native/kv_transforms.h, equalize) against k_scales_reference."""
    path = write_qhead_model(tmp_path / "m.gguf", arch)
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=2, threads=1, block_size=4, k_type="q4_0", kv_center=center)
        assert Model(f, n_blocks=2, threads=1, block_size=4).k_scales is None  # f16 K: none
        assert model.kv_centered[0] == (arch == "qwen2" and center)
        np.testing.assert_allclose(model.k_scales, k_scales_reference(f, model), rtol=1e-6)


def test_k_scales_of_dead_channels_stay_finite(tmp_path):
    """A K channel pair whose weights are all zero, and a q channel pair that no query head of the group
    reads: the floors keep every divisor finite and inside [1e-3, 1e3] (a dead K channel divides a zero; a
    dead q channel would otherwise ask for an infinite divisor), as the float64 reference floors them; and
    the model still runs on them against the reference attention."""
    from test_model_spec import N_HEAD, N_KV

    group = N_HEAD // N_KV

    def edit(name, t):
        if name == "blk.0.attn_k.weight":
            t[0:2] = 0.0  # kv head 0, RoPE pair (0, 1) (llama: adjacent pairs)
        if name == "blk.0.attn_q.weight":
            for h in range(group):  # every query head of kv head 0, pair (4, 5)
                t[h * QHEAD + 4 : h * QHEAD + 6] = 0.0

    path = write_qhead_model(tmp_path / "m.gguf", "llama", edit=edit)
    with GGUFFile(path) as f:
        model = Model(f, n_blocks=4, threads=1, block_size=4, k_type="q4_0")
        got, want = np.array(model.k_scales), k_scales_reference(f, model)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.all(np.isfinite(got)) and got.min() >= 1e-3 and got.max() <= 1e3
        head0 = got[0, :QHEAD]
        assert got[0, 0] == got[0, 1] == head0.min() < np.median(head0)  # dead K: the smallest divisor
        assert got[0, 4] == got[0, 5] == head0.max() > 100 * np.median(head0)  # unread by q: the largest
        ids = [3, 1, 4, 1, 5, 9, 2]
        expected = QuantCacheReference(f, "q4_0", "f16", True, True, model.k_scales).logits(ids)
        np.testing.assert_allclose(one_sequence(model, ids), expected, rtol=0, atol=QUANT_ATOL)
