"""The memo both tokenizers put in front of their merge loops: pre-tokenized piece -> token ids.

    cache = PieceCache(encode_piece)        # encode_piece(str) -> list[int], a pure function of the piece
    ids = cache.encode(pieces)              # the concatenated ids of every piece, in order

Text repeats its words, so most pieces are merged once. The memo is dropped whole when it holds `limit`
pieces, which bounds its memory without the bookkeeping of an LRU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

LIMIT = 1 << 17  # cached pieces before the memo is dropped


class PieceCache:
    def __init__(self, encode_piece: Callable[[str], list[int]], limit: int = LIMIT):
        self._encode_piece = encode_piece
        self._limit = limit
        self._ids: dict[str, list[int]] = {}

    def encode(self, pieces: Iterable[str]) -> list[int]:
        out: list[int] = []
        memo = self._ids
        for piece in pieces:
            ids = memo.get(piece)
            if ids is None:
                ids = self._encode_piece(piece)
                if len(memo) >= self._limit:
                    memo.clear()
                memo[piece] = ids
            out += ids
        return out
