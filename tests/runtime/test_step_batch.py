"""The step batch (model/step_batch.py): the one builder of what Model.forward takes, and the owner of the slot
formula, checked against the arrays written out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from localllm.model.step_batch import StepBatch, StepBatchBuilder


def test_a_mixed_step_lays_out_its_sequences_in_order():
    b = StepBatchBuilder(block_size=4)
    assert b.add([5, 6, 7], start=0, block_ids=[3, 1], logits=[2]) == 0  # a whole prompt, its last row sampled
    assert b.add([9], start=5, block_ids=(0, 2), logits=[0]) == 1  # a decode token at position 5
    assert b.add(np.array([1, 2]), start=1, block_ids=[7]) == 2  # a prompt chunk mid-way: nothing sampled
    assert b.add([4, 8, 8], start=6, block_ids=[6, 5, 4], logits=range(3)) == 3  # a token and two drafts
    x = b.build()
    assert x.token_ids.tolist() == [5, 6, 7, 9, 1, 2, 4, 8, 8]
    assert x.positions.tolist() == [0, 1, 2, 5, 1, 2, 6, 7, 8]
    assert x.seq_index.tolist() == [0, 0, 0, 1, 2, 2, 3, 3, 3]
    tables = [[3, 1], [0, 2], [7], [6, 5, 4]]
    want = [tables[s][p // 4] * 4 + p % 4 for s, p in zip(x.seq_index.tolist(), x.positions.tolist())]
    assert x.slot_mapping.tolist() == want
    assert x.block_tables.tolist() == [[3, 1, -1], [0, 2, -1], [7, -1, -1], [6, 5, 4]]
    assert x.context_lens.tolist() == [3, 6, 3, 9]
    assert x.logits_rows.tolist() == [2, 3, 6, 7, 8]
    assert x.num_tokens == 9
    # what the binding reads in place: int32, contiguous
    for a in (x.token_ids, x.positions, x.slot_mapping, x.seq_index, x.block_tables, x.context_lens, x.logits_rows):
        assert a.dtype == np.int32 and a.flags.c_contiguous


def test_an_empty_step_has_empty_arrays():
    x = StepBatchBuilder(16).build()
    assert isinstance(x, StepBatch) and x.num_tokens == 0
    assert x.block_tables.shape == (0, 0) and x.logits_rows.size == 0


def test_bad_additions_are_refused_naming_what_is_wrong():
    b = StepBatchBuilder(4)
    with pytest.raises(ValueError, match="at least one token"):
        b.add([], 0, [0])
    with pytest.raises(ValueError, match=r"positions 3..4 do not lie in the 1 blocks"):
        b.add([1, 2], 3, [0])
    with pytest.raises(ValueError, match=r"logits rows must lie in \[0, 2\)"):
        b.add([1, 2], 0, [0], logits=[2])
    with pytest.raises(ValueError, match="block_size"):
        StepBatchBuilder(0)


def test_random_steps_follow_the_slot_formula():
    """Steps of random sequences (prompts, chunks, decode rows, rows that cross blocks) against the module's formula
    written token by token: slot = block_tables[s, p // block_size] * block_size + p % block_size."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        bs = int(rng.integers(1, 33))
        b = StepBatchBuilder(bs)
        want_tokens, want_pos, want_seq, want_slots, want_rows, tables, lens = [], [], [], [], [], [], []
        for s in range(int(rng.integers(1, 6))):
            n, start = int(rng.integers(1, 80)), int(rng.integers(0, 200))
            table = rng.permutation(1000)[: -(-(start + n) // bs) + int(rng.integers(0, 3))].tolist()
            rows = sorted(rng.choice(n, size=int(rng.integers(0, min(n, 4) + 1)), replace=False).tolist())
            toks = rng.integers(0, 50_000, n)
            ids = tuple(table) if s % 3 else np.array(table, dtype=np.int32)  # a BlockTable's ids or its array
            assert b.add(toks if s % 2 else toks.tolist(), start, ids, logits=rows) == s
            want_rows += [len(want_tokens) + r for r in rows]
            for i in range(n):
                p = start + i
                want_tokens.append(int(toks[i]))
                want_pos.append(p)
                want_seq.append(s)
                want_slots.append(table[p // bs] * bs + p % bs)
            tables.append(table)
            lens.append(start + n)
        x = b.build()
        assert x.token_ids.tolist() == want_tokens and x.positions.tolist() == want_pos
        assert x.seq_index.tolist() == want_seq and x.slot_mapping.tolist() == want_slots
        assert x.logits_rows.tolist() == want_rows and x.context_lens.tolist() == lens
        width = max(map(len, tables))
        assert x.block_tables.tolist() == [t + [-1] * (width - len(t)) for t in tables]
        for a in (x.token_ids, x.positions, x.slot_mapping, x.seq_index, x.block_tables, x.context_lens):
            assert a.dtype == np.int32 and a.flags.c_contiguous


def test_a_value_outside_int32_is_refused():
    b = StepBatchBuilder(4)
    b.add([2**31], 0, [0])
    with pytest.raises(OverflowError):
        b.build()
