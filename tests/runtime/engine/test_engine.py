"""The engine on a real model: requests from many threads are batched without changing a token, a follow-up chat
turn reuses the KV of the conversation, cancelling frees blocks at once, failures reach every stream, and the
streams work from asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest
from conftest import model_file
from localllm.engine import EngineClosedError
from localllm.llm import LLM
from localllm.sampling import SamplingParams

SMOL = "smollm2-135m-instruct-q4_1"
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village at the edge of a great forest, there lived",
    "import numpy as np\nimport",
    "Q: What is two plus two?\nA:",
]

pytestmark = pytest.mark.model


def tokens(stream) -> list[int]:
    return [t for chunk in stream for t in chunk.token_ids]


def run_alone(llm: LLM, prompts, params: list[SamplingParams]) -> list[list[int]]:
    return [tokens(llm.generate(p, params=q)) for p, q in zip(prompts, params)]


def run_together(llm: LLM, prompts, params: list[SamplingParams]) -> list[list[int]]:
    """Every request submitted from its own thread at once; each thread reads its own stream."""
    out: list = [None] * len(prompts)
    go = threading.Barrier(len(prompts))

    def client(i: int) -> None:
        go.wait()
        out[i] = tokens(llm.generate(prompts[i], params=params[i]))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def pool_is_free(llm: LLM) -> bool:
    """No live sequence and every block back in the free queue (cached ones included)."""

    def check(sched) -> bool:
        bm = sched._bm
        return not sched.has_unfinished and bm.num_free_blocks == bm.n_blocks and not any(bm._ref)

    return llm._engine.inspect(check)


@pytest.fixture(scope="module")
def smol():
    # a small step budget so that prompts are prefilled in several chunks beside decoding streams
    with LLM(model_file(SMOL), n_threads=2, ctx_size=1024, parallel=4, max_batch_tokens=16) as llm:
        yield llm


def test_concurrent_greedy_requests_equal_the_same_requests_alone(smol):
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True) for _ in PROMPTS]
    alone = run_alone(smol, PROMPTS, params)
    together = run_together(smol, PROMPTS, params)  # five requests, four rows: one waits its turn
    assert together == alone
    assert all(len(t) == 12 for t in alone)
    assert pool_is_free(smol)


def test_seeded_sampling_is_the_same_with_or_without_neighbours(smol):
    params = [SamplingParams(temperature=0.9, top_k=40, seed=7 + i, max_tokens=10, ignore_eos=True) for i in range(4)]
    alone = run_alone(smol, PROMPTS[:4], params)
    assert run_together(smol, PROMPTS[:4], params) == alone
    different = run_alone(smol, PROMPTS[:1], [SamplingParams(temperature=0.9, top_k=40, seed=99, max_tokens=10)])
    assert different[0] != alone[0]  # the seed is what reproduces it, not a fixed stream


def test_second_chat_turn_reuses_the_conversation(smol):
    smol.exclusive(lambda seq: None)  # drops the prefix cache: this test's first turn starts cold
    msgs = [{"role": "user", "content": "Name three colours."}]
    first = list(smol.chat(msgs, temperature=0, max_tokens=12))
    assert first[-1].stats.cached_tokens == 0
    turn1 = smol.tokenizer.encode_chat(msgs) + [t for c in first for t in c.token_ids]
    msgs += [{"role": "assistant", "content": "".join(c.text for c in first)}, {"role": "user", "content": "More."}]
    turn2 = smol.tokenizer.encode_chat(msgs)
    shared = next(i for i, (a, b) in enumerate(zip([*turn1, -1], turn2)) if a != b)
    warm = list(smol.chat(msgs, temperature=0, max_tokens=12))
    # whole blocks of the shared prefix whose KV was computed (the first turn's last token has none)
    expected = min(shared, len(turn1) - 1) // smol.model.block_size * smol.model.block_size
    assert expected >= 32
    assert warm[-1].stats.cached_tokens == expected
    smol.exclusive(lambda seq: None)
    cold = list(smol.chat(msgs, temperature=0, max_tokens=12))
    assert cold[-1].stats.cached_tokens == 0
    assert [c.token_ids for c in warm] == [c.token_ids for c in cold]


def test_cancelling_mid_stream_frees_its_blocks(smol):
    stream = smol.submit(smol.tokenize(PROMPTS[2]), SamplingParams(temperature=0, max_tokens=500, ignore_eos=True))
    got = [next(stream) for _ in range(3)]
    assert all(len(c.token_ids) == 1 for c in got)
    stream.close()
    assert pool_is_free(smol)
    # a consumer that breaks out of generate() cancels too
    for i, _chunk in enumerate(smol.generate(PROMPTS[1], temperature=0, max_tokens=500, ignore_eos=True)):
        if i == 2:
            break
    assert pool_is_free(smol)


def test_asyncio_consumers_see_the_same_chunks(smol):
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = run_alone(smol, PROMPTS[:3], [params] * 3)

    async def consume(prompt: str) -> list[int]:
        stream = smol.submit(smol.tokenize(prompt), params)
        return [t async for chunk in stream for t in chunk.token_ids]

    async def main():
        return await asyncio.gather(*(consume(p) for p in PROMPTS[:3]))

    assert asyncio.run(main()) == expected


def test_asyncio_consumers_on_one_loop_are_woken_once_a_step(smol, monkeypatch):
    """The engine sends the wake-ups of a step's chunks together (stream.Wakes): one call_soon_threadsafe per step
    for three readers on one loop, where each reader's own would be three."""
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    expected = run_alone(smol, PROMPTS[:3], [params] * 3)
    steps, wakes = [0], [0]
    engine = smol._engine_open()
    update = engine._update

    def counted(*a, **kw):  # once a step, step by step or pipelined
        steps[0] += 1
        return update(*a, **kw)

    monkeypatch.setattr(engine, "_update", counted)

    async def consume(stream) -> list[int]:
        return [t async for chunk in stream for t in chunk.token_ids]

    async def main():
        loop = asyncio.get_running_loop()
        send = loop.call_soon_threadsafe

        def count(*a, **kw):
            wakes[0] += 1
            return send(*a, **kw)

        loop.call_soon_threadsafe = count
        streams = [smol.submit(smol.tokenize(p), params) for p in PROMPTS[:3]]
        return await asyncio.gather(*(consume(s) for s in streams))

    assert asyncio.run(main()) == expected
    assert 0 < wakes[0] <= steps[0], (wakes, steps)


def test_a_plain_greedy_row_takes_the_token_its_sampling_would(smol):
    """A plain greedy request's draftless rows take each row's argmax without the sampler (Engine._verify); a greedy
    request with logprobs goes through the sampler. Side by side in steps of other rows, their tokens agree."""
    plain = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    sampled = SamplingParams(temperature=0.9, top_k=20, seed=3, max_tokens=24, ignore_eos=True)
    ids = [smol.tokenize(p) for p in PROMPTS[:3]]
    streams = [
        smol.submit(ids[0], plain, speculative="off"),
        smol.submit(ids[0], plain, logprobs=1, speculative="off"),
        smol.submit(ids[1], plain, speculative="off"),
        smol.submit(ids[1], plain, logprobs=0, speculative="off"),
        smol.submit(ids[2], sampled, speculative="off"),
    ]
    got = [tokens(s) for s in streams]
    assert got[0] == got[1] and got[2] == got[3] and got[0] != got[2]
    assert all(len(t) == 24 for t in got)


def test_what_a_reply_generated_is_learned_while_the_engine_is_idle(smol):
    """A reply's tokens are queued for the shared n-gram table when it ends; with nothing else to do the engine
    learns them all, a slice at a time, and a text that repeats the reply then drafts its continuation."""
    smol.reset_caches()
    chunks = list(smol.generate(PROMPTS[2], temperature=0, max_tokens=300, ignore_eos=True))
    reply = [t for c in chunks for t in c.token_ids]
    table = smol._engine_open().drafter.table
    deadline = time.monotonic() + 30
    while table.num_queued and time.monotonic() < deadline:
        time.sleep(0.01)
    assert table.num_queued == 0
    n, drafts = smol._engine_open().inspect(lambda _: table.draft(reply[100:108], 4))
    assert n == table.max_n and drafts == reply[108:112]


def test_what_a_reply_generated_is_learned_a_slice_a_step_while_others_run(smol):
    """The engine learns queued tokens after each step's output, not only when idle: a short reply that ends beside
    a long one is in the table two steps later, while the long one still runs."""
    smol.reset_caches()
    table = smol._engine_open().drafter.table
    long = smol.submit(smol.tokenize(PROMPTS[2]), SamplingParams(temperature=0, ignore_eos=True, max_tokens=400))
    short = smol.submit(smol.tokenize(PROMPTS[0]), SamplingParams(temperature=0, ignore_eos=True, max_tokens=8))
    assert len(tokens(short)) == 8
    for _ in range(3):  # steps after the one that ended it
        assert next(long).finish_reason is None
    assert table.num_queued == 0
    long.close()


def test_a_failed_step_reaches_every_stream_and_the_engine_goes_on(smol, monkeypatch):
    model = smol.model

    def broken(*args, **kwargs):
        raise MemoryError("out of memory in the step")

    monkeypatch.setattr(model, "forward", broken)
    streams = [smol.submit(smol.tokenize(p), SamplingParams(max_tokens=4)) for p in PROMPTS[:2]]
    for stream in streams:
        with pytest.raises(RuntimeError, match="MemoryError: out of memory in the step"):
            list(stream)
    monkeypatch.undo()
    # the failed requests' drafting state went with them (they never reached the drafter's close)
    assert smol._engine.inspect(lambda sched: len(smol._engine.drafter._seqs)) == 0
    assert len(tokens(smol.generate(PROMPTS[0], temperature=0, max_tokens=3, ignore_eos=True))) == 3
    assert pool_is_free(smol)


def test_a_prompt_that_cannot_fit_is_refused_at_submission(smol):
    with pytest.raises(ValueError, match=r"1024 tokens \+ 1 to generate exceed the context size 1024 \(ctx_size\)"):
        smol.submit([1] * 1024)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        smol.submit([smol.n_vocab])
    with pytest.raises(ValueError, match="non-empty"):
        smol.submit([])


def test_a_small_pool_preempts_and_recomputes_without_changing_a_token(tmp_path):
    params = [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True) for _ in range(3)]
    prompts = PROMPTS[2:5]
    with LLM(model_file(SMOL), n_threads=2, ctx_size=1024) as big:
        alone = run_alone(big, prompts, params)
    # 6 blocks of 16: three sequences of ~50 tokens cannot all hold their KV at once
    with LLM(model_file(SMOL), n_threads=2, ctx_size=96, parallel=3, max_batch_tokens=32) as small:
        together = run_together(small, prompts, params)
        preempted = small._engine.inspect(lambda sched: sched._bm.n_blocks)
        assert preempted == 6
        assert pool_is_free(small)
    assert together == alone


def test_closing_the_llm_ends_live_streams_with_abort():
    llm = LLM(model_file(SMOL), n_threads=2, ctx_size=256)
    stream = llm.submit(llm.tokenize(PROMPTS[0]), SamplingParams(max_tokens=200, ignore_eos=True))
    next(stream)
    llm.close()
    last = list(stream)[-1]
    assert last.finish_reason == "abort"
    with pytest.raises((ValueError, EngineClosedError)):
        llm.submit([1, 2, 3])


def test_logits_wait_for_live_requests_and_agree_with_a_fresh_model(smol):
    ids = smol.tokenize(PROMPTS[3])
    stream = smol.submit(ids, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
    logits = smol.logits(ids)  # runs once the request above is done
    assert len(tokens(stream)) == 20
    with LLM(model_file(SMOL), n_threads=2, ctx_size=256) as fresh:
        np.testing.assert_array_equal(logits, fresh.logits(ids))


def candidates_asked(llm: LLM, monkeypatch) -> list[int]:
    """The top_k each step of llm's model is asked for from now on (0: whole rows), candidates allowed (on the CPU
    the engine takes whole rows unless told the model returns candidates)."""
    asked: list[int] = []
    forward = llm.model.forward

    def counting(*args, **kwargs):
        asked.append(kwargs.get("top_k", 0))
        return forward(*args, **kwargs)

    monkeypatch.setattr(llm.model, "forward", counting)
    monkeypatch.setattr(llm.model, "supports_candidates", True)
    return asked


@pytest.mark.parametrize(
    "kw",
    [
        dict(temperature=0),
        dict(temperature=0.9, top_k=40, seed=3),
        dict(temperature=1.5, top_k=200, top_p=0.9, min_p=0.02, seed=5),
        dict(temperature=0.7, top_k=1, seed=1),
    ],
)
def test_candidates_sample_what_whole_rows_sample(smol, monkeypatch, kw):
    """Steps that return each row's top-k candidates (localllm.model.candidates) give the tokens whole logits rows give,
    alone and batched, with n-gram drafts verified in the same steps."""
    params = [SamplingParams(max_tokens=16, ignore_eos=True, **kw) for _ in PROMPTS[:3]]
    asked = candidates_asked(smol, monkeypatch)
    with_candidates = run_together(smol, PROMPTS[:3], params)
    assert max(asked) == (1 if kw["temperature"] == 0 else kw["top_k"])
    monkeypatch.setattr(smol.model, "supports_candidates", False)
    asked.clear()
    assert run_together(smol, PROMPTS[:3], params) == with_candidates
    assert run_alone(smol, PROMPTS[:3], params) == with_candidates
    assert set(asked) == {0}


def test_penalties_and_logprobs_take_whole_rows(smol, monkeypatch):
    asked = candidates_asked(smol, monkeypatch)
    tokens(smol.generate(PROMPTS[0], temperature=0, repetition_penalty=1.3, max_tokens=4))
    assert set(asked) == {0}
    asked.clear()
    list(smol.submit(smol.tokenize(PROMPTS[0]), SamplingParams(temperature=0, max_tokens=4), logprobs=3))
    assert set(asked) == {0}


def embed_alone(llm: LLM, text: str, how: str = "mean") -> np.ndarray:
    """The one-sequence path's embedding of text: its whole prompt alone in one step (the reference)."""
    ids = llm.tokenize(text)
    rows = np.arange(len(ids)) if how == "mean" else np.array([0 if how == "cls" else len(ids) - 1])
    from localllm.engine.embedding import pool

    return pool(llm.exclusive(lambda s: s.step(np.array(ids), 0, rows, hidden=True)), how)


def test_embeddings_batch_across_calls_and_beside_streams_without_changing_a_bit(smol, monkeypatch):
    want = {(t, how): embed_alone(smol, t, how) for t in PROMPTS for how in ("mean", "last")}
    streams_alone = run_alone(smol, PROMPTS[:2], [SamplingParams(temperature=0, max_tokens=12)] * 2)
    got: dict = {}
    steps: list[int] = []  # sequences in each embedding step
    forward = smol.model.forward

    def counted(batch, *args, **kwargs):
        if kwargs.get("hidden"):
            steps.append(len(batch.context_lens))
        return forward(batch, *args, **kwargs)

    monkeypatch.setattr(smol.model, "forward", counted)
    go = threading.Barrier(4)

    def embedder(how: str) -> None:
        go.wait()
        got[how] = smol.embed(PROMPTS, pooling=how)  # five inputs in one call: several steps of the 16-token budget

    def streamer(i: int) -> None:
        go.wait()
        got[i] = tokens(smol.generate(PROMPTS[i], temperature=0, max_tokens=12))

    threads = [threading.Thread(target=embedder, args=(h,)) for h in ("mean", "last")]
    threads += [threading.Thread(target=streamer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for how in ("mean", "last"):
        for i, t in enumerate(PROMPTS):
            assert np.array_equal(got[how][i], want[(t, how)]), (how, t)
    assert [got[0], got[1]] == streams_alone  # the streams did not notice the embedding steps
    assert sum(steps) == 2 * len(PROMPTS) and max(steps) >= 2, steps  # inputs shared steps
    assert pool_is_free(smol)  # borrowed blocks went back, and none joined the prefix cache


def test_a_cancelled_or_failed_embedding_leaves_the_engine_going(smol, monkeypatch):
    engine = smol._engine
    with pytest.raises(ValueError, match="non-empty"):
        engine.embed([[]], "mean")
    with pytest.raises(ValueError, match="pooling must be one of"):
        engine.embed([[1, 2]], "max")

    def broken(*args, **kwargs):
        raise MemoryError("out of memory in the step")

    monkeypatch.setattr(smol.model, "forward", broken)
    with pytest.raises(RuntimeError, match="embedding step failed: MemoryError"):
        smol.embed(PROMPTS[:2])
    monkeypatch.undo()
    assert np.array_equal(smol.embed(PROMPTS[0])[0], embed_alone(smol, PROMPTS[0]))
    assert pool_is_free(smol)


def test_an_embedding_the_model_refuses_is_that_refusal(smol, monkeypatch):
    def refuses(*args, **kwargs):
        raise ValueError("hidden states come back from a CPU stage only")

    monkeypatch.setattr(smol.model, "forward", refuses)
    with pytest.raises(ValueError, match="CPU stage only"):  # a 400 in serve, not a failed step
        smol.embed(PROMPTS[0])
