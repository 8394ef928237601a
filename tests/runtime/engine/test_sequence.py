"""A sequence's state: validation of its inputs, and the finish reasons append_token reports."""

from __future__ import annotations

import pytest
from localllm.engine.sequence import FinishReason, Sequence, SequenceStatus
from localllm.sampling import SamplingParams


def test_a_new_sequence():
    seq = Sequence("a", [5, 6, 7], SamplingParams(seed=3, max_tokens=4), stop_token_ids=[2])
    assert seq.token_ids == [5, 6, 7] and seq.num_prompt_tokens == 3 and seq.num_tokens == 3
    assert seq.status is SequenceStatus.WAITING and seq.finish_reason is None
    assert seq.num_computed_tokens == seq.num_cached_tokens == seq.num_generated_tokens == 0
    assert seq.seed == 3 and seq.max_tokens == 4 and seq.stop_token_ids == {2}
    assert seq.draft_token_ids == [] and seq.generated_token_ids == []
    assert "computed=0" in repr(seq)


def test_an_unseeded_sequence_draws_its_own_seed():
    a, b = Sequence("a", [1]), Sequence("b", [1])
    assert isinstance(a.seed, int) and a.seed >= 0 and a.seed != b.seed
    assert a.params == SamplingParams()


@pytest.mark.parametrize("prompt", [[], [1, -1], [1.0], "ab", None, [True]])
def test_bad_prompts_are_refused(prompt):
    with pytest.raises(ValueError, match="prompt_token_ids"):
        Sequence("a", prompt)


def test_bad_stop_tokens_are_refused():
    with pytest.raises(ValueError, match="stop_token_ids"):
        Sequence("a", [1], stop_token_ids=[-2])


def test_append_token_reports_why_to_stop():
    seq = Sequence("a", [1, 2], SamplingParams(max_tokens=3), stop_token_ids={0})
    assert seq.append_token(7, ctx_size=100) is None
    assert seq.append_token(0, ctx_size=100) is FinishReason.STOP
    assert seq.generated_token_ids == [7, 0]

    seq = Sequence("b", [1, 2], SamplingParams(max_tokens=2, ignore_eos=True), stop_token_ids={0})
    assert seq.append_token(0, ctx_size=100) is None
    assert seq.append_token(0, ctx_size=100) is FinishReason.LENGTH

    seq = Sequence("c", [1, 2], SamplingParams(), stop_token_ids={0})
    assert seq.append_token(3, ctx_size=4) is None
    assert seq.append_token(3, ctx_size=4) is FinishReason.CONTEXT
