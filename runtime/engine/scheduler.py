"""The scheduling policy: which sequences run in the next engine step and how many tokens each (the step's batch:
model/step_batch.py), and what the sampled tokens change afterwards.

    bm = BlockManager(n_blocks, block_size)
    sched = Scheduler(bm, parallel=4, max_batch_tokens=256, ctx_size=4096)
    sched.add(seq)                            # ValueError naming the sizes when it could never fit alone
    out = sched.schedule()                    # out.num_tokens == 0: nothing to run
    logits = model.forward(out.batch)       # [len(out.batch.logits_rows), n_vocab]
    tokens = [sample(logits[j], out.seqs[s]) for j, s in enumerate(out.sampled_seqs)]
    for seq in sched.update(out, tokens): ...  # sequences that got tokens; finished ones carry finish_reason
    sched.abort(seq_id)                        # a cancelled sequence's blocks go back at once

Each step spends at most max_batch_tokens tokens:
1. Running sequences, oldest admission first. Each takes what it has not computed yet (one token when decoding,
   the rest of its prompt otherwise) but leaves one token of budget for every running sequence after it, so a
   long prompt is prefilled in chunks while decoding streams get their token every step. When the pool has no
   block for a sequence's next position, the most recently admitted running sequence is preempted (its blocks
   freed; it waits at the front of the queue and recomputes prompt + generated later), itself if it is last.
   Then, unless this step preempted, each decoding sequence with draft_token_ids (speculation) carries up to k
   of them after its last token, in the same order, k bounded by the budget left, by its context and max_tokens
   (drafts past where it must stop could never be kept), and by free blocks: drafts never preempt anyone.
   Every one of its 1 + k rows is sampled; update() takes the verified run and rolls the rest back.
2. Unless this step preempted, waiting sequences in arrival order (preempted ones first) while there is budget,
   a free row (parallel) and blocks for all their tokens: allocation is all-or-nothing and the head of the
   queue blocks the rest. An admitted sequence starts after its cached prefix (sequence.num_cached_tokens).

Pipelining (the engine's, where the device computes a step apart from the host): schedule_next(out) schedules the
step after `out` before out's tokens are known, each of its decoding sequences one token further, when `out` decodes
every running sequence (one token each, no drafts), no waiting sequence has a free row (parallel) to be admitted
to, and the pool has the slots without preempting anyone (a row that out frees is taken a step later). A sequence that out's token must end by length (max_tokens, the context) is left out; one that a stop token
ends is not known to end yet, so its row is computed and update() skips it. fill(next, tokens) puts out's tokens
in; update takes the outputs in the order they were scheduled.

Nothing is refused once added: a sequence finishes (stop token, max_tokens, a full context) or is aborted. Every
live sequence is at most ctx_size <= n_blocks * block_size tokens long, so it always fits the pool alone.
The scheduler holds the block manager's results (BlockTable snapshots), never its lists.
"""

from __future__ import annotations

import itertools
import numbers
from collections import deque
from collections.abc import Hashable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

import numpy as np

from ..model.step_batch import StepBatch, StepBatchBuilder
from .block_manager import BlockManager, BlockTable
from .context_window import ContextWindow
from .sequence import FinishReason, Sequence, SequenceStatus

DEFAULT_PARALLEL = 4  # sequences decoded together: a chat, an editor and a script or two on one desktop
# Tokens one step computes at most. Measured (qwen2.5-coder-0.5b, 2 threads, AVX2 Zen 3; a step of T prompt
# tokens at context 256): T = 1: 25 ms, 32: 174 ms, 64: 293 ms (218 tok/s), 128: 516 ms (248 tok/s), 256: 989 ms
# (259 tok/s), 512: 2154 ms. 128 keeps prefill at 96% of its best rate while a stream decoding beside a long
# prompt still gets a token every ~0.5 s (256: every second, for 4% more prefill speed).
DEFAULT_MAX_BATCH_TOKENS = 128


@dataclass(frozen=True, eq=False)
class SchedulerOutput:
    """One step, made by Scheduler.schedule and handed back to Scheduler.update. T tokens from S sequences."""

    seqs: tuple[Sequence, ...]  # [S] sequence s of the batch
    num_scheduled: tuple[int, ...]  # [S] tokens of seqs[s] in this step, >= 1
    batch: StepBatch  # what Model.forward takes: for each s in order, seqs[s].token_ids[c : c + n - k] and its k
    # drafts at positions c .. c + n - 1 (c: computed before the step, k: num_drafts[s]); the logits rows are a
    # sequence's last row when it reaches the end of its tokens (a prompt's last chunk, or a decode token) and each
    # of its draft rows after it; none for a chunk mid-prompt
    sampled_seqs: tuple[int, ...]  # [L] the s of each logits row (a sequence with k drafts: k + 1 rows in order)
    num_drafts: tuple[int, ...]  # [S] draft tokens of seqs[s] in the step: the last num_drafts[s] of its rows
    preempted: tuple[Sequence, ...]  # sequences this step preempted (now waiting, holding no blocks)

    @property
    def num_tokens(self) -> int:
        return self.batch.num_tokens


def _count(name: str, value, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise ValueError(f"{name} must be an integer >= {lo}, got {value!r}")
    return int(value)


class Scheduler:
    """Owns the waiting queue and the running list over one BlockManager. Not thread-safe: the engine thread
    calls add / abort / schedule / update. ctx_size: None = the pool's n_blocks * block_size; a larger value
    is capped there."""

    def __init__(
        self,
        block_manager: BlockManager,
        parallel: int = DEFAULT_PARALLEL,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        ctx_size: int | None = None,
    ):
        self._bm = block_manager
        self.parallel = _count("parallel", parallel, 1)
        self.max_batch_tokens = _count("max_batch_tokens", max_batch_tokens, 1)
        if self.max_batch_tokens < self.parallel:
            raise ValueError(
                f"max_batch_tokens ({max_batch_tokens}) must be at least parallel "
                f"({parallel}): every running sequence gets a token each step"
            )
        self.pool_tokens = block_manager.n_blocks * block_manager.block_size
        if ctx_size is not None:
            _count("ctx_size", ctx_size, 2)
        self._window = ContextWindow(ctx_size) if ctx_size is not None else None  # a requested size: its check
        self.ctx_size = min(ctx_size or self.pool_tokens, self.pool_tokens)
        self._waiting: deque[Sequence] = deque()  # head is admitted first
        self._running: list[Sequence] = []  # admission order: the last is preempted first
        self._tables: dict[Hashable, BlockTable] = {}  # running seq_id -> its latest table
        self._live: dict[Hashable, Sequence] = {}  # waiting and running, by seq_id
        self._arrivals = itertools.count()
        self._pending: deque[SchedulerOutput] = deque()  # scheduled, not updated: update() takes the oldest

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def has_unfinished(self) -> bool:
        return bool(self._live)

    def pool_stats(self) -> dict[str, int]:
        """running and waiting sequences, and the KV pool's blocks: total, held by live sequences, free but cached."""
        return {
            "running": len(self._running),
            "waiting": len(self._waiting),
            "blocks": self._bm.n_blocks,
            "blocks_used": self._bm.num_used_blocks,
            "blocks_cached": self._bm.num_cached_blocks,
        }

    def add(self, seq: Sequence) -> None:
        """Queues a new sequence. ValueError when it is not new, its seq_id is live, or its prompt leaves no room
        to generate a token in the context or in the KV pool."""
        if seq.status is not SequenceStatus.WAITING or seq.arrival >= 0:
            raise ValueError(f"sequence {seq.seq_id!r} was already submitted")
        if seq.seq_id in self._live:
            raise ValueError(f"a live sequence already has the id {seq.seq_id!r}")
        n = seq.num_tokens
        if self._window is not None:
            self._window.check(n, 1)
        if n >= self.pool_tokens:
            raise ValueError(
                f"the prompt has {n} tokens; the KV pool holds {self.pool_tokens} "
                f"({self._bm.n_blocks} blocks of {self._bm.block_size}), so no token could be generated"
            )
        seq.arrival = next(self._arrivals)
        self._live[seq.seq_id] = seq
        self._waiting.append(seq)

    def borrow(self, key: Hashable, token_ids: Seq[int]) -> BlockTable | None:
        """Blocks for one step of token_ids computed whole (an embedding: every row's hidden state), none from the
        prefix cache, or None when the pool cannot spare them now; give_back(key) after the step. Nothing computed
        in them is offered to the cache."""
        return self._bm.allocate(key, token_ids, reuse=False)

    def give_back(self, key: Hashable) -> None:
        self._bm.free(key)

    def abort(self, seq_id: Hashable) -> bool:
        """Finishes a live sequence with FinishReason.ABORT and frees its blocks now. False when it is not live
        (unknown, finished, or aborted already)."""
        seq = self._live.get(seq_id)
        if seq is None:
            return False
        if seq.status is SequenceStatus.RUNNING:
            self._running.remove(seq)
            self._release(seq)
        else:
            self._waiting.remove(seq)
        self._finish(seq, FinishReason.ABORT)
        return True

    def schedule(self) -> SchedulerOutput:
        self._pending.clear()  # an output not updated before the next schedule() is stale: never updated
        budget = self.max_batch_tokens
        scheduled: list[tuple[Sequence, int]] = []
        preempted: list[Sequence] = []
        i = 0
        while i < len(self._running):
            seq = self._running[i]
            later = len(self._running) - i - 1
            n = min(seq.num_tokens - seq.num_computed_tokens, budget - later)
            if n > 0:
                if not self._reserve(seq, n, preempted):
                    break  # seq was the last running sequence and gave its blocks up
                scheduled.append((seq, n))
                budget -= n
            i += 1
        drafts: dict[Hashable, int] = {}
        for j, (seq, n) in enumerate(scheduled):
            k = self._draft_room(seq, budget) if n == 1 and not preempted else 0
            if k and self._reserve_drafts(seq, 1 + k):
                scheduled[j] = (seq, 1 + k)
                drafts[seq.seq_id] = k
                budget -= k
        while not preempted and self._waiting and budget > 0 and len(self._running) < self.parallel:
            seq = self._waiting[0]
            table = self._bm.allocate(seq.seq_id, seq.token_ids)
            if table is None:
                break
            self._waiting.popleft()
            self._tables[seq.seq_id] = table
            if seq.status is SequenceStatus.WAITING:
                seq.num_cached_tokens = table.num_cached_tokens
            seq.num_computed_tokens = table.num_cached_tokens
            seq.status = SequenceStatus.RUNNING
            self._running.append(seq)
            n = min(seq.num_tokens - seq.num_computed_tokens, budget)
            scheduled.append((seq, n))
            budget -= n
        out = self._output(scheduled, preempted, drafts)
        self._pending.append(out)
        for seq in itertools.chain(self._running, self._waiting):
            seq.draft_token_ids = []  # proposed for this step only
        return out

    def schedule_next(self, out: SchedulerOutput) -> SchedulerOutput | None:
        """The step after `out` (the last scheduled, not yet updated), scheduled before its tokens are known (the
        rules above), or None. Its token_ids hold 0 until fill(); update() takes it after out."""
        if len(self._pending) != 1 or self._pending[0] is not out or out.preempted:
            return None
        if self._waiting and len(self._running) < self.parallel:  # one could be admitted: step by step
            return None
        if any(out.num_drafts) or any(n != 1 for n in out.num_scheduled) or len(out.sampled_seqs) != len(out.seqs):
            return None
        if len(out.seqs) != len(self._running):  # a sequence out left waiting for budget: not decode
            return None
        scheduled: list[tuple[Sequence, int]] = []
        for seq in out.seqs:
            if seq.status is not SequenceStatus.RUNNING:
                continue
            if seq.num_tokens + 1 >= self.ctx_size:
                continue  # out's token fills the context
            if seq.max_tokens is not None and seq.num_generated_tokens + 1 >= seq.max_tokens:
                continue  # out's token is its last
            if not self._reserve_drafts(seq, 2):
                return None  # slots already reserved stay with their sequences: their next step uses them
            scheduled.append((seq, 1))
        if not scheduled:
            return None
        builder = StepBatchBuilder(self._bm.block_size)
        for seq, _ in scheduled:
            c = seq.num_computed_tokens + 1  # out computes position num_computed_tokens
            builder.add([0], c, self._tables[seq.seq_id].array, logits=range(1))
        nxt = SchedulerOutput(
            seqs=tuple(seq for seq, _ in scheduled),
            num_scheduled=(1,) * len(scheduled),
            batch=builder.build(),
            sampled_seqs=tuple(range(len(scheduled))),
            num_drafts=(0,) * len(scheduled),
            preempted=(),
        )
        self._pending.append(nxt)
        return nxt

    def fill(self, nxt: SchedulerOutput, tokens: Seq[int]) -> None:
        """Puts the tokens a schedule_next() step computes (each sequence's token from the step before) in its
        batch, in its sequences' order."""
        if nxt not in self._pending or len(tokens) != len(nxt.seqs):
            raise ValueError(f"fill() takes a step from schedule_next() and {len(nxt.seqs)} tokens, got {len(tokens)}")
        nxt.batch.token_ids[:] = tokens

    def cancel_next(self, nxt: SchedulerOutput) -> None:
        """Drops a schedule_next() step that was not run (its reserved slots stay with their sequences)."""
        if not self._pending or self._pending[-1] is not nxt or len(self._pending) < 2:
            raise ValueError("cancel_next() takes the step schedule_next() returned last, before it is updated")
        self._pending.pop()

    def update(self, output: SchedulerOutput, sampled_tokens: Seq[int | None]) -> list[Sequence]:
        """Applies a step: sampled_tokens[j] is the token sampled from logits row j (output.sampled_seqs[j]).
        Advances computed counts, offers newly full blocks to the prefix cache, appends the tokens, and finishes
        and frees sequences that stop. Returns the sequences that got tokens, in row order. A sequence aborted
        since schedule() is skipped. Takes the last schedule()'s output, once.

        A sequence that ended since the step was scheduled has its rows' tokens ignored (None, as the engine gives).
        A sequence with k drafts has k + 1 rows: their tokens are the verified run x_1 .. x_m (1 <= m <= k + 1)
        followed by None for the rows verification did not reach, where x_i equals draft i for every i < m
        (ValueError otherwise). The run is appended a token at a time, stopping where plain decoding would stop
        (stop token, max_tokens, context); the KV of the drafts that were kept stays computed, the slots of the
        rest are given back (blocks included when the rollback crosses a block boundary)."""
        if not self._pending or output is not self._pending[0]:
            raise ValueError("update() takes the output of the last schedule() (then schedule_next()'s), once each")
        if len(sampled_tokens) != len(output.sampled_seqs):
            raise ValueError(
                f"{len(sampled_tokens)} sampled tokens for {len(output.sampled_seqs)} logits rows of the step"
            )
        rows: dict[int, list[int | None]] = {}
        for s, tok in zip(output.sampled_seqs, sampled_tokens):
            rows.setdefault(s, []).append(tok)
        runs: dict[int, list[int]] = {}
        ends = None
        for s, toks in rows.items():
            if output.seqs[s].status is not SequenceStatus.RUNNING:
                continue  # ended since the step was scheduled (aborted, a stop string): its rows are not read
            m = toks.index(None) if None in toks else len(toks)
            if m == 0 or any(t is not None for t in toks[m:]):
                raise ValueError(f"sequence {output.seqs[s].seq_id!r}: its rows' tokens {toks} are not a run then None")
            run = runs[s] = [int(t) for t in toks[:m]]
            if m > 1:  # the tokens before the last must be the drafts the rows were computed on
                ends = np.cumsum(output.num_scheduled) if ends is None else ends
                k = output.num_drafts[s]
                if run[:-1] != output.batch.token_ids[ends[s] - k : ends[s] - k + m - 1].tolist():
                    raise ValueError(f"sequence {output.seqs[s].seq_id!r}: the run {run} does not follow its drafts")
        self._pending.popleft()
        advanced = []
        for s, (seq, n) in enumerate(zip(output.seqs, output.num_scheduled)):
            if seq.status is not SequenceStatus.RUNNING:
                continue
            run = runs.get(s)
            if run is None:  # a prompt chunk that does not reach its end
                seq.num_computed_tokens += n
                self._bm.mark_computed(seq.seq_id, seq.token_ids, seq.num_computed_tokens)
                continue
            k = output.num_drafts[s]
            reason, m = None, 0
            for tok in run:
                reason = seq.append_token(tok, self.ctx_size)
                m += 1
                if reason is not None:
                    break
            # KV holds: the n - k tokens before the drafts, and the drafts equal to the tokens appended after them
            seq.num_computed_tokens += n - k + min(m, len(run) - 1)
            self._bm.mark_computed(seq.seq_id, seq.token_ids, seq.num_computed_tokens)
            advanced.append(seq)
            if reason is not None:
                self._running.remove(seq)
                self._release(seq)
                self._finish(seq, reason)
            elif k:
                self._tables[seq.seq_id] = self._bm.truncate(seq.seq_id, seq.num_computed_tokens)
        return advanced

    def _draft_room(self, seq: Sequence, budget: int) -> int:
        """How many of seq's drafts may ride in its step: the run of 1 + k tokens it yields at most must not
        pass its context or max_tokens, and its k drafts must fit the budget left."""
        if not seq.draft_token_ids:
            return 0
        room = min(len(seq.draft_token_ids), budget, self.ctx_size - seq.num_tokens - 1)
        if seq.max_tokens is not None:
            room = min(room, seq.max_tokens - seq.num_generated_tokens - 1)
        return max(room, 0)

    def _reserve_drafts(self, seq: Sequence, n: int) -> bool:
        """Slots for seq's next n positions when the pool has them free; False (nothing changed) otherwise."""
        need = seq.num_computed_tokens + n - self._tables[seq.seq_id].num_slots
        table = self._bm.append_slots(seq.seq_id, max(need, 0))
        if table is None:
            return False
        self._tables[seq.seq_id] = table
        return True

    def _reserve(self, seq: Sequence, n: int, preempted: list[Sequence]) -> bool:
        """Slots for seq's next n positions, preempting the newest running sequences while the pool is short.
        False when seq itself had to be preempted."""
        need = seq.num_computed_tokens + n - self._tables[seq.seq_id].num_slots
        if need <= 0:
            return True
        while True:
            table = self._bm.append_slots(seq.seq_id, need)
            if table is not None:
                self._tables[seq.seq_id] = table
                return True
            victim = self._running.pop()
            self._release(victim)
            victim.status = SequenceStatus.PREEMPTED
            victim.num_computed_tokens = 0
            victim.num_preemptions += 1
            self._waiting.appendleft(victim)  # victims come newest first: the oldest ends up at the head
            preempted.append(victim)
            if victim is seq:
                return False

    def _release(self, seq: Sequence) -> None:
        self._bm.free(seq.seq_id)
        del self._tables[seq.seq_id]

    def _finish(self, seq: Sequence, reason: FinishReason) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        del self._live[seq.seq_id]

    def _output(
        self, scheduled: list[tuple[Sequence, int]], preempted: list[Sequence], drafts: dict[Hashable, int]
    ) -> SchedulerOutput:
        builder = StepBatchBuilder(self._bm.block_size)
        sampled_seqs: list[int] = []
        num_drafts = []
        for s, (seq, n) in enumerate(scheduled):
            c = seq.num_computed_tokens
            k = drafts.get(seq.seq_id, 0)
            num_drafts.append(k)
            tokens = seq.token_ids[c : c + n - k]
            if k:
                tokens = tokens + seq.draft_token_ids[:k]
            sampled = c + n - k == seq.num_tokens  # the last row of its tokens, and its drafts after it
            builder.add(tokens, c, self._tables[seq.seq_id].array, logits=range(n - k - 1, n) if sampled else ())
            if sampled:
                sampled_seqs.extend([s] * (k + 1))
        return SchedulerOutput(
            seqs=tuple(seq for seq, _ in scheduled),
            num_scheduled=tuple(n for _, n in scheduled),
            batch=builder.build(),
            sampled_seqs=tuple(sampled_seqs),
            num_drafts=tuple(num_drafts),
            preempted=tuple(preempted),
        )
