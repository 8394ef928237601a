"""Incremental detokenization for streaming: token ids in, text out as soon as it is complete UTF-8.

    d = tok.detokenizer()
    for tid in generated:
        send(d.push(tid))     # "" while a multi-byte character is still split across tokens
    send(d.flush())           # whatever is left; an unfinished character becomes U+FFFD

The concatenated output of push() and flush() equals tok.decode(ids) for the same ids.
"""

from __future__ import annotations

import codecs
import operator
from collections.abc import Sequence


class IncrementalDetokenizer:
    """pieces: [n_vocab] bytes each token id decodes to (b"" for hidden tokens).
    strip_first_space: drop one leading space from the first non-empty piece (SPM space prefix)."""

    def __init__(self, pieces: Sequence[bytes], strip_first_space: bool = False):
        self._pieces = pieces
        self._strip = strip_first_space
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token; ValueError for an id outside the vocabulary, TypeError for a non-integer."""
        i = operator.index(token_id)
        if not 0 <= i < len(self._pieces):
            raise ValueError(f"token id {i} is outside the vocabulary [0, {len(self._pieces)})")
        piece = self._pieces[i]
        if self._strip and piece:
            self._strip = False
            if piece[:1] == b" ":
                piece = piece[1:]
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """Text still held back, with an unfinished character replaced by U+FFFD; the stream can go on after."""
        return self._decoder.decode(b"", final=True)
