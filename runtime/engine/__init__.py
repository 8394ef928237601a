"""The engine: request state (sequence.py), paged KV bookkeeping with prefix caching (block_manager.py), the
scheduling policy (scheduler.py), whether a request fits (context_window.py), speculative drafting (drafting/),
the loop on its own thread (engine.py), a request's engine-side state (request.py) and its client-side stream
(stream.py) of chunks (output.py); the one-sequence path (one_sequence.py) for scoring and benchmarks.

    engine = Engine(model, tokenizer, parallel=4)
    for chunk in engine.submit(prompt_ids, SamplingParams(max_tokens=64)): print(chunk.text, end="")
"""

from __future__ import annotations

from .block_manager import BlockManager, BlockTable
from .engine import ContextLengthError, Engine, EngineClosedError
from .output import Chunk, Stats, TokenLogprob
from .request import Request
from .scheduler import Scheduler, SchedulerOutput
from .sequence import FinishReason, Sequence, SequenceStatus
from .stream import RequestStream

__all__ = [
    "BlockManager",
    "BlockTable",
    "Chunk",
    "ContextLengthError",
    "Engine",
    "EngineClosedError",
    "FinishReason",
    "Request",
    "RequestStream",
    "Scheduler",
    "SchedulerOutput",
    "Sequence",
    "SequenceStatus",
    "Stats",
    "TokenLogprob",
]
