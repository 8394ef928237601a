"""The host's share of a generated token, for planning the GPU's decode (docs/cuda.md): what the engine, the
sampler, the detokenizer and the stream cost per token with the forward step stubbed out, with whole logits rows
and with the step's candidates (localllm.model.candidates); and, with the real step, whether candidates pay on the CPU.

    python -m localllm.bench.host MODEL.gguf [--tokens 512] [--reps 3] [--streams 1,4,16] [--device-ms 1.0]
                                             [--readers threads|asyncio]

Stubbed: the forward returns a fixed row (or K candidates) whose argmax moves each step, so every token is a new
one and nothing else runs; one stream, then greedy candidate replies from --streams clients admitted together (a
reader thread each, or with --readers asyncio coroutines on one event loop, as serve reads them), the host's time
per step of that many rows (what a GPU step of N rows has beside it, docs/cuda.md).
Pipelined: the same replies over a stand-in device whose every step takes --device-ms of wall time apart from the
host (launch returns at once, collect waits for it), the engine step by step and pipelined (engine.py), alternated:
what pipelining leaves of the host's share. Real: greedy and top-k 40 replies of 96 tokens from the same prompt
with the engine asking for candidates and not, alternated, tokens/s after the first token, best of --reps.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections import deque

import numpy as np

from ..llm import LLM
from ..model.candidates import Candidates
from ..sampling import SamplingParams

CHAINS = {
    "greedy": dict(temperature=0.0),
    "top_k 40": dict(temperature=0.8, top_k=40, seed=1),
    "top_p 0.95 only": dict(temperature=0.8, top_k=0, top_p=0.95, seed=1),
}


def _stub(n_vocab: int):
    """A forward that returns, for every logits row, a row (or top_k candidates) peaking at a token that moves with
    the step's last position."""
    row = np.random.default_rng(0).standard_normal(n_vocab).astype(np.float32)

    def forward(batch, top_k=0, n_valid=None):
        rows = batch.logits_rows
        peak = int(batch.positions[-1]) % 1000 + 200
        if top_k:
            ids = np.tile(np.arange(top_k, dtype=np.int32), (len(rows), 1))
            ids[:, 0] = peak
            return Candidates(ids, np.tile(-np.arange(top_k, dtype=np.float32), (len(rows), 1)))
        out = np.tile(row, (len(rows), 1))
        out[:, peak] += 50
        return out

    return forward


def _reply(llm: LLM, params: SamplingParams) -> tuple[int, float, float]:
    """(tokens, seconds from the request to the last token, seconds from the first token to the last) of one reply
    from an empty prefix cache. With a stubbed step the engine runs ahead of the reader, so only the first is its
    time."""
    llm.reset_caches()
    t0, first, n = time.perf_counter(), None, 0
    for chunk in llm.generate("def quicksort(arr):", params):
        first = first or time.perf_counter()
        n += len(chunk.token_ids)
    end = time.perf_counter()
    return n, end - t0, end - first


def stubbed(path, tokens: int, reps: int) -> dict:
    """{(chain, "whole rows" | "candidates"): ms per token} with the forward stubbed."""
    out = {}
    with LLM(path, ctx_size=tokens + 64, speculative="off") as llm:
        llm.model.forward = _stub(llm.n_vocab)
        for chain, kw in CHAINS.items():
            for mode in ("whole rows", "candidates"):
                llm.model.supports_candidates = mode == "candidates"
                best = float("inf")
                for _ in range(reps):
                    n, s, _ = _reply(llm, SamplingParams(max_tokens=tokens, ignore_eos=True, **kw))
                    best = min(best, s / n * 1e3)
                out[(chain, mode)] = best
    return out


def _read(stream, i: int, got: list[int]) -> None:
    for chunk in stream:
        got[i] += len(chunk.token_ids)


def _together(llm: LLM, prompts: list[list[int]], params: SamplingParams) -> list:
    """The streams of prompts, admitted by the engine in one batch: it is held between two steps (an inspect call
    waiting on an event) while they are queued, so that every decode step carries all of them."""
    hold, held = threading.Event(), threading.Event()

    def wait(_):
        held.set()
        hold.wait()

    holder = threading.Thread(target=llm._engine_open().inspect, args=(wait,))
    holder.start()
    held.wait()
    try:
        return [llm.submit(ids, params) for ids in prompts]
    finally:
        hold.set()
        holder.join()


class StandInDevice:
    """A device for the host's benchmarks: a step launched takes `ms` of wall time once the steps before it are
    done, apart from the host (launch returns at once); collect() waits for it (sleeping: the GIL is free, as the
    native collect frees it) and returns what `step` (a stub forward) gave. forward() is launch then collect."""

    def __init__(self, step, ms: float):
        self.step, self.seconds = step, ms / 1e3
        self.free_at = 0.0
        self.queue: deque = deque()
        self.steps = 0

    def launch(self, batch, top_k=0, n_valid=None, feed=False) -> None:  # fed tokens: the stub reads none
        self.free_at = max(time.perf_counter(), self.free_at) + self.seconds
        self.queue.append((self.free_at, self.step(batch, top_k, n_valid)))
        self.steps += 1

    def collect(self):
        done, result = self.queue.popleft()
        while (left := done - time.perf_counter()) > 0:  # the last 0.3 ms yielding, not asleep (a sleep overshoots)
            time.sleep(left - 3e-4 if left > 4e-4 else 0)
        return result

    def forward(self, batch, top_k=0, n_valid=None):
        self.launch(batch, top_k, n_valid)
        return self.collect()


READERS = ("threads", "asyncio")


def _decode_together(llm: LLM, n: int, params: SamplingParams, readers: str = "threads") -> float:
    """Seconds from n greedy replies' requests (admitted together, from an empty prefix cache) to their last
    tokens, read by a thread each, or by a coroutine each on one event loop (readers "asyncio")."""
    llm.reset_caches()
    got = [0] * n
    prompts = [llm.tokenize(f"def quicksort_{i}(arr):") for i in range(n)]
    t0 = time.perf_counter()
    if readers == "asyncio":

        async def read(stream, i: int) -> None:
            async for chunk in stream:
                got[i] += len(chunk.token_ids)

        async def main() -> None:
            await asyncio.gather(*(read(s, i) for i, s in enumerate(_together(llm, prompts, params))))

        asyncio.run(main())
        return time.perf_counter() - t0
    clients = [threading.Thread(target=_read, args=(s, i, got)) for i, s in enumerate(_together(llm, prompts, params))]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    return time.perf_counter() - t0


def _stand_in(llm: LLM, ms: float, tokens: int) -> tuple[StandInDevice, SamplingParams]:
    """The model's steps replaced by StandInDevice(ms) over the stub, candidates asked for; greedy replies' params."""
    device = StandInDevice(_stub(llm.n_vocab), ms)
    llm.model.forward, llm.model.launch, llm.model.collect = device.forward, device.launch, device.collect
    llm.model.supports_candidates = True
    return device, SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0.0)


def streams(path, tokens: int, reps: int, counts: list[int], readers: str = "threads") -> dict:
    """{n: (ms per step, steps)} of n greedy candidate replies decoded together, the forward stubbed: the wall time
    from the requests to the last token over the decode steps the engine ran (each carrying all n rows: the
    requests are admitted together; read as `readers` says: _decode_together), best of reps."""
    out = {}
    # a pool that holds every reply whole (the context is the pool's size): none is preempted and recomputed
    with LLM(path, ctx_size=max(counts) * (tokens + 64), parallel=max(counts), speculative="off") as llm:
        device, params = _stand_in(llm, 0.0, tokens)  # a device that takes no time: the host's alone
        for n in counts:
            best = (float("inf"), 0)
            for _ in range(reps):
                device.steps = 0
                seconds = _decode_together(llm, n, params, readers)
                best = min(best, (seconds / device.steps * 1e3, device.steps))
            out[n] = best
    return out


def pipelined(path, tokens: int, reps: int, counts: list[int], device_ms: float, readers: str = "threads") -> dict:
    """{(n, pipeline): (ms per step, steps)} of n greedy candidate replies decoded together over StandInDevice(ms)
    (as streams()), the engine step by step (False) and pipelined (True), alternated, best of reps."""
    out: dict = {}
    with LLM(path, ctx_size=max(counts) * (tokens + 64), parallel=max(counts), speculative="off") as llm:
        device, params = _stand_in(llm, device_ms, tokens)
        engine = llm._engine_open()
        for n in counts:
            for _ in range(reps):
                for pipeline in (False, True):
                    engine.pipeline = pipeline
                    device.steps = 0
                    ms = _decode_together(llm, n, params, readers) / device.steps * 1e3
                    out[(n, pipeline)] = min(out.get((n, pipeline), (float("inf"), 0)), (ms, device.steps))
    return out


def real(path, reps: int) -> dict:
    """{(chain, mode): tokens/s} with the real step, whole rows and candidates alternated."""
    out: dict = {}
    with LLM(path, ctx_size=512, speculative="off") as llm:
        for _ in range(reps):
            for chain in ("greedy", "top_k 40"):
                for mode in ("whole rows", "candidates"):
                    llm.model.supports_candidates = mode == "candidates"
                    n, _, s = _reply(llm, SamplingParams(max_tokens=96, ignore_eos=True, **CHAINS[chain]))
                    out[(chain, mode)] = max(out.get((chain, mode), 0.0), (n - 1) / s)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m localllm.bench.host", description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--streams", default="1,4,16", help="comma-separated counts of replies decoded together")
    p.add_argument("--device-ms", type=float, default=1.0, help="the stand-in device's time a step (pipelined)")
    p.add_argument("--readers", choices=READERS, default="threads", help="how the replies are read (asyncio: as serve)")
    a = p.parse_args(argv)
    if a.tokens < 2 or a.reps < 1 or not a.device_ms > 0:
        p.error("--tokens must be at least 2, --reps and --device-ms positive")
    try:
        counts = [int(x) for x in a.streams.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        p.error(f"--streams must be positive counts separated by commas, got {a.streams!r}")
    print("host cost per token, forward stubbed (ms):")
    for (chain, mode), ms in stubbed(a.model, a.tokens, a.reps).items():
        print(f"  {chain:<16} {mode:<11} {ms:.3f}")
    print(f"host cost per step of n greedy candidate rows read by {a.readers}, forward stubbed (ms):")
    for n, (ms, steps) in streams(a.model, a.tokens, a.reps, counts, a.readers).items():
        print(f"  {n:>3} streams  {ms:.3f} a step, {ms / n:.3f} a token ({steps} steps of {n} rows)")
    print(f"a step of n greedy candidate rows over a stand-in device of {a.device_ms} ms a step (ms):")
    piped = pipelined(a.model, a.tokens, a.reps, counts, a.device_ms, a.readers)
    for n in counts:
        (seq_ms, steps), (pipe_ms, _) = piped[(n, False)], piped[(n, True)]
        print(
            f"  {n:>3} streams  step by step {seq_ms:.3f}, pipelined {pipe_ms:.3f} "
            f"(the host's share {seq_ms - a.device_ms:.3f} -> {pipe_ms - a.device_ms:.3f}; {steps} steps)"
        )
    print("the real step on this CPU (tokens/s, best of alternated runs):")
    for (chain, mode), tps in real(a.model, a.reps).items():
        print(f"  {chain:<16} {mode:<11} {tps:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
