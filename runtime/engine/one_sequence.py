"""The one-sequence path: a single sequence owns the whole KV pool (blocks 0, 1, ... in order).

    seq = OneSequence(model, ctx_origin="ctx_size")   # model: a localllm.model.model.Model
    ids = seq.check(ids, extra=1)                     # int64 [n]; ValueError naming what is wrong
    logits = seq.step(ids, start=0, logits_rows=np.array([n - 1]))   # float32 [len(logits_rows), n_vocab]
    logits = seq.step(np.array([tid]), start=n, logits_rows=np.array([0]))   # the next position, through the KV
    top = seq.step(ids, start, rows, top_k=K)          # each row's top K candidates instead (model/candidates.py)

    hidden = seq.step_many([a, b], [rows_a, rows_b], hidden=True)   # whole sequences side by side, each in its own
                                                                     # blocks of the pool (embeddings)

`step` computes ids at positions start.. and keeps what the cache holds for positions 0..start-1; nothing else
may run on the model meanwhile: `LLM.logits`, `LLM.greedy` and `bench` drive it alone on the engine thread
(LLM.exclusive), which then forgets its prefix cache.
"""

from __future__ import annotations

import numpy as np

from ..model.model import BLOCK_SIZE, Model
from ..model.step_batch import StepBatchBuilder
from ..text.token_ids import token_ids
from .context_window import ContextWindow


class OneSequence:
    def __init__(self, model: Model, ctx_origin: str = "ctx_size"):
        """ctx_origin: what set the context size, for the error that a prompt does not fit."""
        self.model = model
        self.window = ContextWindow(model.n_blocks * BLOCK_SIZE, ctx_origin)
        self._blocks = np.arange(model.n_blocks, dtype=np.int32)  # the sequence's blocks: the whole pool in order

    def check(self, ids, extra: int = 0) -> np.ndarray:
        """ids as int64 [n]: non-empty, inside the vocabulary, and room for `extra` more tokens in the context
        (ContextLengthError otherwise: context_window.py)."""
        a = np.asarray(token_ids(ids, "ids", self.model.n_vocab), dtype=np.int64)
        if len(a) == 0:
            raise ValueError("ids must be a non-empty sequence of token ids")
        self.window.check(len(a), extra)
        return a

    def step(self, ids: np.ndarray, start: int, logits_rows: np.ndarray, hidden: bool = False, top_k: int = 0):
        """ids: int [n] at positions start..start+n-1; logits_rows: int32 indices into ids.
        Returns float32 [len(logits_rows), n_vocab], or with hidden the rows' final hidden states [.., d_model], or
        with top_k the rows' Candidates (Model.forward)."""
        b = StepBatchBuilder(BLOCK_SIZE)
        b.add(ids, start, self._blocks, logits=logits_rows)
        if top_k:
            return self.model.forward(b.build(), top_k=top_k)
        return self.model.forward(b.build(), hidden=hidden)

    def step_many(
        self, seqs: list[np.ndarray], logits_rows: list[np.ndarray], hidden: bool = False
    ) -> list[np.ndarray]:
        """Whole sequences (each from position 0) in one step, each in its own consecutive blocks of the pool (their
        blocks together must fit it); per sequence, step's result for its logits_rows."""
        b = StepBatchBuilder(BLOCK_SIZE)
        first = 0
        for ids, rows in zip(seqs, logits_rows):
            need = -(-len(ids) // BLOCK_SIZE)
            if first + need > len(self._blocks):
                raise ValueError(f"the sequences need more than the pool's {len(self._blocks)} blocks")
            b.add(ids, 0, self._blocks[first : first + need], logits=rows)
            first += need
        out = self.model.forward(b.build(), hidden=hidden)
        return np.split(out, np.cumsum([len(r) for r in logits_rows])[:-1])
