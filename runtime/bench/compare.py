"""llama.cpp side by side: llama-cpp-python, run by the interpreter of its own virtual environment (never
imported here), on the same model, threads, KV type and prompt tokens, in its own process per repetition.

    python = llama_python(None)              # ValueError saying how to make one when there is none
    between, theirs = llama_cpp_rounds(python, path, 2, ids, 128, kv)   # between(rep) runs one repetition
    compare_first_token(path, 2, ours, python, theirs)                   # both times to first token, alternated
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

LLAMA_VENV_HINT = (
    "python -m venv ~/.cache/localllm/llama-venv && "
    "~/.cache/localllm/llama-venv/bin/pip install llama-cpp-python  (builds from source, ~11 min)"
)
FIRST_TOKEN_PROMPT = "def fibonacci(n):"
SCRIPT = str(Path(__file__).resolve().parent / "llama_cpp_script.py")


def llama_python(arg: str | None) -> str:
    """The interpreter that has llama_cpp: arg, $LOCALLLM_LLAMA_PYTHON or ~/.cache/localllm/llama-venv."""
    cand = arg or os.environ.get("LOCALLLM_LLAMA_PYTHON") or str(Path.home() / ".cache/localllm/llama-venv/bin/python")
    try:
        ok = subprocess.run([cand, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except OSError:
        ok = False
    if not ok:
        raise ValueError(
            f"--compare needs llama-cpp-python: {cand} cannot import llama_cpp; make it with: {LLAMA_VENV_HINT}"
        )
    return cand


def bench_llama_cpp(
    python: str,
    path: Path,
    threads: int,
    ids: list[int],
    n_gen: int,
    reps: int,
    ctx: int,
    kv: str,
    depth_ids: list[int] | None = None,
) -> dict:
    """llama.cpp's load_s, pp_tps, tg_tps, peak_rss_mb and version, from its own process (pp and tg after
    depth_ids, as bench_llm)."""
    args = {
        "mode": "bench",
        "model": str(path),
        "threads": threads,
        "n_prompt": len(ids),
        "n_gen": n_gen,
        "reps": reps,
        "ctx": ctx,
        "token_ids": [int(i) for i in ids],
        "depth_ids": [int(i) for i in depth_ids or []],
        "kv": kv,
    }
    r = subprocess.run([python, SCRIPT, json.dumps(args)], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"llama-cpp-python failed on {path.name}: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def first_token_s(cmd: list[str], runs: int = 3) -> float:
    """Best seconds from starting cmd to the first byte on its stdout (the process is then killed)."""
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ)
        try:
            if not p.stdout.read(1):
                raise RuntimeError(f"no output from {' '.join(cmd[:4])} ...")
            best = min(best, time.perf_counter() - t0)
        finally:
            p.kill()
            p.wait()
    return best


def llama_cpp_rounds(
    python: str, path: Path, threads: int, ids: list[int], n_gen: int, kv: dict, depth_ids: list[int] | None = None
) -> tuple[Callable[[int], None], dict]:
    """-> (between, result): between(rep) runs one llama.cpp repetition (its own process; the best pp, tg and
    load are kept, peak RSS is the largest) into result, a dict bench_llama_cpp's keys fill."""
    if kv["k_type"] not in (None, kv["kv_type"]) or kv["v_type"] not in (None, kv["kv_type"]):
        raise ValueError("--compare runs one KV type for K and V: use --kv-type only")
    ctx = len(depth_ids or []) + max(len(ids), n_gen + 1) + 16
    best: dict = {}

    def between(rep: int) -> None:
        lr = bench_llama_cpp(python, path, threads, ids, n_gen, 1, ctx, kv["kv_type"], depth_ids)
        if not best:
            best.update(lr)
            return
        for key in ("pp_tps", "tg_tps"):
            best[key] = max(best[key], lr[key])
        best["load_s"] = min(best["load_s"], lr["load_s"])
        best["peak_rss_mb"] = max(best["peak_rss_mb"], lr["peak_rss_mb"])

    return between, best


def compare_first_token(path: Path, threads: int, ours: dict, python: str, theirs: dict) -> None:
    """Both times from process start to first token (`localllm run` and a llama-cpp-python script), alternated,
    best of five each, into ours["first_token_s"] and theirs["first_token_s"]."""
    run = [sys.executable, "-m", "localllm.cli", "run", str(path), FIRST_TOKEN_PROMPT, "--raw", "-n", "1"]
    run += ["--temperature", "0", "-t", str(threads), "-c", "256"]
    args = {"mode": "first-token", "model": str(path), "threads": threads, "prompt": FIRST_TOKEN_PROMPT, "ctx": 256}
    script = [python, SCRIPT, json.dumps(args)]
    theirs["first_token_s"] = ours["first_token_s"] = float("inf")
    for _ in range(5):  # alternated, best of each: the machine's load drifts between runs
        ours["first_token_s"] = min(ours["first_token_s"], first_token_s(run, 1))
        theirs["first_token_s"] = min(theirs["first_token_s"], first_token_s(script, 1))
