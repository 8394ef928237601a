"""The engine's drafting: speculative proposals for its decoding sequences behind one small interface.

    drafter = Drafter(draft=None, shared_ngrams=True)         # draft: a DraftModel, or None
    drafter.open(seq_id, "ngram")                             # per request: "ngram" | "draft" | "off"
    drafts = drafter.propose([(seq_id, tokens), ...])         # once per step, for the decoding sequences:
                                                              # {seq_id: [draft tokens]} for those that have some
    drafter.observe(seq_id, proposed=k, accepted=a)           # after verification: a of its k drafts kept
    drafter.close(seq_id, tokens, num_prompt_tokens)          # the request ended (its draft KV goes back)
    drafter.learn(limit)                                      # learns up to limit of what ended requests generated
    drafter.reset()                                           # forget every cache (the engine's pool was rebuilt)

Per sequence, a proposer and a pacer (pacer.py: how many drafts, when to rest):
- "ngram": prompt lookup over the sequence's own tokens and the table of what earlier requests generated
  (ngram.py, ngram_table.py); free to propose. What a request generated is queued for the table when it ends and
  learned LEARN_PER_STEP tokens at a time by the engine, after each step's output (beside the device's next step
  where the engine pipelines) and while it is idle, so that many replies ending together do not hold up the
  others' next step.
- "draft": a small model of the same vocabulary (draft_model.py), batched over every sequence that uses it, at most
  8 drafts. An n-gram match of 2+ tokens drafts first that step when ngrams_first (free, and on edits of given text
  longer and surer than what a small model guesses; measured on a copy task: 8 draft-model steps instead of 38),
  and the model drafts only while its record pays for its cost (ModelCostPolicy).
Drafts never change a token (the engine verifies them); they only save steps. Engine thread only.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from .draft_model import DraftModel, ModelCostPolicy
from .ngram import NgramIndex
from .ngram_table import NgramTable
from .pacer import DraftPacer

MODES = ("ngram", "off", "draft")
DRAFT_MODEL_MAX = 8  # the most drafts the model proposes per step
DRAFT_MODEL_START = 4
NGRAMS_BEFORE_MODEL_MIN_N = 2  # an n-gram match must be this long to draft instead of the model
LEARN_PER_STEP = 128  # queued tokens the shared table learns after a step: about 0.45 ms (Zen 3)


def accepted_prefix(run: Sequence[int], drafts: Sequence[int]) -> int:
    """How many of the drafts verification kept: the leading drafts the verified run repeats."""
    n = 0
    while n < min(len(drafts), len(run)) and run[n] == drafts[n]:
        n += 1
    return n


class _Seq:
    __slots__ = ("from_model", "mode", "ngrams", "pacer", "policy")

    def __init__(self, mode: str, ngrams: NgramIndex, pacer: DraftPacer, policy: ModelCostPolicy | None):
        self.mode = mode
        self.ngrams = ngrams
        self.pacer = pacer
        self.policy = policy
        self.from_model = False  # whether the proposal being verified came from the draft model


class Drafter:
    """draft: the draft model ("draft" mode needs it). shared_ngrams: n-gram drafting also looks up what earlier
    requests generated. ngram, pacer: NgramIndex and DraftPacer settings of "ngram" mode (defaults otherwise)."""

    def __init__(
        self,
        draft: DraftModel | None = None,
        shared_ngrams: bool = True,
        ngram: dict | None = None,
        pacer: dict | None = None,
        ngrams_first: bool = True,
    ):
        self.draft = draft
        self.table = NgramTable() if shared_ngrams else None
        self.ngrams_first = ngrams_first
        self._ngram = dict(ngram or {})
        self._pacer = dict(pacer or {})
        self._seqs: dict[Hashable, _Seq] = {}

    def check_mode(self, mode) -> str:
        """mode, or ValueError naming what is wrong."""
        if mode not in MODES:
            raise ValueError(f"speculative must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
        if mode == "draft" and self.draft is None:
            raise ValueError('speculative "draft" needs a draft model, and this model was loaded without one')
        return mode

    def open(self, seq_id: Hashable, mode: str) -> None:
        """Starts drafting for a sequence (mode "off": it never gets drafts)."""
        self.check_mode(mode)
        if mode == "off":
            return
        if mode == "ngram":
            st = _Seq(mode, NgramIndex(shared=self.table, **self._ngram), DraftPacer(**self._pacer), None)
        else:
            ngrams = NgramIndex(min_n=NGRAMS_BEFORE_MODEL_MIN_N, shared=self.table)
            pacer = DraftPacer(max_draft=DRAFT_MODEL_MAX, start_draft=DRAFT_MODEL_START)
            st = _Seq(mode, ngrams, pacer, ModelCostPolicy(self.draft.cost))
        self._seqs[seq_id] = st

    def propose(self, items: Sequence[tuple[Hashable, Sequence[int]]]) -> dict[Hashable, list[int]]:
        """items: (seq_id, its tokens) of each sequence decoding this step. Returns the drafts of those that have
        some; one batched round of the draft model serves every sequence it drafts for."""
        out: dict[Hashable, list[int]] = {}
        by_model: list[tuple[Hashable, Sequence[int], int]] = []
        for seq_id, tokens in items:
            st = self._seqs.get(seq_id)
            if st is None:
                continue
            if st.pacer.resting():
                if st.mode == "ngram":
                    st.ngrams.catch_up(tokens)
                continue
            k = st.pacer.draft_len
            if st.mode == "ngram":
                drafts = st.ngrams.draft(tokens, k)
            else:
                drafts = st.ngrams.draft(tokens, k) if self.ngrams_first else []
                st.from_model = not drafts
                if st.from_model and st.policy.pays():
                    by_model.append((seq_id, tokens, k))
            if drafts:
                out[seq_id] = drafts
        if by_model:
            out.update(self.draft.propose_all(by_model))
        return out

    def observe(self, seq_id: Hashable, proposed: int, accepted: int) -> None:
        """The verification of the sequence's last proposal: accepted of its proposed drafts were kept."""
        st = self._seqs.get(seq_id)
        if st is None or proposed <= 0:
            return
        if st.from_model:
            st.policy.observe(proposed, accepted)
        st.pacer.observe(proposed, accepted)

    def close(self, seq_id: Hashable, tokens: Sequence[int], num_prompt_tokens: int) -> None:
        """The request is over: what it generated feeds the shared table, its draft KV goes back."""
        if self.table is not None and len(tokens) > num_prompt_tokens:
            self.table.queue(tokens, num_prompt_tokens)
        st = self._seqs.pop(seq_id, None)
        if st is not None and st.mode == "draft":
            self.draft.release(seq_id)

    def learn(self, limit: int | None = None) -> int:
        """Learns up to `limit` (None: all) queued tokens of ended requests into the shared table; how many."""
        return self.table.learn_queued(limit) if self.table is not None else 0

    def reset(self) -> None:
        """Forgets every sequence, the draft model's cache and the shared table (the engine's pool was rebuilt: after
        a failed step its requests are gone without a close)."""
        self._seqs.clear()
        if self.draft is not None:
            self.draft.reset()
        if self.table is not None:
            self.table.clear()
