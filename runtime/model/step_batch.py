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
    """Sequences are added in the order of their rows; build() once. A step's arrays are computed in Python lists and
    converted once each: a decode step of a few rows is a few dozen small values, where numpy's per-call cost
    (about 2 us a call) is what a step would pay (add + build of one decode row: about 80 us in numpy before, about
    15 now, Zen 3; the engine's host time per token is the GPU's budget: docs/cuda.md), and a long prompt's slots
    are a range per block."""

    def __init__(self, block_size: int):
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size!r}")
        self.block_size = block_size
        self._tokens: list[int] = []  # every sequence's tokens, in row order
        self._lens: list[int] = []
        self._starts: list[int] = []
        self._tables: list[Sequence[int]] = []
        self._logits: list[int] = []  # rows of the whole step

    def add(self, tokens, start: int, block_ids: Sequence[int], logits: Sequence[int] = ()) -> int:
        """tokens: ints [n >= 1] at positions start .. start + n - 1 of a sequence whose blocks (in position order)
        are block_ids (ints, or an int32 array: copied into the step's table without a conversion), covering those
        positions; logits: which of its n rows (0 .. n - 1, in order) return logits.
        Returns the sequence's s."""
        toks = tokens.reshape(-1).tolist() if isinstance(tokens, np.ndarray) else list(tokens)
        n = len(toks)
        if n == 0:
            raise ValueError("a sequence in a step needs at least one token")
        rows = logits.reshape(-1).tolist() if isinstance(logits, np.ndarray) else list(logits)
        if rows and (min(rows) < 0 or max(rows) >= n):
            raise ValueError(f"logits rows must lie in [0, {n}), got {rows}")
        if start < 0 or start + n > len(block_ids) * self.block_size:
            raise ValueError(
                f"positions {start}..{start + n - 1} do not lie in the {len(block_ids)} blocks of the sequence's table"
            )
        first = len(self._tokens)
        self._tokens += toks
        self._lens.append(n)
        self._starts.append(start)
        self._tables.append(block_ids)
        self._logits += [first + r for r in rows]
        return len(self._lens) - 1

    def build(self) -> StepBatch:
        bs = self.block_size
        positions: list[int] = []
        slots: list[int] = []
        seq_index: list[int] = []
        for s, (n, start, table) in enumerate(zip(self._lens, self._starts, self._tables)):
            positions += range(start, start + n)
            seq_index += [s] * n
            p, end = start, start + n
            while p < end:  # the slots of one block are consecutive: a run per block the sequence's tokens touch
                i, off = divmod(p, bs)
                take = min(bs - off, end - p)
                first = int(table[i]) * bs + off
                slots += range(first, first + take)
                p += take
        width = max(map(len, self._tables), default=0)
        tables = np.full((len(self._tables), width), -1, dtype=np.int32)
        for s, t in enumerate(self._tables):
            tables[s, : len(t)] = t
        return StepBatch(
            token_ids=_int32(self._tokens),
            positions=_int32(positions),
            slot_mapping=_int32(slots),
            seq_index=_int32(seq_index),
            block_tables=tables,
            context_lens=_int32([start + n for start, n in zip(self._starts, self._lens)]),
            logits_rows=_int32(self._logits),
        )


def _int32(values: list[int]) -> np.ndarray:
    """int32 [len(values)]; OverflowError naming the value where one does not fit."""
    return np.array(values, dtype=np.int32)
