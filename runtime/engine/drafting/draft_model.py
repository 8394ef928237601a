"""Drafting with a small model of the same vocabulary: for every decoding sequence that uses it, the draft model
proposes up to k greedy tokens per step, batched across sequences, over its own paged KV pool (prefix cached).

    draft = DraftModel(model, n_tokens=tokenizer.vocab_size)     # model: a Model over the draft GGUF
    draft.propose_all([(seq_id, seq.token_ids, k), ...])         # {seq_id: [up to k draft tokens]} this step
    draft.release(seq_id)                                         # the request ended: its draft KV goes back
    policy = ModelCostPolicy(draft.cost)                          # per sequence: whether the model pays this step

One propose_all is a few native steps of the draft model: first a catch-up step that writes the KV of each
sequence's tokens the draft has not seen (the one sampled last and the drafts verified since, or a prompt a chunk
of at most catch_up_chunk tokens at a time: a sequence still catching up proposes nothing this step, so the
target's decoding never waits for the whole draft prefill), then one step per draft position, each sequence fed
its previous draft. A sequence stops drafting early when the draft model's probability of its own greedy token
falls below p_min (a draft it doubts is likely rejected, and each draft row costs the target a row of its
verification step).

The draft KV holds the tokens it was fed: the sequence's tokens, then its drafts. After verification the
sequence's tokens agree with that up to the accepted drafts; the rest is truncated (blocks returned past it) at
the next proposal. Only real tokens are offered to the draft's prefix cache. Engine thread only.
"""

from __future__ import annotations

from collections.abc import Hashable
from collections.abc import Sequence as Seq

import numpy as np

from ...model.model import Model
from ...model.step_batch import StepBatchBuilder
from ..block_manager import BlockManager

DEFAULT_P_MIN = 0.5
DEFAULT_CATCH_UP_CHUNK = 64


class DraftMismatchError(ValueError):
    """A draft model that cannot draft for the model: another vocabulary, or the model itself."""


class _State:
    __slots__ = ("fed", "verified")

    def __init__(self, fed: list[int]):
        self.fed = fed  # tokens whose KV the draft pool holds, positions 0..len - 1
        self.verified = len(fed)  # leading fed tokens known to be the sequence's own


class DraftModel:
    """model: the draft's native Model (its own KV pool: n_blocks of block_size). n_tokens: ids at or past it are
    never proposed (padded embedding rows, or ids the target's vocabulary lacks)."""

    def __init__(
        self,
        model: Model,
        n_tokens: int,
        p_min: float = DEFAULT_P_MIN,
        catch_up_chunk: int = DEFAULT_CATCH_UP_CHUNK,
        name: str = "draft",
        cost: float = 0.0,
    ):
        if not 0.0 <= p_min < 1.0:
            raise ValueError(f"p_min must be in [0, 1), got {p_min!r}")
        self.model = model
        self.name = name
        self.n_tokens = min(n_tokens, model.n_vocab)
        self.p_min = p_min
        self.cost = cost  # one draft position's cost in decode steps of the model it drafts for (ModelCostPolicy)
        self.catch_up_chunk = catch_up_chunk
        self._bm = BlockManager(model.n_blocks, model.block_size)
        self._states: dict[Hashable, _State] = {}
        self.steps = 0  # native steps run (for tests and benchmarks)

    @property
    def num_used_blocks(self) -> int:
        """Draft KV blocks held by live sequences."""
        return self._bm.num_used_blocks

    def release(self, seq_id: Hashable) -> None:
        """Frees a sequence's draft KV (idempotent)."""
        if self._states.pop(seq_id, None) is not None:
            self._bm.free(seq_id)

    def reset(self) -> None:
        """Forgets every sequence and the prefix cache (the engine's pool was rebuilt)."""
        self._bm = BlockManager(self.model.n_blocks, self.model.block_size)
        self._states.clear()

    def propose_all(self, items: Seq[tuple[Hashable, list[int], int]]) -> dict[Hashable, list[int]]:
        """items: (seq_id, the sequence's tokens, k >= 1 drafts wanted). Returns the drafts of each sequence that
        has some (at most k each)."""
        feed: list[tuple[Hashable, list[int], int, int]] = []  # (seq_id, tokens to feed, first position, k)
        for seq_id, tokens, k in items:
            start = self._sync(seq_id, tokens)
            if start is None:
                continue
            if len(tokens) - start > self.catch_up_chunk:  # still catching up with a prompt: a chunk, no drafts
                feed.append((seq_id, tokens[start : start + self.catch_up_chunk], start, 0))
            else:
                feed.append((seq_id, tokens[start:], start, k))
        if not feed:
            return {}
        drafts: dict[Hashable, list[int]] = {}
        last = self._step(feed, real=True)  # one row per sequence that drafts: the logits after its last token
        live = [(f[0], f[3]) for f in feed if f[3] > 0]
        for j in range(max((k for _, k in live), default=0)):
            nxt = []
            for (seq_id, k), row in zip(live, last):
                tok, p = self._greedy(row)
                if p < self.p_min and j > 0:  # the first draft is always offered: verification pays for one row
                    continue
                drafts.setdefault(seq_id, []).append(tok)
                if len(drafts[seq_id]) < k:
                    nxt.append((seq_id, k))
            live = nxt
            if not live:
                break
            last = self._step(
                [(seq_id, [drafts[seq_id][-1]], len(self._states[seq_id].fed), k) for seq_id, k in live], real=False
            )
        return drafts

    def _sync(self, seq_id: Hashable, tokens: list[int]) -> int | None:
        """Brings the draft's table for seq_id in line with tokens: keeps the fed prefix the sequence agrees with,
        truncates the rest. Returns the first position to feed, or None when the pool has no room now."""
        st = self._states.get(seq_id)
        if st is None:
            table = self._bm.allocate(seq_id, tokens)
            if table is None:
                return None
            st = self._states[seq_id] = _State(list(tokens[: table.num_cached_tokens]))
            return len(st.fed)
        keep = st.verified
        n = min(len(st.fed), len(tokens))
        while keep < n and st.fed[keep] == tokens[keep]:
            keep += 1
        del st.fed[keep:]
        st.verified = keep
        self._bm.mark_computed(seq_id, tokens, keep)
        table = self._bm.truncate(seq_id, keep)  # rejected drafts' slots (and whole blocks past them) go back
        if self._bm.append_slots(seq_id, len(tokens) - table.num_slots) is None:
            return None
        return keep

    def _step(self, feed: list[tuple[Hashable, list[int], int, int]], real: bool) -> list[np.ndarray]:
        """One native step of the draft model: feed[i] = (seq_id, tokens, first position, k), tokens the
        sequence's own (real) or drafts. Writes their KV and returns the logits row after the last token of every
        sequence with k > 0, in order."""
        builder = StepBatchBuilder(self._bm.block_size)
        for seq_id, toks, p0, k in feed:
            n = len(toks)
            need = p0 + n - self._bm.block_table(seq_id).num_slots
            if need > 0 and self._bm.append_slots(seq_id, need) is None:
                raise RuntimeError("the draft KV pool is full")  # _sync reserved the tokens; only drafts could miss
            builder.add(toks, p0, self._bm.block_table(seq_id).block_ids, logits=[n - 1] if k > 0 else ())
            st = self._states[seq_id]
            st.fed[p0:] = toks
            if real:
                st.verified = len(st.fed)
        logits = self.model.forward(builder.build())
        self.steps += 1
        return list(logits)

    def _greedy(self, row: np.ndarray) -> tuple[int, float]:
        """The draft's most likely token below n_tokens and its probability."""
        r = row[: self.n_tokens]
        tok = int(np.argmax(r))
        if self.p_min <= 0.0:
            return tok, 1.0
        z = np.exp(r - r[tok], dtype=np.float32).sum()
        return tok, float(1.0 / z)


class ModelCostPolicy:
    """Whether one sequence's drafts should come from the draft model this step.

    Each draft the model proposes costs a draft position (draft.cost) and a verification row (VERIFY_ROW_COST), and
    each one kept saves a decode step, so the model drafts while the share of its drafts kept (decayed over about
    the last ten proposals) exceeds that cost. Below it the model rests and probes after PROBE_EVERY steps, then
    after twice as many each time the probe does not pay (up to MAX_PROBE_EVERY: a probe feeds the draft the tokens
    since the last one, a prefill of its own). (Kept first drafts alone measured too lenient: on the 1.5B's prose,
    0.5B drafting, 42% of drafts kept still ran at 0.93x plain.) Only the model's own proposals count
    (observe(..., from_model=False) is ignored)."""

    VERIFY_ROW_COST = 0.1  # a row beyond the first of a target step, in one-row steps (AVX-512 Xeon: N = 8 ~ 1.6x)
    PROBE_EVERY = 16
    MAX_PROBE_EVERY = 128
    DECAY = 0.9

    def __init__(self, cost: float):
        self.cost = cost  # one draft position, in decode steps of the model it drafts for
        self._kept = self._drafted = 0.0  # decayed counts of the model's drafts verified and kept
        self._tries = 0.0  # decayed count of the model's proposals
        self._idle = 0  # steps the model has rested
        self._probe_every = self.PROBE_EVERY

    def pays(self) -> bool:
        """Whether the model drafts this step; False while it rests (each call is a step)."""
        if self._tries < 4 or self._kept > (self.cost + self.VERIFY_ROW_COST) * self._drafted:
            self._probe_every = self.PROBE_EVERY
            return True
        self._idle += 1
        if self._idle >= self._probe_every:
            self._idle = 0
            self._probe_every = min(self.MAX_PROBE_EVERY, 2 * self._probe_every)
            return True
        return False

    def observe(self, proposed: int, accepted: int) -> None:
        """The verification of one of the model's proposals."""
        if proposed > 0:
            self._kept = self.DECAY * self._kept + accepted
            self._drafted = self.DECAY * self._drafted + proposed
            self._tries = self.DECAY * self._tries + 1


def check_draft_vocab(target, draft, target_name: str, draft_name: str) -> None:
    """DraftMismatchError naming the first difference when the draft tokenizer's ids do not mean the target's: the same
    tokenizer model, the same end-of-generation ids, the same token text for every id both have, and sizes that
    differ by no more than padding (llama.cpp's rule: 128)."""
    where = f"the draft model {draft_name} cannot draft for {target_name}"
    if draft.model != target.model:
        raise DraftMismatchError(f"{where}: its tokenizer is {draft.model!r}, the model's is {target.model!r}")
    if abs(draft.vocab_size - target.vocab_size) > 128:
        raise DraftMismatchError(
            f"{where}: its vocabulary has {draft.vocab_size} tokens, the model's {target.vocab_size}"
        )
    for i, (a, b) in enumerate(zip(target.tokens, draft.tokens)):
        if a != b:
            raise DraftMismatchError(f"{where}: token {i} is {b!r} in the draft's vocabulary and {a!r} in the model's")
    if set(draft.stop_ids) != set(target.stop_ids):
        raise DraftMismatchError(
            f"{where}: its end-of-generation tokens {sorted(draft.stop_ids)} differ from the model's "
            f"{sorted(target.stop_ids)}"
        )
