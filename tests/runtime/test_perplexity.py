"""Perplexity computed as llama.cpp computes it, within 1% of its recorded figure (f16 KV)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import MODEL_NAMES, REFERENCE, model_file
from localllm.llm import LLM
from localllm.perplexity import perplexity


def llama_cpp_ppl(name: str, kv: str = "f16") -> float:
    p = REFERENCE / "perplexity.json"
    if not p.exists():
        pytest.skip(f"reference data {p} not present")
    data = json.loads(p.read_text())
    return next(r["ppl"] for r in data["results"] if r["model"] == name and r["kv"] == kv)


def text() -> str:
    p = REFERENCE / "texts" / "argparse.py.txt"
    if not p.exists():
        pytest.skip(f"reference text {p} not present")
    return p.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_perplexity_matches_llama_cpp(name):
    want = llama_cpp_ppl(name)
    with LLM(model_file(name), n_threads=2, ctx_size=512) as llm:
        r = perplexity(llm, text(), ctx=512, max_chunks=4)
    assert r.chunks == 4
    assert r.scored == 4 * (510 if llm.tokenizer.add_bos else 511)
    assert abs(r.ppl / want - 1) < 0.01, f"{name}: {r.ppl:.4f} vs llama.cpp {want:.4f}"


def test_perplexity_cli_and_errors(tmp_path):
    path = model_file("smollm2-135m-instruct-q4_1")
    out = subprocess.run([sys.executable, "-m", "localllm.cli", "perplexity", str(path),
                          str(REFERENCE / "texts" / "argparse.py.txt"), "--chunks", "1", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["chunks"] == 1
    short = tmp_path / "short.txt"
    short.write_text("too short")
    bad = subprocess.run([sys.executable, "-m", "localllm.cli", "perplexity", str(path), str(short)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "fewer than one chunk" in bad.stderr
