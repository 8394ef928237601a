"""The engine: request state (sequence.py), paged KV bookkeeping with prefix caching (block_manager.py) and the
scheduling policy (scheduler.py). Pure Python over numpy; the engine loop that drives the native step joins later.

    from localllm.engine import BlockManager, Scheduler, Sequence
    sched = Scheduler(BlockManager(n_blocks, block_size), max_num_seqs=4)
    sched.add(Sequence("req-1", prompt_ids, params, stop_token_ids={eos}))
    out = sched.schedule(); ...; sched.update(out, sampled_tokens)
"""

from __future__ import annotations

from .block_manager import BlockManager, BlockTable
from .scheduler import Scheduler, SchedulerOutput
from .sequence import FinishReason, Sequence, SequenceStatus

__all__ = [
    "BlockManager",
    "BlockTable",
    "FinishReason",
    "Scheduler",
    "SchedulerOutput",
    "Sequence",
    "SequenceStatus",
]
