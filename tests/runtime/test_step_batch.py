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
