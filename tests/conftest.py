"""Shared fixtures: the real test models (models/fetch_test_models.py) and the llama.cpp reference data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
REFERENCE = Path(os.environ.get("LOCALLLM_REFERENCE", REPO.parent / "shared" / "reference"))
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


def reference(name: str) -> dict:
    p = REFERENCE / f"{name}.json"
    if not p.exists():
        pytest.skip(f"reference data {p} not present")
    return json.loads(p.read_text())


@pytest.fixture(params=MODEL_NAMES)
def any_model(request) -> Path:
    return model_file(request.param)
