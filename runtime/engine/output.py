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


@dataclass
class Chunk:
    text: str
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stats: Stats | None = None
