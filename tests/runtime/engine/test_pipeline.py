"""The engine's pipelining (engine.py, "Pipelining"): the next step scheduled while the device computes one, launched
before that one's bookkeeping. Forced on here over the CPU (where a launch computes at once), it must give every
request the tokens and the ending that the step-by-step engine gives, whatever the sampling, drafting, stops and
cancellations, and leave the pool as it found it; the scheduler's half (schedule_next, fill, cancel_next) is
tested on its own."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import model_file
from localllm.engine.block_manager import BlockManager
from localllm.engine.engine import Engine
from localllm.engine.scheduler import Scheduler
from localllm.engine.sequence import Sequence
from localllm.llm import LLM
from localllm.sampling import SamplingParams

SMOL = "smollm2-135m-instruct-q4_1"
EOS = 99


def seq(seq_id, prompt, max_tokens=None):
    return Sequence(seq_id, prompt, SamplingParams(max_tokens=max_tokens), stop_token_ids=[EOS])


def decoding(sched: Scheduler, *seqs: Sequence) -> None:
    """Adds the sequences and runs their prompts, so that the next step decodes every one."""
    for s in seqs:
        sched.add(s)
    out = sched.schedule()
    sched.update(out, [1] * len(out.sampled_seqs))


def test_schedule_next_is_the_step_after_with_each_sequence_one_token_further():
    sched = Scheduler(BlockManager(8, 4), parallel=4, max_batch_tokens=16)
    a, b = seq("a", [1, 2, 3]), seq("b", [4, 5, 6, 7, 8, 9, 10])
    decoding(sched, a, b)  # a: 4 tokens, 3 computed; b: 8 tokens, 7 computed (b's next position 7 ends its block)
    out = sched.schedule()
    assert out.batch.positions.tolist() == [3, 7]
    nxt = sched.schedule_next(out)
    assert nxt.seqs == (a, b) and nxt.batch.positions.tolist() == [4, 8]
    assert nxt.batch.context_lens.tolist() == [5, 9]
    assert nxt.batch.logits_rows.tolist() == [0, 1]
    assert nxt.batch.block_tables[1, 2] >= 0  # b's position 8 opened a third block
    sched.fill(nxt, [21, 22])
    assert nxt.batch.token_ids.tolist() == [21, 22]
    with pytest.raises(ValueError, match="last schedule"):
        sched.update(nxt, [5, 6])  # out first
    sched.update(out, [21, 22])
    sched.update(nxt, [31, EOS])
    assert a.token_ids[-2:] == [21, 31] and a.num_computed_tokens == 5
    assert b.is_finished and b.generated_token_ids == [1, 22, EOS]
    out = sched.schedule()
    assert out.seqs == (a,) and out.batch.positions.tolist() == [5]


def test_schedule_next_leaves_out_what_must_end_and_declines_what_is_not_plain_decoding():
    sched = Scheduler(BlockManager(8, 4), parallel=2, max_batch_tokens=16, ctx_size=11)
    a, b = seq("a", [1, 2, 3], max_tokens=2), seq("b", [4, 5, 6, 7, 8, 9, 10])
    decoding(sched, a, b)  # a generated 1 of 2: its next token is its last
    out = sched.schedule()
    nxt = sched.schedule_next(out)
    assert nxt.seqs == (b,)
    sched.cancel_next(nxt)
    sched.update(out, [7, 8])
    assert a.is_finished
    out = sched.schedule()  # b: 9 tokens of an 11-token context
    nxt = sched.schedule_next(out)
    assert nxt.seqs == (b,)
    sched.fill(nxt, [3])
    sched.update(out, [3])
    assert sched.schedule_next(nxt) is None  # nxt's token makes 11: b ends there
    sched.update(nxt, [4])
    assert b.is_finished and b.finish_reason.value == "context"
    # a prompt in the step, a waiting sequence with a free row, drafts: step by step; one without a row waits
    sched = Scheduler(BlockManager(8, 4), parallel=1, max_batch_tokens=16)
    c, d = seq("c", [1, 2, 3]), seq("d", [4, 5])
    sched.add(c)
    out = sched.schedule()
    assert sched.schedule_next(out) is None  # c's prompt is more than one token
    sched.update(out, [6])
    sched.add(d)
    out = sched.schedule()
    assert sched.schedule_next(out).seqs == (c,)  # d waits for a row whichever way: c's next step goes ahead
    sched.cancel_next(sched._pending[-1])
    sched.update(out, [6])
    sched.abort("d")
    sched.parallel = 2
    sched.add(d := seq("d2", [4, 5]))
    out = sched.schedule()  # d2 is admitted beside c: its prompt is in the step
    sched.update(out, [6, 6])
    sched.add(seq("e", [4, 5]))
    out = sched.schedule()
    assert out.seqs == (c, d) and sched.schedule_next(out) is not None  # e waits for a row: c and d go ahead
    sched.cancel_next(sched._pending[-1])
    sched.update(out, [6, 6])
    sched.abort("d2")
    out = sched.schedule()
    assert len(out.seqs) == 2 and sched.schedule_next(out) is None  # e took d2's row: its prompt is in the step
    sched.update(out, [6, 6])
    sched.abort("e")
    c.draft_token_ids = [6, 6]
    out = sched.schedule()
    assert out.num_drafts == (2,) and sched.schedule_next(out) is None


def test_update_ignores_the_rows_of_a_sequence_that_ended_since_its_step_was_scheduled():
    sched = Scheduler(BlockManager(8, 4), parallel=2, max_batch_tokens=16)
    a, b = seq("a", [1, 2, 3]), seq("b", [4, 5])
    decoding(sched, a, b)
    out = sched.schedule()
    sched.abort("b")  # a stop string, a cancel: b's row in the step is computed and not read
    assert sched.update(out, [7, None]) == [a] and a.token_ids[-1] == 7


def test_schedule_next_declines_when_the_pool_is_short_and_never_preempts():
    sched = Scheduler(BlockManager(2, 4), parallel=2, max_batch_tokens=16)
    a, b = seq("a", [1, 2, 3]), seq("b", [4, 5, 6])
    decoding(sched, a, b)
    out = sched.schedule()  # each at position 3, the end of its only block: the next step needs a block each
    assert sched.schedule_next(out) is None
    assert a.status.value == b.status.value == "running"
    with pytest.raises(ValueError, match="schedule_next"):
        sched.cancel_next(out)


def _engine_replies(engine: Engine, jobs) -> list:
    """Every job submitted at once from its own thread: (tokens, finish reason) of each, cancelled ones after
    their third chunk."""
    out: list = [None] * len(jobs)
    go = threading.Barrier(len(jobs))

    def client(i: int) -> None:
        ids, params, kw, cancel = jobs[i]
        go.wait()
        stream = engine.submit(ids, params, **kw)
        got, reason = [], None
        for n, chunk in enumerate(stream):
            got += chunk.token_ids
            reason = chunk.finish_reason
            if cancel and n == 2:
                stream.close()
                reason = "cancelled"
                break
        out[i] = (got, reason)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.model
@pytest.mark.parametrize("candidates", [False, True], ids=["whole rows", "candidates"])
def test_pipelined_engine_gives_every_request_the_step_by_step_tokens(candidates):
    """With candidates (as on a GPU; the CPU computes them here too), a greedy step's successor is launched before
    the step is collected, its tokens fed from the step's top candidates; with whole rows, once it is collected."""
    with LLM(model_file(SMOL), ctx_size=512, speculative="off") as llm:
        llm.model.supports_candidates = candidates
        tok = llm.tokenize
        code = tok("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return a + b\n\ndef add(")
        greedy = SamplingParams(temperature=0.0, max_tokens=24)

        def jobs(stop_token: int):
            return [
                (tok("The capital of France is"), greedy, dict(speculative="off"), False),
                (code, SamplingParams(temperature=0.0, max_tokens=40), dict(speculative="ngram"), False),
                (tok("Once upon a time"), SamplingParams(temperature=0.8, top_k=40, seed=3, max_tokens=20), {}, False),
                (tok("import numpy as np\n"), SamplingParams(temperature=1.0, top_p=0.9, seed=5, max_tokens=20), {}, 0),
                (
                    tok("Q: What is two plus two?\nA:"),
                    SamplingParams(temperature=0.0, max_tokens=12),
                    {"logprobs": 2},
                    0,
                ),
                (tok("def fibonacci(n):\n"), SamplingParams(temperature=0.0, max_tokens=30, stop="\n"), {}, False),
                (tok("The capital of France is"), greedy, dict(stop_token_ids=[stop_token]), False),
                (tok("Hello"), SamplingParams(temperature=0.0, max_tokens=1), {}, False),
                (tok("Hello"), SamplingParams(temperature=0.0, max_tokens=2), {}, False),
                (tok("Once upon a time"), SamplingParams(temperature=0.0, max_tokens=30), {}, True),
            ]

        results, ahead = {}, {}
        for pipeline in (False, True):
            engine = Engine(llm.model, llm.tokenizer, parallel=4, ctx_size=512, shared_ngrams=False, pipeline=pipeline)
            try:
                first = _engine_replies(engine, jobs(EOS))[0][0]  # a token greedy decoding reaches: a stop token
                results[pipeline] = _engine_replies(engine, jobs(first[5]))
                first, ends_at = first, first.index(first[5]) + 1
                ahead[pipeline] = engine.steps_ahead
                # one request alone: its first decode step is scheduled after the prompt's, every later one ahead
                alone = engine.submit(
                    tok("Once upon a time"), SamplingParams(temperature=0.0, max_tokens=40), speculative="off"
                )
                assert sum(len(c.token_ids) for c in alone) == 40
                ahead[pipeline] = (
                    ahead[pipeline],
                    engine.steps_ahead - ahead[pipeline],
                    engine.steps_ahead_fed if candidates else engine.steps_ahead_greedy,
                    engine.steps_ahead_greedy if candidates else engine.steps_ahead_fed,
                )

                def pool_free(sched) -> bool:
                    bm = sched._bm
                    return not sched.has_unfinished and bm.num_free_blocks == bm.n_blocks and not any(bm._ref)

                assert engine.inspect(pool_free)
            finally:
                engine.close()
        assert results[True] == results[False]
        step_by_step = results[False]
        assert step_by_step[6] == (first[: ends_at - 1], "stop")  # the stop token ended it (and is not output)
        assert step_by_step[5][1] == "stop"  # the stop string
        assert [len(step_by_step[i][0]) for i in (7, 8)] == [1, 2]
        assert step_by_step[9][1] == "cancelled"
        # the lone greedy request's steps go ahead fed from the step before (candidates) or as soon as it is
        # collected (its rows' argmax); sampled rows after their sampling
        assert ahead[False] == (0, 0, 0, 0) and ahead[True][0] > 0 and ahead[True][1] == 38, ahead
        assert 38 <= ahead[True][2] < sum(ahead[True][:2]) and ahead[True][3] == 0, ahead


@pytest.mark.model
def test_a_failed_launch_ahead_reaches_every_stream_and_the_pipelined_engine_goes_on(monkeypatch):
    with LLM(model_file(SMOL), ctx_size=256, speculative="off") as llm:
        engine = Engine(llm.model, llm.tokenizer, parallel=2, ctx_size=256, speculative="off", pipeline=True)
        try:
            params = SamplingParams(temperature=0.0, max_tokens=12)
            want = [t for c in engine.submit(llm.tokenize("Hello"), params) for t in c.token_ids]
            launch, calls = llm.model.launch, [0]

            def failing(batch, **kwargs):
                calls.append(batch.positions.tolist())
                if len(batch.token_ids) == 2 and not calls[0]:  # both decoding: the second such step is launched
                    calls[0] = 1  # ahead (its step before collected, not yet updated): it fails
                elif len(batch.token_ids) == 2 and calls[0] == 1:
                    calls[0] = 2
                    raise MemoryError("out of memory in the step")
                return launch(batch, **kwargs)

            monkeypatch.setattr(llm.model, "launch", failing)
            hold, held = threading.Event(), threading.Event()  # both admitted together: the engine held meanwhile
            holder = threading.Thread(target=engine.inspect, args=(lambda _: (held.set(), hold.wait()),))
            holder.start()
            held.wait()
            streams = [engine.submit(llm.tokenize(p), params) for p in ("Hello", "Once upon a time")]
            hold.set()
            holder.join()
            for stream in streams:
                with pytest.raises(RuntimeError, match="MemoryError: out of memory in the step"):
                    list(stream)
            assert calls[0] == 2 and engine.steps_ahead > 0, calls
            assert [t for c in engine.submit(llm.tokenize("Hello"), params) for t in c.token_ids] == want
        finally:
            engine.close()


@pytest.mark.model
def test_a_call_or_a_close_with_a_step_in_flight_leaves_nothing_behind():
    """A call that arrives with the last request's cancel, while the step launched ahead of it is in flight, runs
    after that step is finished (on a scheduler nothing is pending from); an engine closed with a step in flight
    leaves nothing launched on the model, so that the next engine on it collects its own steps."""
    with LLM(model_file(SMOL), ctx_size=256, speculative="off") as llm:
        params = SamplingParams(temperature=0.0, max_tokens=16)
        ids = llm.tokenize("Once upon a time")

        def reply(engine):
            return [t for c in engine.submit(ids, params) for t in c.token_ids]

        engine = Engine(llm.model, llm.tokenizer, parallel=2, ctx_size=256, speculative="off", pipeline=True)
        try:
            want = reply(engine)
            stream = engine.submit(ids, SamplingParams(temperature=0.0, max_tokens=200))
            next(iter(stream))
            next(iter(stream))
            hold, held = threading.Event(), threading.Event()
            holder = threading.Thread(target=engine.inspect, args=(lambda _: (held.set(), hold.wait()),))
            holder.start()
            held.wait()  # the engine between two steps, one launched ahead
            stream.close()
            result = []
            caller = threading.Thread(target=lambda: result.append(engine.call(lambda m: m.n_vocab)))
            caller.start()
            time.sleep(0.05)
            after = engine.submit(ids, params)  # held while the call waits, admitted after it
            hold.set()
            holder.join()
            caller.join()
            assert result == [llm.model.n_vocab]
            assert [t for c in after for t in c.token_ids] == want
            assert reply(engine) == want
            stream = engine.submit(ids, SamplingParams(temperature=0.0, max_tokens=200))
            next(iter(stream))
        finally:
            engine.close()  # a step in flight
        engine = Engine(llm.model, llm.tokenizer, parallel=2, ctx_size=256, speculative="off", pipeline=True)
        try:
            assert reply(engine) == want
        finally:
            engine.close()
