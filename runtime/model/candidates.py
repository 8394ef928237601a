"""What a step returns for rows whose sampling needs only their largest logits: per row the top K token ids and
their logits, in sampling's order (value descending, ties by id ascending: sampling._largest), computed where the
logits are (native/top_k.h on the CPU, native/cuda/top_k.cu on a GPU) so that K numbers come back instead of the
vocabulary. The engine asks for them when every sampled row's chain starts with top-k (or is greedy) and nothing
else needs the whole row (penalties, logprobs); Sampler takes a CandidateRow where it takes a logits row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CandidateRow:
    ids: np.ndarray  # int32 [K]
    vals: np.ndarray  # float32 [K], descending


@dataclass(frozen=True)
class Candidates:
    """ids int32 [n, K], vals float32 [n, K]; indexing a row gives a CandidateRow, a slice Candidates."""

    ids: np.ndarray
    vals: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Candidates(self.ids[i], self.vals[i])
        return CandidateRow(self.ids[i], self.vals[i])
