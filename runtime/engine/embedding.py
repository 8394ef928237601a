"""Embeddings: a text's final hidden states (after the model's output norm), pooled into one vector.

    how = pooling_of(metadata)               # the GGUF's {arch}.pooling_type, or "mean" for a model without one
    v = pool(rows, how, normalize=True)      # rows: float32 [n_tokens, d_model] -> [d_model]
    job = EmbedJob(inputs, how, normalize)   # the engine's (engine.py: Engine.embed): inputs from any number of
                                             # jobs share its embedding steps, each input whole in one step

Pooling as llama.cpp defines its types: mean over the tokens, cls (the first token's row), last (the last token's).
A decoder model without the key (a chat model asked for embeddings) is pooled by mean, the choice llama.cpp's
`--pooling mean` and most sentence-embedding stacks make; the vector is L2-normalised unless asked otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

POOLINGS = ("mean", "cls", "last")
_GGUF_POOLING = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's enum llama_pooling_type (0: none, 4: rank)


def pooling_of(metadata: Mapping[str, Any]) -> str:
    """The pooling the file asks for; "mean" where it says none (or nothing). ValueError for rank pooling
    (rerankers), which gives a score, not an embedding."""
    arch = metadata.get("general.architecture")
    value = metadata.get(f"{arch}.pooling_type")
    if value == 4:
        raise ValueError(f"{arch}.pooling_type is rank (a reranker): it scores pairs, it does not embed text")
    return _GGUF_POOLING.get(value, "mean")


def pool(rows: np.ndarray, how: str, normalize: bool = True) -> np.ndarray:
    """rows: float32 [n_tokens, d_model] -> float32 [d_model], summed in float64."""
    if how not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {how!r}")
    r = np.asarray(rows, dtype=np.float64)
    v = r.mean(axis=0) if how == "mean" else r[0] if how == "cls" else r[-1]
    if normalize:
        norm = np.linalg.norm(v)
        v = v / norm if norm > 0 else v
    return v.astype(np.float32)


def pooled_rows(how: str, n: int) -> np.ndarray:
    """int32: the rows of an n-token input whose hidden states the pooling reads."""
    return np.arange(n, dtype=np.int32) if how == "mean" else np.array([0 if how == "cls" else n - 1], dtype=np.int32)


@dataclass
class EmbedJob:
    """One embed call's inputs (token id lists, checked), computed by the engine thread over one or more steps;
    future: float32 [len(inputs), d_model] when all are done, or the step's exception."""

    inputs: list[list[int]]
    how: str
    normalize: bool = True
    future: Future = field(default_factory=Future)
    vectors: list = field(default_factory=list)  # the inputs' vectors so far, in order
    taken: int = 0  # inputs given to a step so far

    def done(self, vector: np.ndarray) -> None:
        self.vectors.append(vector)
        if len(self.vectors) == len(self.inputs) and self.future.set_running_or_notify_cancel():
            self.future.set_result(np.stack(self.vectors))

    def fail(self, e: BaseException) -> None:
        if not self.future.done() and self.future.set_running_or_notify_cancel():
            self.future.set_exception(e)
