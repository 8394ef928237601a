"""One engine step as the model takes it (native/step_batch.h): a flat batch of T tokens from S sequences, prefill,
decode and drafts alike, with each token's KV slot and each sequence's block table. Built in one place, here, which
owns the slot formula; Model.forward takes it, and the binding reads its int32 arrays in place.

    b = StepBatchBuilder(block_size=16)
    b.add(tokens, start=c, block_ids=table, logits=[n - 1])   # tokens at positions c .. c + n - 1; its last row sampled
    b.add(chunk, start=0, block_ids=other)                # a prompt chunk that samples nothing
    batch = b.build()
    logits = model.forward(batch)                          # float32 [len(batch.logits_rows), n_vocab]

Token t is token_ids[t] at positions[t] of sequence seq_index[t]; its K and V go to KV slot
slot_mapping[t] = block_tables[s, p // block_size] * block_size + p % block_size; context_lens[s] = start + n, the
positions sequence s has cached once the step ran (those before start were written by earlier steps).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class StepBatch:
    """The arrays of one step, int32 and contiguous when a StepBatchBuilder made them (anything integer otherwise:
    the binding then converts and checks a copy, naming the array and index of a bad value)."""

    token_ids: np.ndarray  # [T]
    positions: np.ndarray  # [T]
    slot_mapping: np.ndarray  # [T]
    seq_index: np.ndarray  # [T] s, non-decreasing from a builder
    block_tables: np.ndarray  # [S, max_blocks] each sequence's blocks in position order, padded with -1
    context_lens: np.ndarray  # [S]
    logits_rows: np.ndarray  # [L] rows whose logits come back, in order

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


class StepBatchBuilder:
    """Sequences are added in the order of their rows; build() once."""

    def __init__(self, block_size: int):
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size!r}")
        self.block_size = block_size
        self._tokens: list[np.ndarray] = []
        self._starts: list[int] = []
        self._tables: list[Sequence[int]] = []
        self._logits: list[np.ndarray] = []

    def add(self, tokens, start: int, block_ids: Sequence[int], logits: Sequence[int] = ()) -> int:
        """tokens: ints [n >= 1] at positions start .. start + n - 1 of a sequence whose blocks (in position order)
        are block_ids, covering those positions; logits: which of its n rows (0 .. n - 1, in order) return logits.
        Returns the sequence's s."""
        toks = np.asarray(tokens, dtype=np.int32).reshape(-1)
        n = len(toks)
        if n == 0:
            raise ValueError("a sequence in a step needs at least one token")
        rows = np.asarray(logits, dtype=np.int32).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise ValueError(f"logits rows must lie in [0, {n}), got {rows.tolist()}")
        if start < 0 or start + n > len(block_ids) * self.block_size:
            raise ValueError(
                f"positions {start}..{start + n - 1} do not lie in the {len(block_ids)} blocks of the sequence's table"
            )
        self._tokens.append(toks)
        self._starts.append(start)
        self._tables.append(block_ids)
        self._logits.append(rows)
        return len(self._tokens) - 1

    def build(self) -> StepBatch:
        bs = self.block_size
        n_seq = len(self._tokens)
        lens = np.fromiter((len(t) for t in self._tokens), dtype=np.int32, count=n_seq)
        starts = np.asarray(self._starts, dtype=np.int32)
        width = max((len(t) for t in self._tables), default=0)
        tables = np.full((n_seq, width), -1, dtype=np.int32)
        for s, t in enumerate(self._tables):
            tables[s, : len(t)] = t
        seq_index = np.repeat(np.arange(n_seq, dtype=np.int32), lens)
        first = np.cumsum(lens) - lens  # each sequence's first row
        positions = np.arange(int(lens.sum()), dtype=np.int32) - np.repeat(first - starts, lens).astype(np.int32)
        slots = tables[seq_index, positions // bs] * bs + positions % bs
        rows = [r + f for f, r in zip(first.tolist(), self._logits) if r.size]
        return StepBatch(
            token_ids=np.concatenate(self._tokens) if n_seq else np.empty(0, dtype=np.int32),
            positions=positions,
            slot_mapping=slots.astype(np.int32, copy=False),
            seq_index=seq_index,
            block_tables=tables,
            context_lens=starts + lens,
            logits_rows=np.concatenate(rows) if rows else np.empty(0, dtype=np.int32),
        )
