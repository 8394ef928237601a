"""`localllm bench serve MODEL`: a live server driven over HTTP by concurrent clients with an editor's mixed
workload, and (with --compare) llama-cpp-python's server on the same model and workload in the same run.

    servers = [local_server(path, threads, ctx), llama_cpp_server(python, path, threads, ctx)]
    with servers[0] as url: r = drive(url, model, clients=4, seconds=...)
    # r: {"clients", "requests", "ttft_p50_s", "ttft_p95_s", "aggregate_tps", "errors"}
    overhead_ms = stream_overhead(path, threads)   # serve's own time per streamed token (HTTP vs in-process)
    overhead(path, threads)      # {"wall_ms", "loop_cpu_ms"}: that, and the server's event-loop CPU per token

    python -m localllm.bench.serve MODEL.gguf [--threads N] [--reps N]   # prints overhead(); run it alternately

Workload, per client, in a loop: a chat turn about a source file (~600 tokens of it) and its follow-up turn
(the history re-sent: the prefix cache's case), then a fill-in-the-middle request on a ~900-token file with
the cursor moved a little each time (an editor re-sending almost the same file). Every request streams (SSE)
and asks for at most 32 tokens (greedy): time to first token is to the first content, tokens/s counts every
streamed token of every client over the level's wall time, which runs until every client's request in flight has
ended (llama-cpp-python's server serves one request at a time: its queue drains well past --level-seconds). Both
servers get the same requests.
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
    with _started(cmd, port, env, ready) as (url, _proc):
        yield url


@contextlib.contextmanager
def _started(cmd: list[str], port: int, env: dict | None, ready: str) -> Iterator[tuple[str, subprocess.Popen]]:
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
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def local_server(path: Path, threads: int, ctx: int, parallel: int = 8):
    port = _free_port()
    return _process(_local_cmd(path, threads, ctx, parallel, port), port)


def _local_cmd(path: Path, threads: int, ctx: int, parallel: int, port: int) -> list[str]:
    return [
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
        # its default (True) stops the request streaming whenever another waits for the model: the stream gets
        # [DONE] and the connection is closed without its last chunk (httpx: incomplete chunked read), which cut 3
        # of 4 clients at the first overlap. False: requests queue for the model one at a time, as a client expects
        "--interrupt_requests",
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


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CODE_ASKS = [
    "Write a Python function that adds two numbers. Reply with a code block only.",
    "Write a Python function that reverses a string. Reply with a code block only.",
    "Write a Python function that checks whether a number is even. Reply with a code block only.",
]


def tools_ttft(url: str, model: str, reps: int = 3) -> dict:
    """Time to the first visible content of chat replies that open a code block, with a tool offered and without,
    alternated, one client (the prefix cache warmed by a first untimed pass): {"with_tools_s", "without_s"}, the
    medians. With tools the server holds back text that may still be a tool call; a code block must not wait."""
    times: dict[str, list[float]] = {"with_tools_s": [], "without_s": []}
    with httpx.Client(base_url=url, timeout=600) as client:
        for rep in range(reps + 1):
            for ask in CODE_ASKS:
                for key, extra in (("with_tools_s", {"tools": [WEATHER_TOOL]}), ("without_s", {})):
                    body = {"model": model, "messages": [{"role": "user", "content": ask}], **extra}
                    ttft, _ = _stream(client, "/v1/chat/completions", body)
                    if rep:
                        times[key].append(ttft)
    return {k: float(np.median(v)) for k, v in times.items()}


COUNT_ASK = "Count from 1 to 300 as a JSON array of numbers, nothing else."
COUNT_SCHEMA = {"type": "array", "items": {"type": "integer"}}


def _decode_tps(client: httpx.Client, body: dict) -> float:
    """Streamed tokens per second after the first, of one streamed chat reply."""
    times = []
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                choice = (json.loads(line[6:]).get("choices") or [{}])[0]
                if (choice.get("delta") or {}).get("content"):
                    times.append(time.perf_counter())
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 2 else 0.0


def structured_tps(url: str, model: str, reps: int = 3, n_tokens: int = 128) -> dict:
    """Decode tokens/s of one client's reply under a JSON Schema (an array of integers: the model counts) and of the
    same request unconstrained, alternated, greedy, no drafts, n_tokens each (a first pass untimed): {"structured_tps",
    "plain_tps"}, the medians. What the grammar's mask and bookkeeping cost per token."""
    tps: dict[str, list[float]] = {"structured_tps": [], "plain_tps": []}
    body = {
        "model": model,
        "messages": [{"role": "user", "content": COUNT_ASK}],
        "max_tokens": n_tokens,
        "temperature": 0,
        "speculative": "off",  # counting drafts well: fewer steps would hide the mask's cost per token
    }
    fmt = {"response_format": {"type": "json_schema", "json_schema": {"name": "count", "schema": COUNT_SCHEMA}}}
    with httpx.Client(base_url=url, timeout=600) as client:
        for rep in range(reps + 1):
            for key, extra in (("structured_tps", fmt), ("plain_tps", {})):
                v = _decode_tps(client, {**body, **extra})
                if rep:
                    tps[key].append(v)
    return {k: float(np.median(v)) for k, v in tps.items()}


def stream_overhead(path: Path, threads: int, n_tokens: int = 96, reps: int = 5) -> float:
    """serve's own cost per streamed token, in ms: overhead()'s wall_ms."""
    return overhead(path, threads, n_tokens, reps)["wall_ms"]


def overhead(path: Path, threads: int, n_tokens: int = 96, reps: int = 5) -> dict:
    """serve's own cost per streamed token, two ways:
    wall_ms: a greedy completion streamed over HTTP from a serve process against the same completion read in this
    process from an LLM's engine, alternated, best of reps each (the server idles while the in-process run
    computes, and the other way round). It is what a client feels, and as noisy as the machine.
    loop_cpu_ms: the CPU time of the server's main thread (the event loop: HTTP, JSON, SSE, the hand-off from the
    engine thread) per streamed token over the HTTP runs, read from /proc (None elsewhere). On a machine whose
    cores the compute threads fill, that time is taken from them; other processes' load hardly moves it."""
    from ..llm import LLM

    ids = [750, 75698, 1445, 982]
    body = {"prompt": ids, "max_tokens": n_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    http_s = local_s = float("inf")
    loop_cpu: list[float] = []
    port = _free_port()
    with (
        _started(_local_cmd(path, threads, 512, 1, port), port, None, "/health") as (url, proc),
        httpx.Client(base_url=url, timeout=300) as client,
        LLM(path, n_threads=threads, ctx_size=512) as llm,
    ):
        ids = [t % llm.n_vocab for t in ids]
        for _ in range(reps):
            cpu0, t0 = _thread_cpu(proc.pid), time.perf_counter()
            with client.stream("POST", "/v1/completions", json={**body, "prompt": ids}) as r:
                for _line in r.iter_lines():
                    pass
            http_s = min(http_s, time.perf_counter() - t0)
            cpu1 = _thread_cpu(proc.pid)
            if cpu0 is not None and cpu1 is not None:
                loop_cpu.append(cpu1 - cpu0)
            t0 = time.perf_counter()
            for _chunk in llm.generate(ids, temperature=0, max_tokens=n_tokens, ignore_eos=True):
                pass
            local_s = min(local_s, time.perf_counter() - t0)
    return {
        "wall_ms": (http_s - local_s) / n_tokens * 1e3,
        "loop_cpu_ms": sum(loop_cpu) / (len(loop_cpu) * n_tokens) * 1e3 if loop_cpu else None,
    }


def _thread_cpu(pid: int) -> float | None:
    """CPU seconds of process pid's main thread (Linux's schedstat: nanoseconds on the CPU), or None."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m localllm.bench.serve", description=overhead.__doc__)
    parser.add_argument("model", type=Path, help="a .gguf file")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=96)
    a = parser.parse_args()
    r = overhead(a.model, a.threads, a.tokens, a.reps)
    cpu = "n/a" if r["loop_cpu_ms"] is None else f"{r['loop_cpu_ms']:.3f}"
    print(
        f"serve's overhead per streamed token: {r['wall_ms']:.3f} ms wall (HTTP vs in-process), {cpu} ms event-loop CPU"
    )
