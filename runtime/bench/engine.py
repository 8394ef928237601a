"""The engine under load, through the public contract (LLM.generate from many threads at once):

    levels = parallel_levels(path, threads=2, levels=[1, 2, 4, 8], n_prompt=64, n_gen=64)
    # {N: {"aggregate_tps", "stream_tps", "ttft_s", "step_ms"}}: N clients submit at once, distinct prompts
    turns = multi_turn(path, threads=2, n_history=1500, n_follow=32, reps=3)
    # {"cold_ttft_s", "warm_ttft_s", "cached_tokens", "speedup"}: a follow-up turn's first token with the
    # conversation's KV in the prefix cache, and with the cache dropped (a cold prefill of the same prompt)

aggregate_tps: tokens generated after each stream's first token, over the time from the first first token to
the last stream's end (all streams decoding together: what N streams share). stream_tps: the mean of the
streams' own decode rates. ttft_s: the mean time from submission to first token (prefills run in chunks beside
each other under the step budget). Speculation is off (batching alone). Prompts are random token ids (bench/model.py prompt_ids), a different seed
per stream, so nothing is shared through the prefix cache.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from ..llm import LLM
from ..sampling import SamplingParams


def _prompt(n_vocab: int, n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(100, min(n_vocab, 30000), size=n).tolist()


def _drop_cache(llm: LLM) -> None:
    llm.exclusive(lambda seq: None)  # an exclusive call drops the prefix cache (engine.py)


def _run_level(llm: LLM, n: int, n_prompt: int, n_gen: int, seed: int) -> dict:
    params = SamplingParams(temperature=0, max_tokens=n_gen, ignore_eos=True)
    prompts = [_prompt(llm.n_vocab, n_prompt, seed + i) for i in range(n)]
    firsts, ends, stats = [0.0] * n, [0.0] * n, [None] * n
    go = threading.Barrier(n)

    def client(i: int) -> None:
        go.wait()
        for chunk in llm.generate(prompts[i], params=params):
            if chunk.token_ids and not firsts[i]:
                firsts[i] = time.perf_counter()
            if chunk.stats is not None:
                stats[i] = chunk.stats
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decoded = sum(s.completion_tokens - 1 for s in stats)
    window = max(ends) - min(firsts)
    return {
        "aggregate_tps": decoded / max(window, 1e-9),
        "stream_tps": float(np.mean([s.decode_tps for s in stats])),
        "ttft_s": float(np.mean([s.ttft_s for s in stats])),
    }


def parallel_levels(
    path: Path, threads: int, levels: list[int], n_prompt: int = 64, n_gen: int = 64, reps: int = 2, **llm_kwargs
) -> dict[int, dict]:
    """Best aggregate of reps runs per level (the run's other figures with it)."""
    if not levels or min(levels) < 1 or n_prompt < 1 or n_gen < 2 or reps < 1:
        raise ValueError("levels, n_prompt, reps must be positive and n_gen at least 2")
    top = max(levels)
    ctx = top * (n_prompt + n_gen + 16)
    out: dict[int, dict] = {}
    # plain decoding: this measures what batching shares (drafts would add rows of their own)
    with LLM(path, n_threads=threads, ctx_size=ctx, parallel=top, **{"speculative": "off", **llm_kwargs}) as llm:
        _run_level(llm, 1, 16, 4, seed=10_000)  # warm-up: page the weights in
        for n in levels:
            runs = []
            for rep in range(reps):
                _drop_cache(llm)
                runs.append(_run_level(llm, n, n_prompt, n_gen, seed=1000 * rep + 100 * n))
            out[n] = max(runs, key=lambda r: r["aggregate_tps"])
    return out


def _ttft(llm: LLM, ids: list[int]) -> tuple[float, int, list[int]]:
    """(time to first token, cached tokens, the tokens) of a short greedy completion of ids."""
    chunks = list(llm.generate(ids, temperature=0, max_tokens=16, ignore_eos=True))
    st = chunks[-1].stats
    return st.ttft_s, st.cached_tokens, [t for c in chunks for t in c.token_ids]


def multi_turn(
    path: Path, threads: int, n_history: int = 1500, n_follow: int = 32, reps: int = 3, **llm_kwargs
) -> dict:
    """Best of reps for each: the follow-up turn warm (its history just generated, cached) and cold."""
    if n_history < 1 or n_follow < 1 or reps < 1:
        raise ValueError("n_history, n_follow and reps must be positive")
    ctx = n_history + n_follow + 64
    with LLM(path, n_threads=threads, ctx_size=ctx, **llm_kwargs) as llm:
        history = _prompt(llm.n_vocab, n_history, 1)
        follow = _prompt(llm.n_vocab, n_follow, 2)
        warm, cold, cached = float("inf"), float("inf"), 0
        for _ in range(reps):
            _drop_cache(llm)
            _, _, reply = _ttft(llm, history)  # turn 1: the history and its reply
            t, cached, _ = _ttft(llm, history + reply + follow)  # turn 2 reuses turn 1's KV
            warm = min(warm, t)
            _drop_cache(llm)
            t, _, _ = _ttft(llm, history + reply + follow)
            cold = min(cold, t)
    return {
        "prompt_tokens": n_history + 16 + n_follow,
        "cached_tokens": cached,
        "warm_ttft_s": warm,
        "cold_ttft_s": cold,
        "speedup": cold / warm,
    }
