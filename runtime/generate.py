"""Generation for one sequence: prefill, then one decode step per token, streamed as chunks.

    for chunk in generate(llm.sequence, llm.tokenizer, ids, SamplingParams(temperature=0.7, max_tokens=64)):
        print(chunk.text, end="")        # the last chunk also has .finish_reason and .stats

finish_reason: "stop" (an end-of-generation token or a stop string), "length" (max_tokens, or the context
is full, which stats.context_full tells apart: generation ends there; the prompt is never truncated or shifted
silently, and a prompt with no room left to generate raises ValueError). Text is emitted as soon as it is
whole UTF-8 and cannot be the start of a stop string.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .one_sequence import OneSequence
from .sampling import Sampler, SamplingParams, StopChecker
from .tokenizer import Tokenizer


@dataclass
class Stats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tps: float = 0.0  # prompt tokens per second of the prefill step
    decode_tps: float = 0.0  # generated tokens per second after the first
    ctx_size: int = 0
    context_full: bool = False  # generation ended because prompt + completion filled ctx_size


@dataclass
class Chunk:
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: Stats | None = None


def generate(seq: OneSequence, tok: Tokenizer, ids, params: SamplingParams) -> Iterator[Chunk]:
    """seq: the model's one-sequence path; tok: its tokenizer; ids: the prompt's token ids (templated, encoded)."""
    prompt = seq.check(ids, extra=1)
    ctx_size = seq.ctx_size
    stats = Stats(prompt_tokens=len(prompt), ctx_size=ctx_size)
    limit = min(params.max_tokens or ctx_size, ctx_size - len(prompt))
    sampler, stop, detok = Sampler(params), StopChecker(params.stop), tok.detokenizer()
    history = prompt.tolist()
    t0 = time.perf_counter()
    logits = seq.step(prompt, 0, np.array([len(prompt) - 1], dtype=np.int32))[0]
    t1 = time.perf_counter()
    stats.prompt_tps = len(prompt) / max(t1 - t0, 1e-9)
    finish = "length"
    t_first = None
    while stats.completion_tokens < limit:
        tid = sampler.sample(logits, history)
        if not params.ignore_eos and tid in tok.stop_ids:
            finish = "stop"
            break
        history.append(tid)
        stats.completion_tokens += 1
        if t_first is None:
            t_first = time.perf_counter()
        text = stop.push(detok.push(tid))
        if stop.stopped:
            finish = "stop"
            if text:
                yield Chunk(text, [tid])
            break
        yield Chunk(text, [tid])
        if stats.completion_tokens >= limit:
            break
        logits = seq.step(np.array([tid], dtype=np.int64), len(history) - 1, np.zeros(1, dtype=np.int32))[0]
    t2 = time.perf_counter()
    if t_first is not None and stats.completion_tokens > 1:
        stats.decode_tps = (stats.completion_tokens - 1) / max(t2 - t_first, 1e-9)
    stats.context_full = finish == "length" and stats.completion_tokens < (params.max_tokens or ctx_size + 1)
    tail = "" if stop.stopped else stop.push(detok.flush()) + stop.flush()
    yield Chunk(tail, [], finish, stats)
