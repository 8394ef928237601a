"""Where the layers run (localllm.model.placement, native/stage.h): the --device / --gpu-layers policy, the stage seam
itself (a model cut into CPU stages computes exactly what one stage does: the hidden state handed from stage to
stage, each stage's own KV cache), clean errors where CUDA is missing, and, on a machine with an NVIDIA GPU
(tests marked gpu, skipped without one), the CUDA stage against the CPU: whole-model logits, --gpu-layers
splits, and the engine's concurrent streams and prefix cache on the device."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import MODEL_NAMES, gpu, model_file, no_gpu
from localllm import native
from localllm.llm import LLM
from localllm.model import placement, quant_types
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model, footprint, kv_block_bytes
from localllm.model.placement import DeviceUnavailableError, Footprint
from localllm.model.step_batch import StepBatch
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer
from test_forward import one_sequence, write_qhead_model


@pytest.fixture
def fake_gpu(monkeypatch):
    """backends() reporting a compiled CUDA backend with one device (the policy only, nothing runs on it)."""
    real = native.backends

    def with_gpu():
        b = real()
        b["cuda"] = {"compiled": True, "devices": [{"index": 0, "name": "fake"}], "error": ""}
        return b

    monkeypatch.setattr(native, "backends", with_gpu)


def test_placement_with_a_gpu(fake_gpu):
    assert placement.placement("cuda", None, 24) == [("cuda", 24)]
    assert placement.placement("auto", None, 24) == [("cuda", 24)]
    assert placement.placement("cuda", 16, 24) == [("cuda", 16), ("cpu", 24)]
    assert placement.placement("cuda", 24, 24) == [("cuda", 24)]
    assert placement.placement("cuda", 99, 24) == [("cuda", 24)]
    assert placement.placement("auto", 0, 24) == [("cpu", 24)]
    assert placement.placement("cpu", None, 24) == [("cpu", 24)]


GIB = 2**30


@pytest.mark.parametrize(
    "free,gpu_layers,expected",
    [
        (100 * GIB, None, [("cuda", 4)]),  # everything fits
        (4 * GIB, None, [("cuda", 2), ("cpu", 4)]),  # room 3.1 GiB: embedding 1 + two layers of 1
        (2 * GIB, None, [("cpu", 4)]),  # room 1.3 GiB: the embedding and no layer
        (4 * GIB, 2, [("cuda", 2), ("cpu", 4)]),
        (0, 3, [("cuda", 3), ("cpu", 4)]),  # free memory unknown: as asked
    ],
)
def test_layers_that_fit_the_free_memory_go_to_the_gpu(fake_gpu, monkeypatch, free, gpu_layers, expected):
    devices = native.backends()["cuda"]["devices"]
    devices[0]["free_memory"] = free
    monkeypatch.setattr(native, "backends", lambda: {"cuda": {"compiled": True, "devices": devices, "error": ""}})
    fp = Footprint(embed=GIB, layers=(GIB,) * 4, head=GIB // 2)
    assert placement.placement("auto", gpu_layers, 4, fp) == expected


def test_a_split_that_does_not_fit_is_refused(fake_gpu, monkeypatch):
    devices = [{"index": 0, "name": "small", "free_memory": 4 * GIB}]
    monkeypatch.setattr(native, "backends", lambda: {"cuda": {"compiled": True, "devices": devices, "error": ""}})
    fp = Footprint(embed=GIB, layers=(GIB,) * 4, head=GIB // 2)
    with pytest.raises(ValueError, match="the first 3 layers need 4.00 GiB on the GPU and it has 4.00 GiB free"):
        placement.placement("cuda", 3, 4, fp)


@pytest.mark.model
def test_the_footprint_is_the_tensors_and_the_kv_pools():
    with GGUFFile(model_file(QWEN)) as f:
        model = Model(f, n_blocks=8, threads=1)
        fp = footprint(f, model.spec, 8, model.block_size, "f16", "f16")
        output = 0 if model.spec.tied_output else f.tensor("output.weight").nbytes
        assert fp.head == f.tensor("output_norm.weight").nbytes + output
        assert fp.embed == f.tensor("token_embd.weight").nbytes
        weights = sum(t.nbytes for t in f.tensors.values())
        kv = 8 * kv_block_bytes(model.spec, "f16", "f16")
        assert fp.on_gpu(24) == weights + kv == model.kv_bytes + weights


def test_placement_without_cuda(monkeypatch):
    monkeypatch.setattr(
        native, "backends", lambda: {"cuda": {"compiled": False, "devices": [], "error": "built without nvcc"}}
    )
    assert placement.placement("auto", None, 24) == [("cpu", 24)]
    assert placement.placement("auto", 8, 24) == [("cpu", 24)]
    with pytest.raises(DeviceUnavailableError, match="not in this build.*built without nvcc"):
        placement.placement("cuda", None, 24)
    monkeypatch.setattr(
        native, "backends", lambda: {"cuda": {"compiled": True, "devices": [], "error": "no NVIDIA driver found"}}
    )
    with pytest.raises(DeviceUnavailableError, match="no CUDA device: no NVIDIA driver found"):
        placement.placement("cuda", 4, 24)


@pytest.mark.parametrize(
    "device,gpu_layers,match",
    [
        ("tpu", None, "device must be one of cpu, cuda, auto"),
        ("cuda", -1, "gpu_layers must be a non-negative integer"),
        ("cuda", 2.5, "gpu_layers must be a non-negative integer"),
        ("cuda", True, "gpu_layers must be a non-negative integer"),
        ("cpu", 4, "gpu_layers 4 needs device 'cuda' or 'auto'"),
    ],
)
def test_placement_refuses_bad_values(device, gpu_layers, match):
    with pytest.raises(ValueError, match=match):
        placement.placement(device, gpu_layers, 24)


def _steps(model: Model) -> list[np.ndarray]:
    """A 70-token prompt of one sequence (split over the pool by rows), then decode steps of it mixed with a
    second sequence's prefill: every logit row of each step."""
    out = [one_sequence(model, [(7 * i + 3) % 10 for i in range(70)])]
    bs = model.block_size
    nb = model.n_blocks  # sequence 0's table is one_sequence's (blocks nb-1, nb-2, ...); sequence 1 counts up
    tables = np.array([list(range(nb - 1, -1, -1)), list(range(nb))], dtype=np.int32)
    for step in range(3):
        pos = np.array([70 + step] + list(range(4 * step, 4 * step + 4)))
        seq = np.array([0, 1, 1, 1, 1])
        slots = tables[seq, pos // bs] * bs + pos % bs
        ids = [(5 * step + 1) % 10, 2, 7, 1, 8]
        out.append(model.forward(StepBatch(ids, pos, slots, seq, tables, [71 + step, 4 * step + 4], np.arange(5))))
    return out


def test_a_cpu_only_tensor_type_keeps_the_model_off_the_gpu(tmp_path, fake_gpu, monkeypatch):
    """A tensor of a type the CUDA backend does not decode (quant_types.CPU_ONLY: MXFP4): device 'cuda' is refused
    with the tensor and its type named, 'auto' runs on the CPU. Shown on a tiny float model with F32 marked CPU-only
    (no MXFP4 model file small enough to write here)."""
    assert "MXFP4" in quant_types.CPU_ONLY and quant_types.get("MXFP4").supported
    path = write_qhead_model(tmp_path / "m.gguf", "llama")
    monkeypatch.setattr(quant_types, "CPU_ONLY", frozenset({"F32"}))
    with GGUFFile(path) as f:
        with pytest.raises(ValueError, match=r"\.weight: tensor type F32 is not supported by the CUDA backend"):
            Model(f, n_blocks=8, threads=1, device="cuda")
        assert Model(f, n_blocks=8, threads=1, device="auto").stages == [("cpu", 0, 2)]


@pytest.mark.parametrize("arch", ["qwen2", "gemma3", "llama"])
def test_cpu_stages_compute_what_one_stage_does(tmp_path, arch):
    """A model cut after its first layer into two CPU stages (the seam a GPU stage sits behind) gives the same
    logits bit for bit as the whole model in one stage, with q4_0 K and V and every KV transform: the hidden
    state crosses intact and each stage's KV cache holds its own layers."""
    path = write_qhead_model(tmp_path / "m.gguf", arch)
    with GGUFFile(path) as f:
        kw = dict(n_blocks=40, threads=2, block_size=4, k_type="q4_0", v_type="q4_0")
        one = Model(f, **kw)
        two = Model(f, placement=[("cpu", 1), ("cpu", 2)], **kw)
        assert one.stages == [("cpu", 0, 2)] and two.stages == [("cpu", 0, 1), ("cpu", 1, 2)]
        assert two.device == "cpu 0-0 + cpu 1-1"
        assert two.kv_bytes == one.kv_bytes
        for a, b in zip(_steps(one), _steps(two)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.model
def test_a_real_model_cut_in_two_cpu_stages_is_unchanged():
    with GGUFFile(model_file(QWEN)) as f:
        one = Model(f, n_blocks=8, threads=2)
        two = Model(f, n_blocks=8, threads=2, placement=[("cpu", 12), ("cpu", 24)])
        ids = [9707, 11, 1879, 0, 3555, 374, 279, 6722]
        np.testing.assert_array_equal(one_sequence(one, ids), one_sequence(two, ids))
        for i, t in enumerate((11, 13, 17)):
            np.testing.assert_array_equal(one_sequence(one, [t], start=8 + i), one_sequence(two, [t], start=8 + i))


@pytest.mark.parametrize(
    "plan,error,match",
    [
        ([("tpu", 2)], ValueError, "unknown device 'tpu'"),
        ([("cpu", 1)], ValueError, "the stages end at layer 1, not at n_layers 2"),
        ([("cpu", 1), ("cpu", 1)], ValueError, r"ends at layer 1, not in \(1, 2\]"),
        ([("cpu", 3)], ValueError, r"ends at layer 3, not in \(0, 2\]"),
    ],
)
def test_bad_placements_are_refused(tmp_path, plan, error, match):
    path = write_qhead_model(tmp_path / "m.gguf", "llama")
    with GGUFFile(path) as f, pytest.raises(error, match=match):
        Model(f, n_blocks=2, threads=1, placement=plan)


@no_gpu
def test_a_cuda_stage_without_a_device_is_a_clear_error(tmp_path):
    path = write_qhead_model(tmp_path / "m.gguf", "llama")
    with GGUFFile(path) as f:
        with pytest.raises(RuntimeError, match="CUDA"):
            Model(f, n_blocks=2, threads=1, placement=[("cuda", 2)])
        with pytest.raises(DeviceUnavailableError, match="device 'cuda' asked for"):
            Model(f, n_blocks=2, threads=1, device="cuda")
        assert Model(f, n_blocks=2, threads=1, device="auto").stages == [("cpu", 0, 2)]


# -- on a GPU -----------------------------------------------------------------------------------------------------

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


def _prompt_logits(model: Model, ids: list[int]) -> np.ndarray:
    """Every row of a prefill, then three decode steps of fixed tokens (the prompt's first three): [len(ids) + 3,
    n_vocab]. Not the model's own greedy tokens: at a near-tie two correct runs pick different ones, and every
    row after that compares different texts (a synthetic twin's argmax after this prompt is such a tie: the CPU's
    avx2 and scalar paths decode different tokens there with some KV settings, and their rows lie 2.6 apart)."""
    rows = [one_sequence(model, ids)]
    for i, tok in enumerate(ids[:3]):
        rows.append(one_sequence(model, [tok], start=len(ids) + i))
    return np.concatenate(rows)


def _assert_top1s(got: np.ndarray, want: np.ndarray, margin: float, what: str) -> None:
    """top-1 equal on every row where the CPU's margin between its first two logits is at least `margin`."""
    for r in range(len(want)):
        top2 = np.argsort(want[r])[-2:]
        if want[r][top2[1]] - want[r][top2[0]] >= margin:
            assert int(np.argmax(got[r])) == int(top2[1]), f"{what}: row {r} top-1 differs"


def _assert_top1_agrees(got: np.ndarray, want: np.ndarray, what: str, second_path=None) -> None:
    """top-1 equal where the CPU's margin is at least 0.1, and every logit within 5% of the largest. With
    second_path (a function giving the same rows by another CPU path, asked only when a row's top-1 differs), a row
    whose CPU margin lies within twice the distance between the two CPU paths is excused: two correct CPU paths can
    disagree there too. On gemma-3-270m's real weights the scalar and avx2 paths lie up to 0.92 apart on a scale
    of 33, and at a row whose avx2 margin is 0.104 the scalar path picks another token (as the device did, run by
    the CUDA emulator, docs/cuda.md)."""
    try:
        _assert_top1s(got, want, 0.1, what)
    except AssertionError:
        if second_path is None:
            raise
        apart = float(np.abs(second_path() - want).max())
        _assert_top1s(got, want, max(0.1, 2 * apart), f"{what} (two CPU paths {apart:.3f} apart)")
    scale = float(np.abs(want).max())
    assert float(np.abs(got - want).max()) < 0.05 * scale, f"{what}: logits far from the CPU's"


def _scalar_logits(f: GGUFFile, ids: list[int]) -> np.ndarray:
    """_prompt_logits by the CPU's scalar path (the default path's second opinion)."""
    native.configure("scalar", native.physical_cores())
    try:
        return _prompt_logits(Model(f, n_blocks=8, threads=2), ids)
    finally:
        native.configure()


def _ids(f: GGUFFile) -> list[int]:
    return Tokenizer.from_metadata(f.metadata, name=str(f.path)).encode(PROMPT)


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_cuda_logits_match_the_cpu(name):
    with GGUFFile(model_file(name)) as f:
        ids = _ids(f)
        cpu = _prompt_logits(Model(f, n_blocks=8, threads=2), ids)
        cuda_model = Model(f, n_blocks=8, threads=2, device="cuda")
        assert cuda_model.stages == [("cuda:0", 0, cuda_model.spec.n_layers)]
        _assert_top1_agrees(_prompt_logits(cuda_model, ids), cpu, f"{name} on cuda", lambda: _scalar_logits(f, ids))


def _assert_quantized_kv_agrees(got: dict, want: dict, what: str) -> None:
    """got, want: {"f16": logits, "q": logits} of one file on the device and on the CPU, f16 KV and the quantized
    KV under test. A correct device can differ from the CPU's quantized run by about re-drawing the KV's rounding
    errors (a row's inputs differ in the last bits, and a value near a rounding boundary lands on the other side),
    whose effect the CPU measures as |q - f16| (err), plus what the device's products alone move (dev, f16 KV).
    On the 0.5B's synthetic twin (random weights) err is 0.16 for q8_0 and 1.2 for q4_0 on a scale of 5.5, and the
    CPU's avx2 and scalar paths, compared as this does, lie 0.12 and 0.47 apart. Top-1s are compared where the
    CPU's margin is beyond what the KV's rounding could move (2 err, at least 0.1)."""
    err = float(np.abs(want["q"] - want["f16"]).max())
    dev = float(np.abs(got["f16"] - want["f16"]).max())
    scale = float(np.abs(want["q"]).max())
    _assert_top1s(got["q"], want["q"], max(0.1, 2 * err), what)
    far = float(np.abs(got["q"] - want["q"]).max())
    assert far <= 2 * err + dev + 0.02 * scale, (
        f"{what}: logits {far:.3f} from the CPU's; the KV type's own effect {err:.3f}, the device's with f16 KV {dev:.3f}"
    )


# (k_type, v_type, transforms turned off): K and V apart, and the transforms off, so that a failure names its part
QUANTIZED_KV = [
    ("q8_0", "q8_0", ()),
    ("q8_0", "f16", ()),
    ("f16", "q8_0", ()),
    ("q8_0", "q8_0", ("kv_rotate", "kv_center", "kv_equalize")),
    ("q4_0", "q4_0", ()),
]


@pytest.fixture(scope="module")
def qwen_f16_kv():
    """{device: the f16-KV logits of QWEN} for "cpu" and "cuda", computed once for the quantized-KV cases."""
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        return {d: _prompt_logits(Model(f, n_blocks=8, threads=2, device=d), ids) for d in ("cpu", "cuda")}


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize(
    "k_type,v_type,off",
    QUANTIZED_KV,
    ids=lambda v: ("no-" + "-".join(o[3:] for o in v) if v else "all") if isinstance(v, tuple) else v,
)
def test_cuda_quantized_kv_matches_the_cpu(k_type, v_type, off, qwen_f16_kv):
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        kw = dict(n_blocks=8, threads=2, k_type=k_type, v_type=v_type, **{o: False for o in off})
        got = {"f16": qwen_f16_kv["cuda"], "q": _prompt_logits(Model(f, device="cuda", **kw), ids)}
        want = {"f16": qwen_f16_kv["cpu"], "q": _prompt_logits(Model(f, **kw), ids)}
        _assert_quantized_kv_agrees(got, want, f"K {k_type} V {v_type} without {off or 'nothing'} on cuda")


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize("gpu_layers", [1, 12, 23])
def test_gpu_layers_split_matches_the_cpu(gpu_layers):
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        cpu = _prompt_logits(Model(f, n_blocks=8, threads=2), ids)
        split = Model(f, n_blocks=8, threads=2, device="cuda", gpu_layers=gpu_layers)
        assert split.stages == [("cuda:0", 0, gpu_layers), ("cpu", gpu_layers, 24)]
        _assert_top1_agrees(_prompt_logits(split, ids), cpu, f"--gpu-layers {gpu_layers}")


@pytest.mark.model
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[gpu, pytest.mark.gpu])])
def test_candidates_are_the_top_of_the_logits(device):
    """forward(top_k=K) returns each row's top K of the logits the same step returns whole (same kernels), in
    sampling's order, padding columns left out; the engine asks for them by default where the head is a GPU's."""
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        pos = np.arange(len(ids))
        table = np.arange(8, dtype=np.int32)[None, :]
        batch = (ids, pos, pos, np.zeros(len(ids), int), table, [len(ids)], np.arange(len(ids)))
        whole = Model(f, n_blocks=8, threads=2, device=device).forward(StepBatch(*batch))
        model = Model(f, n_blocks=8, threads=2, device=device)
        assert model.supports_candidates == (device == "cuda")
        n_valid = model.spec.n_vocab - 7
        cand = model.forward(StepBatch(*batch), top_k=40, n_valid=n_valid)
        want_ids, want_vals = native.testing.top_k(whole, n_valid, 40)
        np.testing.assert_array_equal(cand.ids, want_ids)
        np.testing.assert_array_equal(cand.vals, want_vals)
        with pytest.raises(ValueError, match="top_k must be in"):
            model.forward(StepBatch(*batch), top_k=257)
        with pytest.raises(ValueError, match="n_valid"):
            model.forward(StepBatch(*batch), top_k=4, n_valid=model.spec.n_vocab + 1)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[gpu, pytest.mark.gpu])])
def test_a_launched_step_gives_what_forward_gives(tmp_path, device):
    """Model.launch / collect (the engine's pipelining): a prompt step, then two decode steps launched together
    (the second asking for candidates) and collected in order, give forward's bits; a GPU launches apart from the
    host (through pinned staging slots), the CPU computes at launch. Past two steps in flight, or collecting none, is
    an error. A step fed from the one before (feed) computes what forward computes with its top candidate."""
    path = write_qhead_model(tmp_path / "m.gguf", "qwen2")
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    with GGUFFile(path) as f:
        models = [Model(f, n_blocks=4, threads=2, device=device) for _ in range(2)]
        bs, nb = models[0].block_size, models[0].n_blocks
        table = np.arange(nb - 1, -1, -1, dtype=np.int32)[None, :]

        def step(tokens, start):
            pos = np.arange(start, start + len(tokens))
            slots = table[0, pos // bs] * bs + pos % bs
            return StepBatch(
                tokens, pos, slots, np.zeros(len(tokens), int), table, [start + len(tokens)], [len(tokens) - 1]
            )

        steps = [step(ids, 0), step([7], len(ids)), step([2], len(ids) + 1)]
        forward, launched = models
        assert launched.launches_async == (device == "cuda")
        want = [forward.forward(steps[0]), forward.forward(steps[1]), forward.forward(steps[2], top_k=4)]
        launched.launch(steps[0])
        got = [launched.collect()]
        launched.launch(steps[1])
        launched.launch(steps[2], top_k=4)
        with pytest.raises(RuntimeError, match="2 steps are launched"):
            launched.launch(steps[2])
        with pytest.raises(ValueError, match="top_k must be in"):
            launched.launch(steps[2], top_k=257)
        got += [launched.collect(), launched.collect()]
        with pytest.raises(RuntimeError, match="no step is launched"):
            launched.collect()
        # fed: the next token is the top candidate of the step before's row 0, put in by the device
        with pytest.raises(ValueError, match="outside the vocabulary .* 1 rows fed"):
            launched.launch(step([-2], len(ids) + 2), top_k=4, feed=True)
        launched.launch(step([-1], len(ids) + 2), top_k=4, feed=True)
        got.append(launched.collect())
        want.append(forward.forward(step([int(want[2].ids[0, 0])], len(ids) + 2), top_k=4))
        np.testing.assert_array_equal(got[3].ids, want[3].ids)
        np.testing.assert_array_equal(got[3].vals, want[3].vals)
        for i in range(3, 8):  # fed step after fed step: on a GPU a graph from the shape's second sight on
            launched.launch(step([-1], len(ids) + i), top_k=4, feed=True)
            fed = launched.collect()
            want.append(forward.forward(step([int(want[-1].ids[0, 0])], len(ids) + i), top_k=4))
            np.testing.assert_array_equal(fed.ids, want[-1].ids)
            np.testing.assert_array_equal(fed.vals, want[-1].vals)
        launched.launch(step([5], len(ids) + 8))  # whole rows: nothing to feed the next from
        launched.collect()
        with pytest.raises(ValueError, match="asked for no candidates"):
            launched.launch(step([-1], len(ids) + 9), feed=True)
        for w, g in zip(want[:2], got[:2], strict=True):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got[2].ids, want[2].ids)
        np.testing.assert_array_equal(got[2].vals, want[2].vals)


@pytest.mark.model
@pytest.mark.parametrize(
    "args,match",
    [
        (["--device", "cpu", "--gpu-layers", "4"], "gpu_layers 4 needs device 'cuda' or 'auto'"),
        (["--device", "tpu"], "invalid choice: 'tpu'"),
        (["--gpu-layers", "-2", "--device", "auto"], "gpu_layers must be a non-negative integer"),
    ],
)
def test_device_options_refuse_bad_values(args, match):
    from test_cli import localllm

    r = localllm("run", str(model_file("smollm2-135m-instruct-q4_1")), "-n", "2", *args, "hi")
    assert r.returncode != 0 and match in r.stderr, r.stderr


@pytest.mark.model
@no_gpu
def test_run_on_cuda_without_a_device_says_why():
    from test_cli import localllm

    r = localllm("run", str(model_file("smollm2-135m-instruct-q4_1")), "-n", "2", "--device", "cuda", "hi")
    assert r.returncode == 1
    assert r.stderr.startswith("error: device 'cuda' asked for, but") and "Traceback" not in r.stderr


@gpu
@pytest.mark.gpu
@pytest.mark.model
def test_graph_replay_computes_what_eager_launches_do(monkeypatch):
    """Decode steps replayed from CUDA graphs (a shape's second sight on) give the logits eager launches give,
    bit for bit: the same kernels on the same buffers, over 40 decode steps (positions, slots and angles change
    between replays; the shape does not)."""
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        runs = []
        for graphs in ("0", "1"):
            monkeypatch.setenv("LOCALLLM_CUDA_GRAPHS", graphs)
            model = Model(f, n_blocks=40, threads=2, device="cuda")
            rows = [one_sequence(model, ids)]
            for i in range(40):
                rows.append(one_sequence(model, [int(np.argmax(rows[-1][-1]))], start=len(ids) + i))
            runs.append(np.concatenate(rows))
        np.testing.assert_array_equal(runs[0], runs[1])


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_prompt_logits_alike_in_one_step_chunked_and_token_by_token_on_the_device(name):
    """The CPU's test_batch_invariance on the card: 140 prompt positions (past the decode kernel's 8 rows, the
    graphs' 64 tokens and the attention's first chunk of 128 keys) in one step, in chunks of 5 + 135 and of 3, and
    one token at a time give the same bits (the small steps attend by chunks split over thread blocks, the large
    ones by a block per row and head walking them)."""
    with LLM(model_file(name), ctx_size=256, device="cuda") as llm:
        ids = np.array((llm.tokenize(PROMPT, add_special=False) * 20)[:140], dtype=np.int32)
        n = len(ids)

        def steps(seq):
            whole = seq.step(ids, 0, np.arange(n, dtype=np.int32))
            for cuts in ([0, 5, n], list(range(0, n, 3)) + [n]):
                chunked = np.concatenate(
                    [
                        seq.step(ids[a:b], a, np.arange(b - a, dtype=np.int32))
                        for a, b in zip(cuts[:-1], cuts[1:], strict=True)
                    ]
                )
                assert np.array_equal(chunked, whole), (
                    f"{name}, cuts {cuts[:3]}..: max |diff| {np.abs(chunked - whole).max()}"
                )
            return whole, np.concatenate([seq.step(ids[i : i + 1], i, np.zeros(1, dtype=np.int32)) for i in range(n)])

        whole, decode = llm.exclusive(steps)
        assert np.array_equal(decode, whole), f"{name}, token by token: max |diff| {np.abs(decode - whole).max()}"


def test_a_cpu_stage_has_no_graph(tmp_path):
    path = write_qhead_model(tmp_path / "m.gguf", "llama")
    with GGUFFile(path) as f:
        m = Model(f, n_blocks=2, threads=1)
        one_sequence(m, [1, 2, 3])
        assert m.graph_nodes == [-1]


@gpu
@pytest.mark.gpu
@pytest.mark.model
def test_a_decode_step_launches_at_most_6_kernels_a_layer():
    """The kernels a decode step of Qwen 0.5B (f16 KV) launches, counted in its CUDA graph: per layer q/k/v in one
    launch with their biases, rope of q and k with the K and V writes, attention writing the output product's
    quantized input, that product (added into h) with the next norm and its quantization in its tail, gate and up
    in one launch with act(gate) * up quantized in its tail, down (added into h) with the next layer's norm in its
    tail: 6, from about 24 before the fusions (issue 32 aims at 8); plus the embedding, the first norm and the head.
    The CUDA emulator's graphs count 150 for the 0.5B's 24 layers."""
    with GGUFFile(model_file(QWEN)) as f:
        ids = _ids(f)
        m = Model(f, n_blocks=8, threads=2, device="cuda")
        one_sequence(m, ids)
        for i in range(3):  # a decode shape is captured the second time it is seen
            one_sequence(m, [ids[i]], start=len(ids) + i)
        (nodes,) = m.graph_nodes
        n_layers = m.spec.n_layers
        print(f"decode step: {nodes} kernels, {nodes / n_layers:.1f} a layer")
        assert 0 < nodes <= 6 * n_layers + 8, f"{nodes} kernels for {n_layers} layers"


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize("name", MODEL_NAMES)
@pytest.mark.parametrize("kv", ["f16", "q8_0"])
def test_fused_kernels_give_the_bits_of_the_kernels_apart(name, kv, monkeypatch):
    """Each fusion around the decode kernel claims the float operations of the kernels it replaces: the logits of a
    prefill and three decode steps are the same bits with LOCALLLM_CUDA_FUSE=0 (read when a CUDA stage is made)."""
    with GGUFFile(model_file(name)) as f:
        ids = _ids(f)
        kw = dict(n_blocks=8, threads=2, device="cuda", k_type=kv, v_type=kv)
        fused = _prompt_logits(Model(f, **kw), ids)
        monkeypatch.setenv("LOCALLLM_CUDA_FUSE", "0")
        apart = _prompt_logits(Model(f, **kw), ids)
        bad = np.nonzero(np.any(fused != apart, axis=1))[0]
        assert bad.size == 0, f"{name}, kv {kv}: rows {bad[:5]} differ, max |diff| {np.abs(fused - apart).max()}"


@gpu
@pytest.mark.gpu
@pytest.mark.model
@pytest.mark.parametrize("name", ["smollm2-135m-instruct-q4_1", QWEN])
def test_engine_streams_and_prefix_cache_on_the_device(name):
    """Six greedy requests at once on the GPU give what each gives alone there, and a follow-up that reuses a
    cached prefix gives what it gives cold. Their lengths differ, so the steps shrink from six rows to one as they
    end: each row meets neighbours that come and go and the kernels chosen for each step size. smollm2 first, so
    that the CUDA emulator runs it (19 minutes on a 2-core Zen 3); its prompts are ones its replies do not end at once."""
    prompts = [
        "Once upon a time",
        "The capital of France is",
        "def fibonacci(n):",
        "Name three rivers.",
        "The best way to learn",
        "In 1492,",
    ]
    params = [SamplingParams(temperature=0.0, max_tokens=24 - 3 * i) for i in range(len(prompts))]

    def text(chunks) -> str:
        return "".join(c.text for c in chunks)

    with LLM(model_file(name), ctx_size=1024, parallel=len(prompts), device="cuda") as llm:
        alone = [text(llm.generate(p, sp)) for p, sp in zip(prompts, params)]
        streams = [llm.submit(llm.tokenize(p), sp) for p, sp in zip(prompts, params)]
        assert [text(s) for s in streams] == alone
        follow = prompts[0] + alone[0] + " Then"
        warm = text(llm.generate(follow, params[0]))
    with LLM(model_file(name), ctx_size=1024, device="cuda") as cold_llm:
        assert text(cold_llm.generate(follow, params[0])) == warm


@gpu
@pytest.mark.gpu
@pytest.mark.model
def test_the_engine_pipelined_on_the_device_gives_the_step_by_step_tokens(monkeypatch):
    """On a GPU the engine pipelines by default: greedy decode steps are launched before the step before is
    collected, their tokens fed on the device from its top candidates, graphs replayed. Two replies together give
    the tokens the step-by-step engine (LOCALLLM_PIPELINE=0) gives on the same card. smollm2, so that the CUDA
    emulator runs it in minutes."""
    replies, fed = {}, {}
    for pipeline in ("0", "1"):
        monkeypatch.setenv("LOCALLLM_PIPELINE", pipeline)
        with LLM(model_file("smollm2-135m-instruct-q4_1"), ctx_size=256, parallel=2, device="cuda") as llm:
            params = SamplingParams(temperature=0.0, max_tokens=8)
            streams = [llm.submit(llm.tokenize(p), params) for p in ("Hello there", "Once upon a time")]
            replies[pipeline] = [[t for c in s for t in c.token_ids] for s in streams]
            fed[pipeline] = llm._engine_open().steps_ahead_fed
    assert replies["1"] == replies["0"] and all(len(r) == 8 for r in replies["0"])
    assert fed["0"] == 0 and fed["1"] > 0, fed
