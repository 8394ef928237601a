"""The end-to-end consequence of the kernel table: one decode step of the whole model carrying N sequences
(one new token each, every sequence `context` tokens deep, logits for every row, as a batched engine step
samples them), in ms per step. What batching and speculative verification live on: the weights stream once
per step whatever N is, so ms(N) / ms(1) is what N streams cost against one.

    ms = step_times(path, threads=2, ns=[1, 2, 4, 8, 16], context=64, seconds=0.4)   # {N: ms per step}
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..llm import LLM
from ..model.model import BLOCK_SIZE
from ..model.step_batch import StepBatchBuilder


def step_times(path: Path, threads: int, ns: list[int], context: int = 64, seconds: float = 0.4) -> dict[int, float]:
    """Best ms per step for each N in ns, over about `seconds` each (after a warm-up step). context >= 1. An encoder
    (no decode step: it embeds whole sequences) gives {}."""
    if context < 1 or not ns or min(ns) < 1:
        raise ValueError("context and every N must be positive")
    per_seq = -(-(context + 1) // BLOCK_SIZE)  # blocks a sequence holds: its context and the new token
    n_max = max(ns)
    with LLM(path, n_threads=threads, ctx_size=n_max * per_seq * BLOCK_SIZE) as llm:
        if llm.encoder:
            return {}
        return llm.exclusive(lambda _seq: _measure(llm.model, llm.n_vocab, ns, context, seconds, per_seq))


def _measure(model, n_vocab: int, ns: list[int], context: int, seconds: float, per_seq: int) -> dict[int, float]:
    """On the engine thread, alone: the pool's blocks are the sequences' own here."""
    rng = np.random.default_rng(0)
    n_max = max(ns)
    tables = np.arange(n_max * per_seq, dtype=np.int32).reshape(n_max, per_seq)  # sequence i: its own blocks
    prompts = rng.integers(100, min(n_vocab, 30000), size=(n_max, context + 1))
    for i in range(n_max):  # each sequence's context into the cache, one prefill step each
        b = StepBatchBuilder(BLOCK_SIZE)
        b.add(prompts[i, :context], 0, tables[i], logits=[context - 1])
        model.forward(b.build())
    out = {}
    for n in ns:
        b = StepBatchBuilder(BLOCK_SIZE)
        for i in range(n):  # one new token each, every row sampled
            b.add(prompts[i, context : context + 1], context, tables[i], logits=[0])
        batch = b.build()
        model.forward(batch)  # warm-up: the same slots are written again by every timed step
        best, t_end = float("inf"), time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            model.forward(batch)
            best = min(best, time.perf_counter() - t0)
            if time.perf_counter() > t_end:
                break
        out[n] = best * 1e3
    return out
