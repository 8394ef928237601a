"""The one check of token ids from a caller: a sequence of integers (Python or numpy, never bool, float, str or
bytes), each in [0, n_vocab).

    ids = token_ids(value, "prompt", n_vocab)     # list[int]; TypeError / ValueError naming what is wrong
"""

from __future__ import annotations

import numbers

import numpy as np


def token_ids(value, what: str = "token ids", n_vocab: int | None = None) -> list[int]:
    """value as a list of ints. TypeError when it is not a sequence of integers (a float is never truncated, text
    and bytes are never taken as ids); ValueError for a negative id or one >= n_vocab (when given)."""
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be a sequence of integer token ids, got {type(value).__name__}")
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not (np.issubdtype(value.dtype, np.integer) or value.size == 0):
            raise TypeError(f"{what} must be a 1-D array of integers, got {value.dtype} of shape {value.shape}")
        ids = value.tolist()
    else:
        try:
            ids = list(value)
        except TypeError:
            raise TypeError(f"{what} must be a sequence of integer token ids, got {type(value).__name__}") from None
        for i, t in enumerate(ids):
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise TypeError(f"{what}[{i}] must be an integer token id, got {t!r:.40}")
        ids = [int(t) for t in ids]
    for i, t in enumerate(ids):
        if t < 0 or (n_vocab is not None and t >= n_vocab):
            limit = f"[0, {n_vocab})" if n_vocab is not None else "non-negative"
            raise ValueError(f"{what}[{i}] = {t} is outside the vocabulary ({limit})")
    return ids
