"""Paged KV block bookkeeping: round trips, prefix reuse, eviction order, a full pool, slot mapping, misuse,
and a state machine that simulates KV writes to prove shared blocks are never overwritten."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from localllm.engine.block_manager import BlockManager, BlockTable
from localllm.model.step_batch import StepBatchBuilder


def held_blocks(bm: BlockManager) -> dict[int, int]:
    """block id -> number of live tables holding it, read only through the public snapshots."""
    counts: dict[int, int] = {}
    for seq_id in list(bm._seqs):
        for b in bm.block_table(seq_id).block_ids:
            counts[b] = counts.get(b, 0) + 1
    return counts


def check_invariants(bm: BlockManager) -> None:
    held = held_blocks(bm)
    free = list(bm._free)
    assert len(free) == len(set(free)) == bm.num_free_blocks
    assert not set(free) & set(held), "a block is both free and held"
    assert set(free) | set(held) == set(range(bm.n_blocks)), "a block is lost"
    for b in range(bm.n_blocks):
        assert bm._ref[b] == held.get(b, 0)
    for key, b in bm._cached.items():
        assert bm._key[b] == key
    assert sum(k is not None for k in bm._key) == len(bm._cached)
    for seq_id in bm._seqs:
        t = bm.block_table(seq_id)
        assert len(t.block_ids) == len(set(t.block_ids)) == bm.blocks_needed(t.num_slots)
        assert t.array.dtype == np.int32 and t.array.tolist() == list(t.block_ids) and not t.array.flags.writeable
    for b, n in held.items():
        assert n == 1 or bm._key[b] is not None, "a block shared by several tables must be a cached full block"


def computed(bm: BlockManager, seq_id, tokens) -> BlockTable:
    table = bm.allocate(seq_id, tokens)
    assert table is not None
    bm.mark_computed(seq_id, tokens, len(tokens))
    return table


def test_round_trip_leaves_the_pool_whole():
    bm = BlockManager(64, 16)
    rng = np.random.default_rng(0)
    for round_ in range(3):
        for i in range(5):
            toks = rng.integers(0, 1000, 16 * i + 7).tolist()
            table = computed(bm, (round_, i), toks)
            assert table.num_slots == len(toks) and len(table.block_ids) == i + 1
            assert bm.append_slots((round_, i), 20) is not None
            check_invariants(bm)
        for i in range(5):
            bm.free((round_, i))
        check_invariants(bm)
        assert bm.num_free_blocks == 64
        assert all(r == 0 for r in bm._ref)


def test_prefix_is_shared_and_partial_blocks_are_not():
    bm = BlockManager(32, 4)
    a = list(range(100, 110))  # two full blocks and a partial one
    ta = computed(bm, "a", a)
    assert ta.num_cached_tokens == 0
    tb = bm.allocate("b", a[:8] + [1, 2, 3])
    assert tb.num_cached_tokens == 8
    assert tb.block_ids[:2] == ta.block_ids[:2] and tb.block_ids[2] != ta.block_ids[2]
    tc = bm.allocate("c", a + [7, 7, 7])  # a's partial third block was never offered
    assert tc.num_cached_tokens == 8 and tc.block_ids[2] not in ta.block_ids
    td = bm.allocate("d", a[:8])  # fully cached prompt: the block holding the last token is recomputed
    assert td.num_cached_tokens == 4 and td.block_ids[0] == ta.block_ids[0] and td.block_ids[1] != ta.block_ids[1]
    te = bm.allocate("e", [999] + a[1:])  # first block differs: later identical blocks do not match
    assert te.num_cached_tokens == 0
    check_invariants(bm)
    assert bm._ref[ta.block_ids[0]] == 4 and bm._ref[ta.block_ids[1]] == 3


def test_blocks_are_offered_only_once_computed():
    bm = BlockManager(16, 4)
    toks = list(range(12))
    bm.allocate("a", toks)
    assert bm.allocate("b", toks + [1]).num_cached_tokens == 0
    bm.mark_computed("a", toks, 6)  # one full block computed so far
    assert bm.allocate("c", toks + [1]).num_cached_tokens == 4
    bm.mark_computed("a", toks, 12)
    assert bm.allocate("d", toks + [1]).num_cached_tokens == 12
    check_invariants(bm)


def test_generated_tokens_become_a_reusable_prefix():
    bm = BlockManager(16, 4)
    prompt = [5, 6, 7]
    computed(bm, "turn1", prompt)
    out = []
    for t in [8, 9, 10, 11, 12]:  # decode: one slot per step, then the written token is committed
        assert bm.append_slots("turn1", 1) is not None
        out.append(t)
        bm.mark_computed("turn1", prompt + out, len(prompt) + len(out))
    bm.free("turn1")
    turn2 = prompt + out + [13, 14]
    assert bm.allocate("turn2", turn2).num_cached_tokens == 8
    check_invariants(bm)


def test_duplicate_content_keeps_the_first_cached_block():
    bm = BlockManager(16, 4)
    toks = [1, 2, 3, 4, 5]
    ta, tb = bm.allocate("a", toks), bm.allocate("b", toks)  # same prompt, both computed in one step
    bm.mark_computed("a", toks, 5)
    bm.mark_computed("b", toks, 5)
    assert bm._cached[bm._key[ta.block_ids[0]]] == ta.block_ids[0] and bm._key[tb.block_ids[0]] is None
    bm.free("b")
    assert bm.allocate("c", toks).num_cached_tokens == 4
    check_invariants(bm)


def test_eviction_order_is_lru_tail_first():
    bm = BlockManager(6, 2)
    computed(bm, "a", [1, 2, 3, 4, 9])  # blocks 0 1 2; 0 and 1 cached
    computed(bm, "b", [5, 6, 7, 8, 9])  # blocks 3 4 5; 3 and 4 cached
    bm.free("a")
    bm.free("b")
    assert list(bm._free) == [5, 2, 1, 0, 4, 3]  # never-cached first, then a (freed first), each tail first
    computed(bm, "c", [20, 21, 22, 23, 24])  # takes 5 and 2, then evicts a's tail block 1
    t = bm.allocate("a2", [1, 2, 3, 4, 9])
    assert t.num_cached_tokens == 2 and t.block_ids == (0, 4, 3)  # a's head survived; b's blocks evicted next
    check_invariants(bm)
    bm.free("a2")
    bm.free("c")
    assert bm.allocate("b2", [5, 6, 7, 8, 9]).num_cached_tokens == 0


def test_a_cache_hit_refreshes_recency():
    bm = BlockManager(4, 2)
    computed(bm, "a", [1, 2, 0])  # blocks 0 (cached) and 1
    computed(bm, "b", [3, 4, 0])  # blocks 2 (cached) and 3
    bm.free("a")
    bm.free("b")  # queue: 3 1 0 2
    assert bm.allocate("a2", [1, 2, 5]).num_cached_tokens == 2
    bm.free("a2")  # queue: 3 1 2 0: a's block is now the most recently used
    bm.allocate("c", [9, 9, 9, 9, 9, 9])  # 3 blocks: evicts b's block 2, not a's block 0
    bm.free("c")
    assert bm.allocate("a3", [1, 2, 5]).num_cached_tokens == 2
    assert bm.allocate("b3", [3, 4, 5]).num_cached_tokens == 0
    check_invariants(bm)


def test_pool_full_returns_none_and_changes_nothing():
    bm = BlockManager(4, 4)
    computed(bm, "a", list(range(10)))  # 3 blocks
    before = (list(bm._free), list(bm._ref), dict(bm._cached))
    assert bm.allocate("b", list(range(50, 58))) is None  # needs 2, 1 free
    assert bm.allocate("c", list(range(8)) + [1, 1, 1, 1, 1]) is None  # 2 cached + 2 new > 1 free
    assert bm.append_slots("a", 7) is None  # 10 + 7 tokens need 5 blocks
    assert (list(bm._free), list(bm._ref), dict(bm._cached)) == before
    assert "b" not in bm._seqs and bm.block_table("a").num_slots == 10
    assert bm.append_slots("a", 6).num_slots == 16  # exactly fills the last block
    assert bm.num_free_blocks == 0
    check_invariants(bm)


def test_cached_free_blocks_count_as_free_unless_they_are_the_hits():
    bm = BlockManager(4, 4)
    computed(bm, "a", list(range(9)))  # blocks 0 1 cached, 2 partial
    bm.free("a")
    assert bm.allocate("b", list(range(8)) + [0]).num_cached_tokens == 8  # 2 hits + 1 new block
    check_invariants(bm)
    bm.free("b")
    assert bm.allocate("c", list(range(100, 116))) is not None  # 4 blocks: evicts both cached ones
    assert not bm._cached
    check_invariants(bm)


def test_truncate_gives_back_draft_blocks():
    bm = BlockManager(8, 4)
    prompt = list(range(6))
    computed(bm, "s", prompt)
    bm.append_slots("s", 9)  # last token + 8 drafts: 15 slots, 4 blocks
    assert bm.num_free_blocks == 4
    t = bm.truncate("s", 9)  # 2 drafts accepted, plus the bonus token
    assert t.num_slots == 9 and len(t.block_ids) == 3 and bm.num_free_blocks == 5
    with pytest.raises(ValueError, match="num_tokens"):
        bm.truncate("s", 10)
    with pytest.raises(ValueError, match="num_tokens"):
        bm.truncate("s", 3)  # block 0 is already offered to the cache
    check_invariants(bm)


def test_misuse_raises_value_error():
    with pytest.raises(ValueError, match="n_blocks"):
        BlockManager(0, 16)
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(8, 1.5)
    bm = BlockManager(8, 4)
    bm.allocate("a", [1, 2, 3])
    with pytest.raises(ValueError, match="already allocated"):
        bm.allocate("a", [1])
    with pytest.raises(ValueError, match="empty"):
        bm.allocate("b", [])
    with pytest.raises(ValueError, match="^n must"):
        bm.append_slots("a", -1)
    with pytest.raises(ValueError, match="num_computed"):
        bm.mark_computed("a", [1, 2, 3, 4], 4)  # only 3 slots
    bm.free("a")
    for call in (
        lambda: bm.free("a"),
        lambda: bm.append_slots("a", 1),
        lambda: bm.block_table("a"),
        lambda: bm.mark_computed("a", [1], 1),
        lambda: bm.truncate("ghost", 0),
    ):
        with pytest.raises(ValueError, match="unknown sequence"):
            call()
    assert bm.num_free_blocks == 8


def test_tables_are_snapshots():
    bm = BlockManager(8, 4)
    t = bm.allocate("a", [1, 2, 3, 4, 5])
    with pytest.raises(AttributeError):
        t.num_slots = 0
    with pytest.raises(ValueError):
        t.array[0] = 7  # read-only: a step's table row is a copy of it, never the pool's state
    bm.append_slots("a", 8)
    assert len(t.block_ids) == 2 and len(bm.block_table("a").block_ids) == 4
    assert t.array.tolist() == list(t.block_ids)  # the old snapshot's array did not grow either
    bm.truncate("a", 5)
    assert bm.block_table("a").array.tolist() == list(t.block_ids)


def _slots(bm: BlockManager, seq_id, start: int, end: int) -> np.ndarray:
    """The KV slots of positions start..end - 1 of seq_id, as a step's batch maps them."""
    if end <= start:
        return np.empty(0, dtype=np.int32)
    b = StepBatchBuilder(bm.block_size)
    b.add(np.zeros(end - start), start, bm.block_table(seq_id).block_ids)
    return b.build().slot_mapping


class KVSimulation(RuleBasedStateMachine):
    """Random interleavings of allocate / append / truncate / free over prompts that share prefixes. Every
    computed position's token is "written" to its KV slot; each live sequence must read back its own tokens."""

    @initialize(n_blocks=st.integers(4, 24), block_size=st.sampled_from([1, 2, 3, 4]))
    def setup(self, n_blocks, block_size):
        self.bm = BlockManager(n_blocks, block_size)
        self.kv: dict[int, int] = {}  # flat slot -> token written there
        self.tokens: dict[int, list[int]] = {}  # live sequence -> its tokens with written KV
        self.next_id = 0

    def write(self, seq_id, start):
        toks = self.tokens[seq_id]
        slots = _slots(self.bm, seq_id, start, len(toks))
        for s, t in zip(slots.tolist(), toks[start:]):
            self.kv[s] = t
        self.bm.mark_computed(seq_id, toks, len(toks))

    @rule(
        base=st.sampled_from([(), (1, 2, 3, 4, 5, 6), (1, 2, 3, 9, 9), (7,) * 8]),
        tail=st.lists(st.integers(0, 3), max_size=6),
    )
    def allocate(self, base, tail):
        toks = list(base) + tail
        if not toks:
            return
        seq_id, self.next_id = self.next_id, self.next_id + 1
        free_before = self.bm.num_free_blocks
        table = self.bm.allocate(seq_id, toks)
        if table is None:
            assert self.bm.num_free_blocks == free_before
            return
        assert table.num_cached_tokens % self.bm.block_size == 0 and table.num_cached_tokens < len(toks)
        self.tokens[seq_id] = toks
        self.write(seq_id, table.num_cached_tokens)

    @precondition(lambda self: self.tokens)
    @rule(data=st.data(), new=st.lists(st.integers(0, 3), min_size=1, max_size=5), drafts=st.integers(0, 3))
    def append(self, data, new, drafts):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        n_before = len(self.tokens[seq_id])
        if self.bm.append_slots(seq_id, len(new) + drafts) is None:
            assert self.bm.block_table(seq_id).num_slots == n_before
            return
        self.tokens[seq_id] += new
        self.write(seq_id, n_before)
        if drafts:
            self.bm.truncate(seq_id, len(self.tokens[seq_id]))  # the drafts were rejected

    @precondition(lambda self: self.tokens)
    @rule(data=st.data())
    def free(self, data):
        seq_id = data.draw(st.sampled_from(sorted(self.tokens)))
        self.bm.free(seq_id)
        del self.tokens[seq_id]
        with pytest.raises(ValueError):
            self.bm.free(seq_id)

    @invariant()
    def consistent(self):
        if not hasattr(self, "bm"):
            return
        check_invariants(self.bm)
        for seq_id, toks in self.tokens.items():
            slots = _slots(self.bm, seq_id, 0, len(toks))
            assert [self.kv[s] for s in slots.tolist()] == toks, "a sequence reads KV another one overwrote"


KVSimulation.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
test_kv_simulation = KVSimulation.TestCase
