"""Speculative decoding: the n-gram proposer against a brute-force search, its adaptive draft length, the
scheduler's draft rows and rollbacks, lossless verification (seeded and in distribution, on synthetic logits),
and on a real model: the same tokens with speculation on and off, greedy and seeded, alone and beside other
sequences, with stops and limits inside an accepted run.

The real-model tests run on the default kernel path: every path's products are bit-identical for every number of
rows (native/kernels.h, tests/native/test_batch_invariance.py), so a row's logits do not depend on the drafts beside
it, and the tests assert exact equality.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

import numpy as np
import pytest
from conftest import model_file
from hypothesis import given, settings
from hypothesis import strategies as st
from localllm.engine import BlockManager, FinishReason, Scheduler, Sequence
from localllm.engine.drafting import Drafter
from localllm.engine.drafting.ngram import NgramIndex
from localllm.engine.request import Request
from localllm.llm import LLM
from localllm.sampling import SamplingParams

# --- the proposer


def brute_lookup(tokens: list[int], max_n: int, min_n: int, k: int) -> list[int]:
    """The tokens after the latest earlier occurrence of the longest suffix of min_n..max_n tokens."""
    n_tok = len(tokens)
    for n in range(min(max_n, n_tok), min_n - 1, -1):
        suffix = tokens[n_tok - n :]
        for end in range(n_tok - 2, n - 2, -1):  # an occurrence ending at `end`, followed by a known token
            if tokens[end - n + 1 : end + 1] == suffix:
                return tokens[end + 1 : end + 1 + k]
    return []


@settings(max_examples=300, deadline=None, database=None)
@given(
    tokens=st.lists(st.integers(0, 4), min_size=1, max_size=60),
    cuts=st.lists(st.integers(1, 60), max_size=6),
    max_n=st.integers(1, 5),
    min_n=st.integers(1, 5),
    k=st.integers(1, 10),
)
def test_lookup_finds_the_latest_earlier_match_of_the_longest_suffix(tokens, cuts, max_n, min_n, k):
    min_n = min(min_n, max_n)
    d = NgramIndex(max_n=max_n, min_n=min_n)
    for c in sorted(cuts):  # the index catches up over growing prefixes, as a decoding sequence grows
        assert d.lookup(tokens[:c], k) == brute_lookup(tokens[:c], max_n, min_n, k)
    assert d.lookup(tokens, k) == brute_lookup(tokens, max_n, min_n, k)
    fresh = NgramIndex(max_n=max_n, min_n=min_n)
    assert fresh.lookup(tokens, k) == brute_lookup(tokens, max_n, min_n, k)
    assert d.lookup(tokens[:1], k) == []  # a shorter sequence (recomputed elsewhere) starts a fresh index


def ngram_drafter(**pacer) -> Drafter:
    """A Drafter drafting by n-grams (min_n 1, max_n 2) for sequence 0, no shared table: propose(tokens) -> drafts."""
    d = Drafter(shared_ngrams=False, ngram=dict(max_n=2, min_n=1), pacer=pacer)
    d.open(0, "ngram")
    return d


def proposed(d: Drafter, tokens) -> list[int]:
    return d.propose([(0, tokens)]).get(0, [])


def test_repeated_text_is_proposed_and_new_text_is_not():
    d = Drafter(shared_ngrams=False, ngram=dict(max_n=3, min_n=2), pacer=dict(max_draft=8, start_draft=4))
    d.open("a", "ngram")
    d.open("b", "ngram")
    d.open("quiet", "off")
    text = [10, 11, 12, 13, 14, 15, 16, 17]
    assert d.propose([("a", text + [1, 2, 10, 11]), ("b", [1, 2, 3, 4, 5]), ("quiet", text + [10, 11])]) == {
        "a": [12, 13, 14, 15]
    }
    with pytest.raises(ValueError, match="speculative must be one of 'ngram', 'off', 'draft', got 'fast'"):
        d.open("c", "fast")
    with pytest.raises(ValueError, match='speculative "draft" needs a draft model'):
        d.open("c", "draft")


@settings(max_examples=200, deadline=None, database=None)
@given(outcomes=st.lists(st.tuples(st.booleans(), st.integers(0, 8)), max_size=80))
def test_draft_length_stays_in_bounds_and_failures_back_off_then_probe_again(outcomes):
    pacing = dict(max_draft=8, start_draft=2, patience=2, cooldown=4, max_cooldown=16)
    d = ngram_drafter(**pacing)
    tokens = [1, 2] * 4
    for hit, a in outcomes:
        drafts = proposed(d, tokens)
        assert 1 <= len(drafts) <= 8 or not drafts
        if drafts:
            d.observe(0, len(drafts), len(drafts) if hit else min(a, len(drafts) - 1))
    # drafts that always fail: after `patience` misses it rests, and each wake-up probes once more
    d = ngram_drafter(**pacing)
    proposed_at = []
    for step in range(120):
        drafts = proposed(d, tokens)
        if drafts:
            proposed_at.append(step)
            d.observe(0, len(drafts), 0)
    assert proposed_at[:2] == [0, 1]
    gaps = np.diff(proposed_at).tolist()
    assert gaps[1:5] == [5, 9, 17, 17], gaps  # rest 4, 8, 16, then capped at max_cooldown
    assert len(proposed_at) < 12  # of 120 steps
    # a probe that is accepted ends the back-off: the next two misses rest the base 4 steps again
    while not (drafts := proposed(d, tokens)):
        pass
    d.observe(0, len(drafts), 1)
    proposed_at = []
    for step in range(20):
        drafts = proposed(d, tokens)
        if drafts:
            proposed_at.append(step)
            d.observe(0, len(drafts), 0)
    assert proposed_at == [0, 1, 6, 15]


# --- the scheduler: draft rows, the verified run, rollback


def decoding(bm_blocks=8, block_size=4, prompt=(1, 2, 3, 4, 5, 6), **params):
    """A scheduler whose one sequence has its prompt computed and one sampled token waiting."""
    bm = BlockManager(bm_blocks, block_size)
    sched = Scheduler(bm, parallel=2, max_batch_tokens=32)
    seq = Sequence("a", list(prompt), SamplingParams(temperature=0, **params), stop_token_ids=[0])
    sched.add(seq)
    out = sched.schedule()
    sched.update(out, [7])
    return bm, sched, seq


def test_drafts_ride_after_the_last_token_and_every_row_is_sampled():
    bm, sched, seq = decoding()
    seq.draft_token_ids = [8, 9, 10]
    out = sched.schedule()
    assert out.batch.token_ids.tolist() == [7, 8, 9, 10] and out.batch.positions.tolist() == [6, 7, 8, 9]
    assert out.batch.logits_rows.tolist() == [0, 1, 2, 3] and out.sampled_seqs == (0, 0, 0, 0)
    assert out.num_drafts == (3,) and seq.draft_token_ids == []
    assert bm.block_table("a").num_slots == 10


def test_a_partial_run_keeps_the_verified_kv_and_returns_blocks_past_it():
    bm, sched, seq = decoding()
    assert len(bm.block_table("a").block_ids) == 2  # 6 prompt tokens + the slot of token 7, blocks of 4
    seq.draft_token_ids = [8, 9, 10, 11, 12]
    out = sched.schedule()
    assert len(bm.block_table("a").block_ids) == 3  # positions 6..11
    used = bm.num_used_blocks
    with pytest.raises(ValueError, match="does not follow its drafts"):
        sched.update(out, [9, 9, None, None, None, None])
    for bad in ([None] * 6, [8, None, 9, None, None, None]):
        with pytest.raises(ValueError, match="not a run then None"):
            sched.update(out, bad)
    sched.update(out, [8, 5, None, None, None, None])  # draft 8 kept, 5 drawn where 9 was drafted
    assert seq.token_ids == [1, 2, 3, 4, 5, 6, 7, 8, 5]
    assert seq.num_computed_tokens == 8  # 7 and the draft 8 have KV; the 5 has none yet
    table = bm.block_table("a")
    assert table.num_slots == 8 and len(table.block_ids) == 2 and bm.num_used_blocks == used - 1
    # only blocks of verified tokens were offered to the prefix cache: positions 0..7 are two full blocks
    assert len(bm._seqs["a"].keys) == 2
    out = sched.schedule()
    assert out.batch.token_ids.tolist() == [5] and out.batch.positions.tolist() == [8]


def test_a_stop_token_or_max_tokens_inside_the_run_ends_it_there():
    bm, sched, seq = decoding()
    seq.draft_token_ids = [8, 0, 9]
    out = sched.schedule()
    sched.update(out, [8, 0, 9, 4])  # the stop token 0 was drafted and drawn: nothing after it is appended
    assert seq.generated_token_ids == [7, 8, 0] and seq.finish_reason is FinishReason.STOP
    assert bm.num_used_blocks == 0

    bm, sched, seq = decoding(max_tokens=4)
    seq.draft_token_ids = [8, 9, 10, 11, 12]
    out = sched.schedule()
    assert out.num_drafts == (2,)  # 7 + at most 3 more tokens: drafts past max_tokens could never be kept
    sched.update(out, [8, 9, 3])
    assert seq.generated_token_ids == [7, 8, 9, 3] and seq.finish_reason is FinishReason.LENGTH


def test_drafts_fit_the_context_and_never_take_blocks_from_anyone():
    bm = BlockManager(4, 4)
    sched = Scheduler(bm, parallel=2, max_batch_tokens=32, ctx_size=12)
    seq = Sequence("a", [1, 2, 3, 4, 5, 6, 7, 8, 9], SamplingParams(temperature=0), stop_token_ids=[0])
    sched.add(seq)
    sched.update(sched.schedule(), [7])  # 10 tokens: room for 2 more in the context
    seq.draft_token_ids = [8, 9, 10]
    out = sched.schedule()
    assert out.num_drafts == (1,)
    sched.update(out, [8, 9])
    assert seq.finish_reason is FinishReason.CONTEXT and seq.num_tokens == 12

    bm = BlockManager(3, 4)  # a full pool: the drafts are dropped, nothing is preempted
    sched = Scheduler(bm, parallel=2, max_batch_tokens=32)
    a = Sequence("a", [1, 2, 3, 4, 5, 6, 7], SamplingParams(temperature=0))
    b = Sequence("b", [1, 9, 9], SamplingParams(temperature=0))
    sched.add(a)
    sched.add(b)
    sched.update(sched.schedule(), [7, 7])
    assert bm.num_free_blocks == 0
    a.draft_token_ids = [1, 2]
    out = sched.schedule()
    assert out.num_drafts == (0, 0) and not out.preempted


# --- verification on synthetic logits


class _Tokenizer:
    def detokenizer(self):
        return None


def synthetic_logits(context) -> np.ndarray:
    """A 4-token model whose next-token logits depend on the last two tokens."""
    rng = np.random.default_rng(1000 + 4 * (context[-2] if len(context) > 1 else 0) + context[-1])
    return rng.normal(0, 1.2, size=4).astype(np.float32)


def generate_synthetic(params: SamplingParams, n: int, draft_rng=None) -> list[int]:
    """n tokens after [1] under params; with draft_rng, each step verifies up to 3 drafts sampled from a
    different distribution (the model's, flattened), so runs are kept and broken at random."""
    seq = Sequence("s", [1], params)
    req = Request(seq, None, _Tokenizer(), 1 << 20, 0.0)
    while seq.num_generated_tokens < n:
        drafts = []
        if draft_rng is not None:
            ctx = list(seq.token_ids)
            for _ in range(int(draft_rng.integers(0, 4))):
                p = np.exp(synthetic_logits(ctx) / 2.0)
                drafts.append(int(draft_rng.choice(4, p=p / p.sum())))
                ctx.append(drafts[-1])
        rows = np.stack([synthetic_logits(seq.token_ids + drafts[:i]) for i in range(len(drafts) + 1)])
        run = req.verify(rows, drafts)
        seq.token_ids += run[: n - seq.num_generated_tokens]
    return seq.generated_token_ids


PARAMS = dict(temperature=0.9, top_k=3, top_p=0.95, min_p=0.02, repetition_penalty=1.5, frequency_penalty=0.3)


def test_a_seed_gives_the_same_tokens_with_drafts_or_without():
    for seed in range(20):
        params = SamplingParams(seed=seed, **PARAMS)
        plain = generate_synthetic(params, 12)
        assert generate_synthetic(params, 12, np.random.default_rng(seed)) == plain


def test_token_frequencies_with_drafts_match_plain_sampling():
    """Chi-square over the first three tokens (64 outcomes), 3,000 samples each way. The two arms draw from
    disjoint seeds, so they are independent samples; fixed seeds keep the test deterministic."""
    n = 3000
    plain = Counter(tuple(generate_synthetic(SamplingParams(seed=i, **PARAMS), 3)) for i in range(n))
    drafted = Counter(
        tuple(generate_synthetic(SamplingParams(seed=10**6 + i, **PARAMS), 3, np.random.default_rng(i)))
        for i in range(n)
    )
    keys = sorted(set(plain) | set(drafted))
    table = np.array([[plain[k] for k in keys], [drafted[k] for k in keys]])
    table = table[:, table.sum(axis=0) >= 10]  # outcomes too rare for the test's approximation
    p = chi_square_p(table)
    assert p > 0.001, (p, table)


def chi_square_p(table: np.ndarray) -> float:
    """p-value of Pearson's chi-square test of independence for a contingency table (rows: the arms); the
    survival function of chi-square by the Wilson-Hilferty normal approximation (within ~1e-3 of the exact
    value for the 20+ degrees of freedom here)."""
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    x = float(((table - expected) ** 2 / expected).sum())
    df = (table.shape[0] - 1) * (table.shape[1] - 1)
    z = ((x / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_greedy_verification_keeps_the_argmax_run():
    seq = Sequence("s", [1], SamplingParams(temperature=0))
    req = Request(seq, None, _Tokenizer(), 1 << 20, 0.0)
    rows = np.eye(4, dtype=np.float32)[[2, 3, 1, 0]]  # argmax 2, 3, 1, 0
    assert req.verify(rows, [2, 3, 0]) == [2, 3, 1]
    assert req.verify(rows, [2, 3, 1]) == [2, 3, 1, 0]
    assert req.verify(rows, [1, 3, 1]) == [2]
    assert (req.stats.draft_proposed, req.stats.draft_accepted) == (9, 5)


# --- a real model, on the default kernel path

SMOL = "smollm2-135m-instruct-q4_1"
CODE = "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n    return 2 * (width + height)\n"
REPEAT = f"Here is a file:\n{CODE}\nThe same file again, unchanged:\n{CODE[:30]}"
PROSE = "The history of the city begins with a small market by the river, where"


@pytest.fixture(scope="module")
def smol():
    with LLM(model_file(SMOL), n_threads=2, ctx_size=512, parallel=4) as llm:
        yield llm


def run(llm, prompt, speculative, **kw):
    chunks = list(llm.generate(prompt, speculative=speculative, **kw))
    return [t for c in chunks for t in c.token_ids], "".join(c.text for c in chunks), chunks[-1]


@pytest.mark.model
def test_greedy_tokens_are_the_same_with_speculation_on_and_off(smol):
    for prompt, n in ((REPEAT, 24), (PROSE, 12)):
        off, text_off, last_off = run(smol, prompt, "off", temperature=0, max_tokens=n)
        on, text_on, last_on = run(smol, prompt, "ngram", temperature=0, max_tokens=n)
        assert on == off and text_on == text_off and last_on.finish_reason == last_off.finish_reason
        assert last_off.stats.draft_proposed == 0
        if prompt is REPEAT:  # the copy is drafted from the prompt and kept
            assert last_on.stats.draft_accepted >= 8, last_on.stats
            assert last_on.stats.completion_tokens == len(on)
    assert smol.pool_stats()["blocks_used"] == 0


@pytest.mark.model
def test_seeded_sampling_is_the_same_with_speculation_on_and_off(smol):
    params = dict(temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.1, seed=5, max_tokens=16)
    off, _, _ = run(smol, REPEAT, "off", **params)
    on, _, last = run(smol, REPEAT, "ngram", **params)
    assert on == off and last.stats.draft_proposed > 0


@pytest.mark.model
def test_drafting_beside_other_sequences_changes_no_token(smol):
    prompts = [REPEAT, PROSE, "def fibonacci(n):\n    "]
    alone = [run(smol, p, "off", temperature=0, max_tokens=12)[0] for p in prompts]
    out: list = [None] * len(prompts)
    go = threading.Barrier(len(prompts))

    def client(i):
        go.wait()
        out[i] = run(smol, prompts[i], "ngram", temperature=0, max_tokens=12)[0]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == alone
    assert smol.pool_stats()["blocks_used"] == 0


@pytest.mark.model
def test_stops_and_limits_inside_an_accepted_run_end_where_plain_decoding_does(smol):
    full, text, _ = run(smol, REPEAT, "off", temperature=0, max_tokens=24)
    # max_tokens falling inside a run of accepted drafts
    for n in (5, 9):
        on, _, last = run(smol, REPEAT, "ngram", temperature=0, max_tokens=n)
        assert on == full[:n] and last.finish_reason == "length"
    # a stop string in the middle of the copied text: nothing after it is emitted
    stop = text[10:14]
    off_ids, off_text, off_last = run(smol, REPEAT, "off", temperature=0, max_tokens=24, stop=stop)
    on_ids, on_text, on_last = run(smol, REPEAT, "ngram", temperature=0, max_tokens=24, stop=stop)
    assert (on_ids, on_text, on_last.finish_reason) == (off_ids, off_text, "stop") and stop not in on_text
    assert on_last.stats.completion_tokens == off_last.stats.completion_tokens
    # a stop token inside the run: the engine told to stop at the 6th token's id
    ids = smol.tokenize(REPEAT)
    got = []
    for s in ("off", "ngram"):
        params = SamplingParams(temperature=0, max_tokens=24)
        chunks = list(smol._engine.submit(ids, params, stop_token_ids=[full[5]], speculative=s))
        got.append(([t for c in chunks for t in c.token_ids], chunks[-1].finish_reason))
    assert got[0] == got[1] == (full[: full.index(full[5])], "stop")
    assert smol.pool_stats()["blocks_used"] == 0


@pytest.mark.model
def test_logprobs_follow_each_emitted_token(smol):
    ids = smol.tokenize(REPEAT)
    out = []
    for s in ("off", "ngram"):
        chunks = list(smol.submit(ids, SamplingParams(temperature=0, max_tokens=12), logprobs=2, speculative=s))
        out.append([(c.token_ids, c.logprobs) for c in chunks if c.token_ids])
    assert out[0] == out[1]
    assert all(lp[0].token_id == t[0] for t, lp in out[1])


@pytest.mark.model
def test_a_bad_speculative_value_is_refused(smol):
    with pytest.raises(ValueError, match="speculative must be one of 'ngram', 'off', 'draft'"):
        smol.submit(smol.tokenize("hi"), speculative="qwen2.5-coder:0.5b")
