"""`localllm bench serve MODEL`: a live server driven over HTTP by concurrent clients with an editor's mixed
workload, and (with --compare) llama-cpp-python's server on the same model and workload in the same run.

    servers = [local_server(path, threads, ctx), llama_cpp_server(python, path, threads, ctx)]
    with servers[0] as url: r = drive(url, model, clients=4, seconds=...)
    # r: {"clients", "requests", "ttft_p50_s", "ttft_p95_s", "aggregate_tps", "errors"}
    overhead_ms = stream_overhead(path, threads)   # serve's own time per streamed token (HTTP vs in-process)

Workload, per client, in a loop: a chat turn about a source file (~600 tokens of it) and its follow-up turn
(the history re-sent: the prefix cache's case), then a fill-in-the-middle request on a ~900-token file with
the cursor moved a little each time (an editor re-sending almost the same file). Every request streams (SSE)
and asks for at most 32 tokens (greedy): time to first token is to the first content, tokens/s counts every
streamed token of every client over the level's wall time. Both servers get the same requests.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np

from .. import __file__ as _package_file

MAX_TOKENS = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _source(name: str, n_chars: int) -> str:
    """A real source file of this package (code an editor would send), cut to about n_chars characters."""
    text = (Path(_package_file).parent / name).read_text()
    return text[:n_chars]


@contextlib.contextmanager
def _process(cmd: list[str], port: int, env: dict | None = None, ready: str = "/health") -> Iterator[str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd[:4])} ... exited: {proc.stderr.read()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + ready, timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready in 300 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def local_server(path: Path, threads: int, ctx: int, parallel: int = 8):
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "localllm.cli",
        "serve",
        str(path),
        "--port",
        str(port),
        "-t",
        str(threads),
        "-c",
        str(ctx),
        "--parallel",
        str(parallel),
    ]
    return _process(cmd, port)


def llama_cpp_server(python: str, path: Path, threads: int, ctx: int):
    port = _free_port()
    cmd = [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        str(path),
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(ctx),
        "--verbose",
        "False",
    ]
    return _process(cmd, port, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, ready="/v1/models")


def _stream(client: httpx.Client, route: str, body: dict) -> tuple[float, int]:
    """(time to first content, tokens streamed) of one streamed request."""
    t0 = time.perf_counter()
    first, n = None, 0
    with client.stream("POST", route, json={**body, "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = (json.loads(line[6:]).get("choices") or [{}])[0]
            text = choice.get("text") or (choice.get("delta") or {}).get("content")
            if text:
                n += 1
                if first is None:
                    first = time.perf_counter() - t0
    return (first if first is not None else time.perf_counter() - t0), n


def _client_loop(url: str, model: str, index: int, stop_at: float, out: list, errors: list) -> None:
    code = _source("engine/scheduler.py", 2400 + 40 * index)
    file = _source("engine/block_manager.py", 3600)
    with httpx.Client(base_url=url, timeout=600) as client:
        turn = 0
        while time.perf_counter() < stop_at:
            try:
                history = [{"role": "user", "content": f"Explain what this code does:\n\n{code}"}]
                out.append(_stream(client, "/v1/chat/completions", {"model": model, "messages": history}))
                follow = [
                    *history,
                    {"role": "assistant", "content": "It schedules engine steps."},
                    {"role": "user", "content": f"What does line {turn + 3} do?"},
                ]
                out.append(_stream(client, "/v1/chat/completions", {"model": model, "messages": follow}))
                cut = len(file) // 2 + 37 * (turn + index)
                out.append(
                    _stream(client, "/v1/completions", {"model": model, "prompt": file[:cut], "suffix": file[cut:]})
                )
            except (httpx.HTTPError, ValueError) as e:
                errors.append(f"{type(e).__name__}: {e}")
                return
            turn += 1


def drive(url: str, model: str, clients: int, seconds: float) -> dict:
    """clients threads running the workload until `seconds` pass (each finishes its request in flight)."""
    results: list[tuple[float, int]] = []
    errors: list[str] = []
    t0 = time.perf_counter()
    threads = [
        threading.Thread(target=_client_loop, args=(url, model, i, t0 + seconds, results, errors))
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttft = np.array([r[0] for r in results]) if results else np.array([np.nan])
    return {
        "clients": clients,
        "requests": len(results),
        "ttft_p50_s": float(np.percentile(ttft, 50)),
        "ttft_p95_s": float(np.percentile(ttft, 95)),
        "aggregate_tps": sum(r[1] for r in results) / wall,
        "errors": errors[:3],
    }


def stream_overhead(path: Path, threads: int, n_tokens: int = 96, reps: int = 5) -> float:
    """serve's own cost per streamed token, in ms: a greedy completion streamed over HTTP from a serve process
    against the same completion read in this process from an LLM's engine, alternated, best of reps each (the
    server idles while the in-process run computes, and the other way round)."""
    from ..llm import LLM

    ids = [750, 75698, 1445, 982]
    body = {"prompt": ids, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    http_s = local_s = float("inf")
    with (
        local_server(path, threads, 512, parallel=1) as url,
        httpx.Client(base_url=url, timeout=300) as client,
        LLM(path, n_threads=threads, ctx_size=512) as llm,
    ):
        ids = [t % llm.n_vocab for t in ids]
        for _ in range(reps):
            t0 = time.perf_counter()
            with client.stream("POST", "/v1/completions", json={**body, "prompt": ids}) as r:
                for _line in r.iter_lines():
                    pass
            http_s = min(http_s, time.perf_counter() - t0)
            t0 = time.perf_counter()
            for _chunk in llm.generate(ids, temperature=0, max_tokens=n_tokens, ignore_eos=True):
                pass
            local_s = min(local_s, time.perf_counter() - t0)
    return (http_s - local_s) / n_tokens * 1e3
