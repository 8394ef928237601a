"""The CPU kernel path a model runs on (model/cpu_path.py): chosen by measurement, forced by LOCALLLM_CPU or
native.configure, remembered per CPU model in the cache directory (the test home's: conftest)."""

from __future__ import annotations

import json

import pytest
from conftest import model_file
from localllm import native
from localllm.model import cpu_path
from localllm.model.architectures import spec_from_gguf
from localllm.model.cpu_path import Timing, pick
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model

SMOL = "smollm2-135m-instruct-q4_1"


def timing(decode_tok_s: float, prompt_tok_s: float) -> Timing:
    return Timing(1 / decode_tok_s, 1 / prompt_tok_s, decode_bytes=10**9)


def test_the_choice_serves_a_request_soonest_among_paths_that_decode_near_the_fastest():
    # the AMD Zen 4 of the issue (0.5B, 2 threads): AVX-512 prefills faster but decodes at 0.42x: AVX2
    assert pick({"avx2": timing(63.0, 319), "avx512": timing(26.2, 530)}) == "avx2"
    # the developers' Xeon: AVX-512 is faster at both
    assert pick({"avx2": timing(25.0, 250), "avx512": timing(40.0, 490)}) == "avx512"
    # the 16-core Xeon host: decode 144 vs 139 tok/s, prefill 1069 vs 1729: the request is sooner on AVX-512
    assert pick({"avx2": timing(144.0, 1069), "avx512": timing(139.0, 1729)}) == "avx512"
    # a path whose prompt speed would win the request but decodes 1.3x slower than the fastest is never chosen
    assert pick({"avx2": timing(50.0, 100), "avx512": timing(38.0, 10_000)}) == "avx2"
    assert pick({"scalar": timing(5.0, 20)}) == "scalar"


def test_a_forced_path_is_taken_without_measuring(monkeypatch):
    monkeypatch.setattr(cpu_path, "measure", lambda *a, **k: pytest.fail("measured a forced path"))
    try:
        native.configure(path="scalar")
        assert native.forced_path() == "scalar"
        assert cpu_path.choose(None, None, 2) == "scalar"
    finally:
        native.configure()
    assert native.forced_path() is None  # LOCALLLM_CPU is not set in the tests


def test_time_products_refuses_bad_arguments():
    with pytest.raises(ValueError, match="unknown CPU path 'sse9'"):
        native.time_products("sse9", [], 1, 1, 1)
    with pytest.raises(ValueError, match="n and reps must be positive"):
        native.time_products("scalar", [], 0, 1, 1)
    with pytest.raises(ValueError, match="threads must be between 1 and 1024"):
        native.time_products("scalar", [], 1, 1, 0)


@pytest.mark.model
def test_the_choice_is_measured_once_remembered_and_taken_by_the_model(monkeypatch):
    """Two runnable paths stand for a machine with a choice (scalar and the best here): the measurement picks the
    faster, writes it to the cache, and later loads (this process, or another with an empty memo) read it back."""
    best = native.available_paths()[-1]
    if best == "scalar":
        pytest.skip("this machine runs only the scalar path: no choice to make")
    monkeypatch.setattr(cpu_path, "candidates", lambda: ["scalar", best])
    monkeypatch.setattr(cpu_path, "_memo", {})
    measured = []
    real_measure = cpu_path.measure

    def counting(*a, **k):
        out = real_measure(*a, **k)
        measured.append(out)
        return out

    monkeypatch.setattr(cpu_path, "measure", counting)
    with GGUFFile(model_file(SMOL)) as f:
        spec = spec_from_gguf(f)
        assert cpu_path.choose(f, spec, 2) == best
        (timings,) = measured
        assert timings[best].decode_s < timings["scalar"].decode_s and timings[best].decode_gbps > 0
        data = json.loads(cpu_path.cache_file().read_text())
        (entry,) = data.values()
        assert entry["path"] == best and set(entry["timings"]) == {"scalar", best}
        model = Model(f, n_blocks=4, threads=2, spec=spec)
        assert model.cpu_path == best and len(measured) == 1  # the process's memo
        monkeypatch.setattr(cpu_path, "_memo", {})
        assert cpu_path.choose(f, spec, 2) == best and len(measured) == 1  # the cache file
        cpu_path.cache_file().write_text("{not json")
        monkeypatch.setattr(cpu_path, "_memo", {})
        assert cpu_path.choose(f, spec, 2) == best and len(measured) == 2  # a damaged file: measured again
        assert json.loads(cpu_path.cache_file().read_text())  # and rewritten whole
        assert Model(f, n_blocks=4, threads=2, spec=spec, cpu_path="scalar").cpu_path == "scalar"
