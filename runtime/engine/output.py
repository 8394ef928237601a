"""What a request streams back to its client: chunks of text and token ids, the last one with why it ended and
its statistics.

    for chunk in stream:                 # Chunk(text, token_ids); the last: .finish_reason and .stats
        print(chunk.text, end="")

finish_reason: "stop" (an end-of-generation token or a stop string), "length" (max_tokens, or the context filled,
which stats.context_full tells apart), "abort" (the request was cancelled before it ended). Token ids of
end-of-generation tokens are not emitted and not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Stats:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # leading prompt tokens whose KV came from the prefix cache (not computed again)
    prompt_tps: float = 0.0  # prompt tokens computed (prompt_tokens - cached_tokens) per second of their steps
    decode_tps: float = 0.0  # generated tokens per second after the first
    ttft_s: float = 0.0  # submission to first token, queueing included
    ctx_size: int = 0
    context_full: bool = False  # generation ended because prompt + completion filled ctx_size
    draft_proposed: int = 0  # draft tokens verified (speculation: engine/drafting/ngram.py)
    draft_accepted: int = 0  # of them, those kept: each one a token that cost no step of its own
    draft_steps: int = 0  # steps that carried drafts: draft_accepted / draft_steps is the mean accepted length
    stop_string: str | None = None  # the stop string that ended the reply (finish_reason "stop"), if one did


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float  # natural log of its probability under softmax(logits)
    top: tuple[tuple[int, float], ...] = ()  # the most likely tokens and their logprobs, best first


def token_logprob(logits: np.ndarray, token_id: int, n_top: int) -> TokenLogprob:
    """logits: [n_vocab] raw scores -> the chosen token's log-softmax, and the n_top best (float64 sums)."""
    row = np.asarray(logits, dtype=np.float64)
    finite = np.isfinite(row)
    m = row[finite].max()
    log_z = m + np.log(np.exp(row[finite] - m).sum())
    top: tuple[tuple[int, float], ...] = ()
    if n_top:
        idx = np.argpartition(-row, n_top - 1)[:n_top]
        idx = idx[np.argsort(-row[idx], kind="stable")]
        top = tuple((int(i), float(row[i] - log_z)) for i in idx)
    return TokenLogprob(int(token_id), float(row[token_id] - log_z), top)


@dataclass
class Chunk:
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: Stats | None = None
    logprobs: list[TokenLogprob] | None = None  # one per token id, when the request asked for them
    reasoning: str = ""  # LLM.chat's: the reply's reasoning this chunk completed, kept out of text (text/reasoning.py)
