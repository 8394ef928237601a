"""Prompt-lookup drafting for one sequence: propose the tokens that followed the most recent earlier occurrence of
its last n tokens (n from max_n down to min_n, longest first), as many as its adaptive draft length allows.

    d = NgramDrafter(max_n=4, min_n=1, max_draft=16)
    drafts = d.propose(seq.token_ids)        # [] or up to d.draft_len tokens; the index catches up with new tokens
    d.observe(proposed=len(drafts), accepted=a)   # the verified prefix length: adapts draft_len, backs off

Index: for every n-gram whose next token is known, where that next token is (the latest occurrence wins), kept
as tokens arrive, so a proposal costs O(max_n) dict look-ups whatever the sequence's length. The sequence's own
last n tokens never match themselves: an n-gram enters the index only once its follower exists.

Shared table (ngram_table.py): what other requests of the model generated (the engine's NgramTable, fed as
requests end) drafts instead where it matches a longer suffix than the sequence's own tokens do.

Draft length: starts at start_draft; all drafts accepted doubles it (up to max_draft), a partial acceptance sets
it to what was accepted plus one. A verification step of k + 1 tokens costs more than a decode step on a CPU
(more activation rows per weight read), so drafts that keep failing (prose, free generation) stop drafting:
after `patience` proposals in a row with nothing accepted the drafter rests for `cooldown` steps, doubling each
time it fails again on waking (up to max_cooldown), and probes with start_draft tokens when it wakes. One
accepted token resets the rest period.
"""

from __future__ import annotations

from collections.abc import Sequence

from .ngram_table import NgramTable

DEFAULT_MAX_N = 4
DEFAULT_MIN_N = 1
# whole-file edits on the AVX-512 Xeon, 1.5B: 16 decoded 2.9-3.1x plain against 2.6-2.7x with 8 (a step of 17 rows
# costs about 2.5x a step of one there); drafts that fail shorten at once, so prose does not pay for it
DEFAULT_MAX_DRAFT = 16


class DraftPacer:
    """The draft length and back-off of one sequence's drafting (the rules above), whatever proposes the drafts."""

    def __init__(
        self,
        max_draft: int = DEFAULT_MAX_DRAFT,
        start_draft: int = 2,
        patience: int = 2,
        cooldown: int = 4,
        max_cooldown: int = 64,
    ):
        if not 1 <= start_draft <= max_draft:
            raise ValueError(f"need 1 <= start_draft <= max_draft, got {start_draft}, {max_draft}")
        self.max_draft = max_draft
        self.start_draft, self.patience = start_draft, patience
        self.base_cooldown, self.max_cooldown = cooldown, max_cooldown
        self.draft_len = start_draft
        self._misses = 0  # proposals in a row with nothing accepted
        self._rest = 0  # steps left without drafting
        self._cooldown = cooldown  # the next rest period

    def resting(self) -> bool:
        """True (and one step of rest spent) while backing off: no drafts this step."""
        if self._rest > 0:
            self._rest -= 1
            return True
        return False

    def observe(self, proposed: int, accepted: int) -> None:
        """The verification of the last proposal: `accepted` of its `proposed` drafts were kept."""
        if proposed <= 0:
            return
        if accepted >= proposed:
            self.draft_len = min(self.max_draft, 2 * self.draft_len)
        else:
            self.draft_len = max(1, min(self.max_draft, accepted + 1))
        if accepted > 0:
            self._misses = 0
            self._cooldown = self.base_cooldown
            return
        self._misses += 1
        if self._misses >= self.patience:
            self._rest = self._cooldown
            self._cooldown = min(self.max_cooldown, 2 * self._cooldown)
            self._misses = self.patience - 1  # one more miss on waking rests again, longer
            self.draft_len = self.start_draft


class NgramDrafter(DraftPacer):
    """One sequence's proposer. Tokens may only be appended to the sequence between calls (a preempted one is
    recomputed from the same tokens, so the index stays valid); a sequence that shrinks starts a fresh index."""

    def __init__(
        self,
        max_n: int = DEFAULT_MAX_N,
        min_n: int = DEFAULT_MIN_N,
        max_draft: int = DEFAULT_MAX_DRAFT,
        start_draft: int = 2,
        patience: int = 2,
        cooldown: int = 4,
        max_cooldown: int = 64,
        shared: NgramTable | None = None,
    ):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        super().__init__(max_draft, start_draft, patience, cooldown, max_cooldown)
        self.max_n, self.min_n = max_n, min_n
        self.shared = shared  # what other requests generated: drafts from it where it matches a longer suffix
        self._index: dict[tuple[int, ...], int] = {}  # n-gram -> position of the token that followed it last
        self._indexed = 0  # tokens[:_indexed] have every n-gram ending before position _indexed - 1 indexed

    def _catch_up(self, tokens: Sequence[int]) -> None:
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
        no suffix of min_n..max_n tokens occurred before. Ignores the adaptive state."""
        return self._match(tokens, k)[1]

    def _match(self, tokens: Sequence[int], k: int) -> tuple[int, list[int]]:
        """(n, drafts): the length of the suffix lookup matched (0: none) and what followed it."""
        self._catch_up(tokens)
        n_tok = len(tokens)
        for n in range(min(self.max_n, n_tok), self.min_n - 1, -1):
            pos = self._index.get(tuple(tokens[n_tok - n :]))
            if pos is not None:
                return n, list(tokens[pos : min(pos + k, n_tok)])
        return 0, []

    def propose(self, tokens: Sequence[int]) -> list[int]:
        """The drafts for this step: [] while resting or when nothing matches."""
        if self.resting():
            self._catch_up(tokens)
            return []
        return self.draft(tokens, self.draft_len)

    def draft(self, tokens: Sequence[int], k: int) -> list[int]:
        """Up to k drafts, the adaptive state aside. With a shared table, its drafts win when they follow a longer
        match than the sequence's own."""
        n, own = self._match(tokens, k)
        if self.shared is None or n >= self.max_n:
            return own
        n_shared, other = self.shared.draft(tokens, k)
        return other if n_shared > n else own
