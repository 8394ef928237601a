"""Shared fixtures: the real test models (models/fetch_test_models.py), the llama.cpp reference data
(tests/reference/, or $LOCALLLM_REFERENCE), and the isolation every test runs in: no test sees the user's
store, caches, settings or tokens, and none can reach a model hub."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("LOCALLLM_REFERENCE") or Path(__file__).resolve().parent / "reference")
MODEL_NAMES = [
    "smollm2-135m-instruct-q4_1",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "gemma-3-270m-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
]


def model_cache() -> Path:
    env = os.environ.get("LOCALLLM_TEST_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "localllm" / "test-models"


def model_file(name: str) -> Path:
    """Path of a test model; skips the test when it has not been fetched."""
    p = model_cache() / f"{name}.gguf"
    if not p.exists():
        pytest.skip(f"test model {name} not fetched (run: python models/fetch_test_models.py {name})")
    return p


def cuda_devices() -> list:
    """The CUDA devices this build sees (localllm.backends()); empty without the CUDA build, a driver or a GPU."""
    from localllm import backends

    return backends()["cuda"]["devices"]


# a test that runs on a CUDA GPU (with pytest.mark.gpu, which `pytest -m gpu` selects): skipped without one
gpu = pytest.mark.skipif(not cuda_devices(), reason="no CUDA GPU (or driver) on this machine")
# a test of what happens without a GPU (clean errors): skipped where there is one
no_gpu = pytest.mark.skipif(bool(cuda_devices()), reason="a CUDA device is present")


def reference(name: str) -> dict:
    """llama.cpp's recorded outputs on test model `name` (tests/reference/README.md); they ship with the repo."""
    return json.loads((REFERENCE / f"{name}.json").read_text())


# Every variable through which localllm, the TUI or a hub client finds the user's files, credentials or network.
_POINTED = ("LOCALLLM_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "HF_HOME")
_REMOVED = ("LOCALLLM_CATALOG", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_CACHE", "HF_HUB_OFFLINE")


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory):
    """Points every localllm path at a fresh temporary directory for each test, and the hub at a closed port.

    It patches with its own MonkeyPatch, so a test's `monkeypatch.undo()` cannot lift it; a test that needs a
    particular home sets LOCALLLM_HOME (or the others) itself, over this one. Child processes inherit it."""
    root = tmp_path_factory.mktemp("isolated-home")
    mp = pytest.MonkeyPatch()
    for name in _POINTED:
        mp.setenv(name, str(root / name.lower()))
    for name in _REMOVED:
        mp.delenv(name, raising=False)
    mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: a test that forgot its fake hub fails at once
    yield root
    mp.undo()


@pytest.fixture(params=MODEL_NAMES)
def any_model(request) -> Path:
    return model_file(request.param)
