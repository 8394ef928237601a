"""Prompt-lookup drafting for one sequence: propose the tokens that followed the most recent earlier occurrence of
its last n tokens (n from max_n down to min_n, longest first).

    ngrams = NgramIndex(max_n=4, min_n=1, shared=table)
    drafts = ngrams.draft(seq.token_ids, k)       # [] or up to k tokens; the index catches up with new tokens

Index: for every n-gram whose next token is known, where that next token is (the latest occurrence wins), kept
as tokens arrive, so a proposal costs O(max_n) dict look-ups whatever the sequence's length. The sequence's own
last n tokens never match themselves: an n-gram enters the index only once its follower exists.

Shared table (ngram_table.py): what other requests of the model generated (the engine's NgramTable, fed what
requests generated once they end, a slice a step) drafts instead where it matches a longer suffix than the
sequence's own tokens do. How many drafts and when is the pacer's (pacer.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from .ngram_table import NgramTable

DEFAULT_MAX_N = 4
DEFAULT_MIN_N = 1


class NgramIndex:
    """One sequence's index. Tokens may only be appended to the sequence between calls (a preempted one is
    recomputed from the same tokens, so the index stays valid); a sequence that shrinks starts a fresh index."""

    def __init__(self, max_n: int = DEFAULT_MAX_N, min_n: int = DEFAULT_MIN_N, shared: NgramTable | None = None):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.max_n, self.min_n = max_n, min_n
        self.shared = shared  # what other requests generated: drafts from it where it matches a longer suffix
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> position of the token that followed it last
        self._indexed = 0  # tokens[:_indexed] have every n-gram ending before position _indexed - 1 indexed

    def catch_up(self, tokens: Sequence[int]) -> None:
        """Indexes the tokens appended since the last call (a proposal does it too)."""
        n_tok = len(tokens)
        if n_tok < self._indexed:
            self._index.clear()
            self._indexed = 0
        index = self._index
        # the n-grams that end at i get follower i + 1, for every i + 1 < n_tok not done yet
        for i in range(max(self._indexed - 1, 0), n_tok - 1):
            for n in range(self.min_n, min(self.max_n, i + 1) + 1):
                index[tuple(tokens[i - n + 1 : i + 1])] = i + 1
        self._indexed = n_tok

    def lookup(self, tokens: Sequence[int], k: int) -> list[int]:
        """At most k tokens that followed the latest earlier occurrence of the longest matching suffix; [] when
        no suffix of min_n..max_n tokens occurred before; the sequence's own tokens only."""
        return self._match(tokens, k)[1]

    def _match(self, tokens: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, drafts): the length of the suffix lookup matched (0: none) and what followed it."""
        self.catch_up(tokens)
        n_tok = len(tokens)
        for n in range(min(self.max_n, n_tok), self.min_n - 1, -1):
            pos = self._index.get(tuple(tokens[n_tok - n :]))
            if pos is not None:
                return n, list(tokens[pos : min(pos + k, n_tok)])
        return 0, []

    def draft(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k drafts. With a shared table, its drafts win when they follow a longer match than the sequence's
        own."""
        n, own = self._match(tokens, k)
        if self.shared is None or n >= self.max_n:
            return own
        n_shared, other = self.shared.draft(tokens, k)
        return other if n_shared > n else own
