"""One request's state in the engine: its tokens, how many of them have KV, its status and sampling settings.

    seq = Sequence("req-1", prompt_ids, SamplingParams(temperature=0, max_tokens=64), stop_token_ids={eos})
    scheduler.add(seq)                        # stamps seq.arrival; ValueError when it could never fit
    seq.token_ids                             # prompt + generated, one list
    seq.num_computed_tokens                   # leading tokens whose KV is written; catches up with
                                              # len(seq.token_ids) a chunk at a time (prefill and decode alike)
    seq.generated_token_ids, seq.finish_reason, seq.num_cached_tokens

Contracts: num_computed_tokens <= len(token_ids); num_cached_tokens is the prefix-cache hit of its first
admission (what stats.cached_tokens reports), a whole number of blocks. A decoding sequence has exactly one
token without KV (the one sampled last); a preempted one has no KV at all (num_computed_tokens is 0 until it is
admitted again and recomputes prompt + generated after its cached prefix). draft_token_ids: tokens proposed to follow
token_ids (the engine's drafter sets them before a step); the scheduler lets a decoding sequence carry them in
its step for verification (as many as budget, blocks and limits allow) and clears them. The scheduler owns
every other field after add(); the engine reads them.
"""

from __future__ import annotations

import enum
import numbers
import secrets
from collections.abc import Hashable, Iterable
from collections.abc import Sequence as Seq

from ..sampling import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # submitted, never admitted
    RUNNING = "running"  # holds blocks; scheduled each step until it finishes or is preempted
    PREEMPTED = "preempted"  # its blocks were taken back; waits at the front of the queue to be recomputed
    FINISHED = "finished"  # finish_reason says why; holds no blocks


class FinishReason(enum.Enum):
    STOP = "stop"  # sampled one of stop_token_ids (unless params.ignore_eos)
    LENGTH = "length"  # generated params.max_tokens tokens
    CONTEXT = "context"  # the sequence fills the context (the scheduler's ctx_size); OpenAI calls it "length"
    ABORT = "abort"  # cancelled by its client


def _token_list(name: str, ids) -> list[int]:
    try:
        ids = list(ids)
    except TypeError:
        ids = None
    if ids is None or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ValueError(f"{name} must be a sequence of non-negative integer token ids, got {ids!r:.80}")
    return [int(t) for t in ids]


class Sequence:
    """seq_id: any hashable, unique among the scheduler's live sequences. stop_token_ids: the tokens that end
    generation (the model's end-of-generation set, usually). seed: params.seed, or fresh entropy drawn here so
    that a reply can be reproduced from its recorded seed."""

    def __init__(
        self,
        seq_id: Hashable,
        prompt_token_ids: Seq[int],
        params: SamplingParams | None = None,
        stop_token_ids: Iterable[int] = (),
    ):
        tokens = _token_list("prompt_token_ids", prompt_token_ids)
        if not tokens:
            raise ValueError("prompt_token_ids must not be empty")
        self.seq_id = seq_id
        self.token_ids: list[int] = tokens
        self.num_prompt_tokens = len(tokens)
        self.params = params if params is not None else SamplingParams()
        self.seed: int = self.params.seed if self.params.seed is not None else secrets.randbits(63)
        self.stop_token_ids = frozenset(_token_list("stop_token_ids", stop_token_ids))
        self.status = SequenceStatus.WAITING
        self.finish_reason: FinishReason | None = None
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prefix-cache hit at its first admission (what stats.cached_tokens reports)
        self.arrival = -1  # submission order, stamped by Scheduler.add
        self.num_preemptions = 0
        self.draft_token_ids: list[int] = []

    @property
    def max_tokens(self) -> int | None:
        return self.params.max_tokens

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def generated_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int, ctx_size: int) -> FinishReason | None:
        """Appends a sampled token; returns why the sequence must stop now, or None to go on."""
        token_id = int(token_id)
        self.token_ids.append(token_id)
        if token_id in self.stop_token_ids and not self.params.ignore_eos:
            return FinishReason.STOP
        if self.max_tokens is not None and self.num_generated_tokens >= self.max_tokens:
            return FinishReason.LENGTH
        if len(self.token_ids) >= ctx_size:
            return FinishReason.CONTEXT
        return None

    def __repr__(self) -> str:
        return (
            f"Sequence({self.seq_id!r}, {self.status.value}, tokens={len(self.token_ids)}, "
            f"computed={self.num_computed_tokens}, generated={self.num_generated_tokens})"
        )
