"""The scheduling policy, case by case: chunked prefill beside a decoding stream, prefix reuse, preemption order,
refusal of requests that could never fit, abort, finish reasons and misuse. A fake model samples each token as a
function of the sequence's tokens so far; test_scheduler_properties.py drives the same API at random."""

from __future__ import annotations

import numpy as np
import pytest
from localllm.engine import BlockManager, FinishReason, Scheduler, Sequence, SequenceStatus
from localllm.sampling import SamplingParams

EOS = 0


def fake_token(context: list[int]) -> int:
    """The 'model': a token in [3, 100) that depends on the whole context (never EOS)."""
    return 3 + sum((i + 1) * t for i, t in enumerate(context)) % 97


def sample(out) -> list[int]:
    return [
        fake_token(out.seqs[s].token_ids[: out.batch.positions[row] + 1])
        for row, s in zip(out.batch.logits_rows, out.sampled_seqs)
    ]


def step(sched: Scheduler):
    out = sched.schedule()
    sched.update(out, sample(out))
    return out


def seq(seq_id, prompt, max_tokens=None, **kw) -> Sequence:
    return Sequence(seq_id, prompt, SamplingParams(max_tokens=max_tokens, **kw), stop_token_ids=[EOS])


def alone(prompt, max_tokens) -> list[int]:
    """The tokens a prompt generates with the fake model, nothing else running."""
    toks = list(prompt)
    for _ in range(max_tokens):
        toks.append(fake_token(toks))
    return toks[len(prompt) :]


def scheduled(out) -> dict:
    return {s.seq_id: n for s, n in zip(out.seqs, out.num_scheduled)}


def test_nothing_to_do_is_an_empty_step():
    sched = Scheduler(BlockManager(8, 4))
    out = sched.schedule()
    assert (
        out.num_tokens == 0
        and out.seqs == ()
        and out.batch.block_tables.shape == (0, 0)
        and out.batch.logits_rows.size == 0
    )
    assert sched.update(out, []) == [] and not sched.has_unfinished


def test_one_sequence_prefills_then_decodes():
    bm = BlockManager(8, 4)
    sched = Scheduler(bm, parallel=2, max_batch_tokens=16)
    a = seq("a", [5, 6, 7, 8, 9, 10], max_tokens=3)
    sched.add(a)
    out = sched.schedule()
    assert out.batch.token_ids.tolist() == [5, 6, 7, 8, 9, 10] and out.batch.positions.tolist() == list(range(6))
    assert out.batch.seq_index.tolist() == [0] * 6 and out.batch.context_lens.tolist() == [6]
    table = out.batch.block_tables[0].tolist()
    assert len(table) == 2 and out.batch.slot_mapping.tolist() == [table[p // 4] * 4 + p % 4 for p in range(6)]
    assert out.batch.logits_rows.tolist() == [5] and out.sampled_seqs == (0,)
    assert all(
        x.dtype == np.int32
        for x in (out.batch.token_ids, out.batch.positions, out.batch.slot_mapping, out.batch.block_tables)
    )
    assert sched.update(out, sample(out)) == [a]
    assert a.num_computed_tokens == 6 and a.num_tokens == 7
    out = step(sched)
    assert (
        out.batch.positions.tolist() == [6]
        and out.batch.token_ids.tolist() == [a.token_ids[6]]
        and out.batch.logits_rows.tolist() == [0]
    )
    step(sched)
    assert (
        a.is_finished and a.finish_reason is FinishReason.LENGTH and a.generated_token_ids == alone(a.token_ids[:6], 3)
    )
    assert bm.num_free_blocks == 8 and not sched.has_unfinished


def test_a_long_prompt_is_chunked_while_a_stream_keeps_decoding():
    sched = Scheduler(BlockManager(64, 4), parallel=2, max_batch_tokens=8)
    a = seq("a", [1, 2, 3], max_tokens=20)
    sched.add(a)
    step(sched)
    b = seq("b", list(range(10, 40)), max_tokens=2)  # 30 tokens
    sched.add(b)
    chunks = []
    while b.num_generated_tokens == 0:
        out = step(sched)
        assert out.num_tokens <= 8 and scheduled(out)["a"] == 1, "the decoding stream gets its token every step"
        chunks.append(scheduled(out)["b"])
        b_rows = [r for r, s in zip(out.batch.logits_rows, out.sampled_seqs) if out.seqs[s] is b]
        assert (b_rows != []) == (b.num_computed_tokens == 30), "logits only for the prompt's last chunk"
    assert chunks == [7, 7, 7, 7, 2]
    while sched.has_unfinished:
        step(sched)
    assert a.generated_token_ids == alone([1, 2, 3], 20) and b.generated_token_ids == alone(list(range(10, 40)), 2)


def test_waiting_requests_get_the_budget_that_running_ones_leave():
    sched = Scheduler(BlockManager(64, 4), parallel=3, max_batch_tokens=8)
    b = seq("b", list(range(10, 40)), max_tokens=2)  # 30 tokens
    sched.add(b)
    assert scheduled(step(sched)) == {"b": 8}
    a, c = seq("a", [1, 2], max_tokens=5), seq("c", [4], max_tokens=5)
    sched.add(a)
    sched.add(c)
    assert scheduled(step(sched)) == {"b": 8}
    assert scheduled(step(sched)) == {"b": 8}
    assert scheduled(step(sched)) == {"b": 6, "a": 2}  # b's last chunk, then a's prompt in what is left
    assert scheduled(step(sched)) == {"b": 1, "a": 1, "c": 1}


def test_a_second_request_reuses_the_shared_prefix():
    bm = BlockManager(32, 4)
    sched = Scheduler(bm, parallel=2, max_batch_tokens=64)
    system = list(range(50, 60))  # 10 tokens: two full blocks
    a = seq("a", system + [1, 2], max_tokens=2)
    sched.add(a)
    while sched.has_unfinished:
        step(sched)
    b = seq("b", system + [3, 4, 5], max_tokens=2)
    sched.add(b)
    out = step(sched)
    assert b.num_cached_tokens == 8 and out.batch.positions.tolist() == [8, 9, 10, 11, 12]
    c = seq("c", system + [6], max_tokens=2)  # while b is live and shares them
    sched.add(c)
    step(sched)
    assert c.num_cached_tokens == 8
    while sched.has_unfinished:
        step(sched)
    assert b.generated_token_ids == alone(system + [3, 4, 5], 2) and c.generated_token_ids == alone(system + [6], 2)
    assert bm.num_free_blocks == 32


def test_a_follow_up_turn_reuses_the_generated_tokens_too():
    sched = Scheduler(BlockManager(32, 4), max_batch_tokens=64)
    turn1 = seq("t1", [7, 8, 9], max_tokens=6)
    sched.add(turn1)
    while sched.has_unfinished:
        step(sched)
    history = turn1.token_ids  # 9 tokens, 8 of them computed: two full blocks
    turn2 = seq("t2", history + [1, 2, 3])
    sched.add(turn2)
    step(sched)
    assert turn2.num_cached_tokens == 8


def test_the_most_recently_admitted_sequence_is_preempted_and_recomputed():
    bm = BlockManager(6, 2)
    sched = Scheduler(bm, parallel=3, max_batch_tokens=9)
    a, b, c = (seq(name, [i, i + 1, i + 2], max_tokens=4) for i, name in [(10, "a"), (20, "b"), (30, "c")])
    for s in (a, b, c):
        sched.add(s)
    step(sched)  # 3 prompts of 3 tokens: 2 blocks each, the pool is full
    step(sched)  # position 3 still fits the second block
    out = step(sched)  # position 4 needs a third block: a takes c's, b the other one c freed
    assert out.preempted == (c,) and scheduled(out) == {"a": 1, "b": 1}
    assert c.status is SequenceStatus.PREEMPTED and c.num_computed_tokens == 0 and c.num_preemptions == 1
    assert c.num_generated_tokens == 2 and sched.num_waiting == 1
    while c.status is not SequenceStatus.RUNNING:
        step(sched)
    assert a.is_finished and b.is_finished, "c waits for blocks at the head of the queue"
    while sched.has_unfinished:
        step(sched)
    for s in (a, b, c):
        assert s.finish_reason is FinishReason.LENGTH and s.generated_token_ids == alone(s.token_ids[:3], 4)
    assert c.num_cached_tokens == 0 and bm.num_free_blocks == 6


def test_a_sequence_that_is_last_preempts_itself():
    bm = BlockManager(4, 2)
    sched = Scheduler(bm, parallel=2, max_batch_tokens=8)
    a, b = seq("a", [1, 2, 3], max_tokens=3), seq("b", [4, 5, 6, 7], max_tokens=3)
    sched.add(a)
    sched.add(b)
    step(sched)  # a: 2 blocks, 3 slots; b: 2 blocks, 4 slots; the pool is full
    out = step(sched)  # a writes position 3 in its own block; b's position 4 needs a block: b is the newest
    assert out.preempted == (b,) and scheduled(out) == {"a": 1}
    while sched.has_unfinished:
        step(sched)
    assert a.generated_token_ids == alone([1, 2, 3], 3) and b.generated_token_ids == alone([4, 5, 6, 7], 3)


def test_requests_that_could_never_fit_are_refused_at_add():
    sched = Scheduler(BlockManager(4, 4))  # 16 slots
    with pytest.raises(ValueError, match=r"the prompt has 16 tokens; the KV pool holds 16 \(4 blocks of 4\)"):
        sched.add(seq("big", list(range(16))))
    capped = Scheduler(BlockManager(4, 4), ctx_size=10)
    with pytest.raises(ValueError, match=r"10 tokens \+ 1 to generate exceed the context size 10 \(ctx_size\)"):
        capped.add(seq("long", list(range(10))))
    assert not sched.has_unfinished and not capped.has_unfinished
    edge = seq("edge", list(range(1, 16)))  # 15 tokens: room for exactly one generated token
    sched.add(edge)
    while sched.has_unfinished:
        step(sched)
    assert edge.finish_reason is FinishReason.CONTEXT and edge.num_tokens == 16


def test_the_context_limit_ends_generation():
    sched = Scheduler(BlockManager(16, 4), ctx_size=8)
    a = seq("a", [1, 2, 3])
    sched.add(a)
    while sched.has_unfinished:
        step(sched)
    assert a.finish_reason is FinishReason.CONTEXT and a.num_tokens == 8


def test_a_stop_token_ends_generation_unless_ignored():
    for ignore_eos, reason, n in [(False, FinishReason.STOP, 2), (True, FinishReason.LENGTH, 4)]:
        sched = Scheduler(BlockManager(16, 4))
        a = seq("a", [1, 2], max_tokens=4, ignore_eos=ignore_eos)
        sched.add(a)
        sched.update(sched.schedule(), [9])
        while sched.has_unfinished:
            sched.update(sched.schedule(), [EOS])
        assert a.finish_reason is reason and a.num_generated_tokens == n


def test_abort_frees_blocks_at_once():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm, parallel=1)
    a, b = seq("a", list(range(1, 11))), seq("b", [1, 2])
    sched.add(a)
    sched.add(b)
    step(sched)
    assert bm.num_free_blocks == 13 and sched.num_waiting == 1
    assert sched.abort("a") and a.finish_reason is FinishReason.ABORT and a.is_finished
    assert bm.num_free_blocks == 16 and sched.num_running == 0
    assert sched.abort("b") and sched.num_waiting == 0 and not sched.has_unfinished
    assert not sched.abort("a") and not sched.abort("ghost")


def test_abort_between_schedule_and_update():
    bm = BlockManager(16, 4)
    sched = Scheduler(bm)
    a, b = seq("a", [1, 2, 3], max_tokens=2), seq("b", [4, 5], max_tokens=2)
    sched.add(a)
    sched.add(b)
    out = sched.schedule()
    assert sched.abort("a") and bm.num_free_blocks == 15
    assert sched.update(out, sample(out)) == [b] and a.num_tokens == 3
    while sched.has_unfinished:
        step(sched)
    assert bm.num_free_blocks == 16


def test_misuse_raises_value_error():
    bm = BlockManager(8, 4)
    with pytest.raises(ValueError, match="parallel"):
        Scheduler(bm, parallel=0)
    with pytest.raises(ValueError, match="at least parallel"):
        Scheduler(bm, parallel=4, max_batch_tokens=3)
    with pytest.raises(ValueError, match="ctx_size"):
        Scheduler(bm, ctx_size=1)
    sched = Scheduler(bm)
    a = seq("a", [1, 2])
    sched.add(a)
    with pytest.raises(ValueError, match="already submitted"):
        sched.add(a)
    with pytest.raises(ValueError, match="already has the id"):
        sched.add(seq("a", [3]))
    out = sched.schedule()
    with pytest.raises(ValueError, match="1 logits rows"):
        sched.update(out, [])
    sched.update(out, [5])
    with pytest.raises(ValueError, match="last schedule"):
        sched.update(out, [5])
    stale = sched.schedule()
    sched.schedule()
    with pytest.raises(ValueError, match="last schedule"):
        sched.update(stale, [5])
