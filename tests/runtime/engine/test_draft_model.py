"""Speculative decoding with a draft model (engine/drafting/draft_model.py): lossless on real models, greedy and seeded,
alone and beside other sequences; a draft identical to the model is always right (which checks the draft's KV
bookkeeping: catch-up, rollback, truncation across blocks); its KV goes back when requests end; tokenizer
mismatches and misuse are refused with a clear error.

Exact equality holds on the default (AVX2 or scalar) path because a row's logits do not depend on the rows beside
it (native/kernels.h).
"""

from __future__ import annotations

import shutil
import threading

import pytest
from conftest import model_file
from localllm.engine.drafting import Drafter
from localllm.engine.drafting.draft_model import ModelCostPolicy
from localllm.llm import LLM

SMOL = "smollm2-135m-instruct-q4_1"
CODE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
PROMPTS = [
    f"Here is a file:\n{CODE}\nThe same file with area renamed to surface:\n",
    "The history of the city begins with a small market by the river, where",
    "def fibonacci(n):\n    ",
]


@pytest.fixture(scope="module")
def smol_pair(tmp_path_factory):
    """smollm2 drafting for itself (a copy of its file: a draft must not be the model's own path)."""
    src = model_file(SMOL)
    copy = tmp_path_factory.mktemp("draft") / "smol-draft.gguf"
    shutil.copyfile(src, copy)
    with LLM(src, n_threads=2, ctx_size=512, parallel=4, speculative=str(copy)) as llm:
        assert llm._engine.drafter.draft.cost == pytest.approx(1.0)  # a copy costs a whole step: never worth it
        llm._engine.drafter.draft.cost = 0.0  # these tests check the bookkeeping, so the model drafts regardless
        yield llm


def run(llm, prompt, speculative, **kw):
    chunks = list(llm.generate(prompt, speculative=speculative, **kw))
    return [t for c in chunks for t in c.token_ids], chunks[-1]


@pytest.fixture
def model_drafts_only(smol_pair):
    """Every draft from the draft model (no n-gram drafts first) for the length of a test."""
    smol_pair._engine.drafter.ngrams_first = False
    yield smol_pair
    smol_pair._engine.drafter.ngrams_first = True


@pytest.mark.model
def test_a_draft_identical_to_the_model_is_always_accepted_and_changes_nothing(smol_pair, model_drafts_only):
    assert smol_pair.speculative == "draft"
    for prompt in PROMPTS:
        off, last_off = run(smol_pair, prompt, "off", temperature=0, max_tokens=40, ignore_eos=True)
        on, last = run(smol_pair, prompt, None, temperature=0, max_tokens=40, ignore_eos=True)
        assert on == off and last.finish_reason == last_off.finish_reason
        st = last.stats
        # greedy drafts from the same weights are the model's own greedy tokens: every one is kept (the draft
        # length doubles while they are), so 40 tokens take far fewer than 40 steps
        assert st.draft_proposed > 0 and st.draft_accepted == st.draft_proposed, st
        assert st.draft_steps < 20, st
    stats = smol_pair.pool_stats()
    assert stats["blocks_used"] == 0 and stats["draft_blocks_used"] == 0


@pytest.mark.model
def test_ngram_matches_draft_first_and_the_model_drafts_the_rest(smol_pair):
    # the prompt holds the text the reply copies: n-gram drafts (free) carry most of it; where they find no match
    # of 2+ tokens the draft model proposes; the reply is plain decoding's either way
    prompt = f"Here is a file:\n{CODE}\nThe same file again, unchanged:\n{CODE[:12]}"
    off, _ = run(smol_pair, prompt, "off", temperature=0, max_tokens=40, ignore_eos=True)
    engine, model_steps = smol_pair._engine, {}
    for hybrid in (True, False):
        engine.drafter.ngrams_first = hybrid
        before = engine.drafter.draft.steps
        on, last = run(smol_pair, prompt, "draft", temperature=0, max_tokens=40, ignore_eos=True)
        model_steps[hybrid] = engine.drafter.draft.steps - before
        assert on == off and last.stats.draft_accepted >= 20, last.stats
    engine.drafter.ngrams_first = True
    assert model_steps[True] * 2 < model_steps[False], model_steps  # measured: 8 vs 38


@pytest.mark.model
def test_seeded_sampling_with_a_draft_model_is_the_same_reply(smol_pair, model_drafts_only):
    # sampling at temperature 1.2 rejects many greedy drafts: rollbacks of the draft KV mid-block and across blocks
    params = dict(temperature=1.2, top_k=40, seed=11, max_tokens=48, ignore_eos=True)
    for prompt in PROMPTS[:2]:
        off, _ = run(smol_pair, prompt, "off", **params)
        on, last = run(smol_pair, prompt, "draft", **params)
        assert on == off
        assert 0 < last.stats.draft_accepted < last.stats.draft_proposed, last.stats
    assert smol_pair.pool_stats()["draft_blocks_used"] == 0


@pytest.mark.model
def test_drafting_for_several_sequences_at_once_changes_no_token(smol_pair, model_drafts_only):
    alone = [run(smol_pair, p, "off", temperature=0, max_tokens=24)[0] for p in PROMPTS]
    out: list = [None] * len(PROMPTS)
    go = threading.Barrier(len(PROMPTS))

    def client(i):
        go.wait()
        out[i] = run(smol_pair, PROMPTS[i], "draft", temperature=0, max_tokens=24)[0]

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == alone
    stats = smol_pair.pool_stats()
    assert stats["blocks_used"] == 0 and stats["draft_blocks_used"] == 0


@pytest.mark.model
def test_a_request_may_choose_ngram_or_off_and_draft_needs_a_draft_model(smol_pair):
    a, _ = run(smol_pair, PROMPTS[0], "ngram", temperature=0, max_tokens=16)
    b, _ = run(smol_pair, PROMPTS[0], "off", temperature=0, max_tokens=16)
    assert a == b
    with pytest.raises(ValueError, match="speculative must be one of"):
        smol_pair.submit(smol_pair.tokenize("hi"), speculative="fast")
    with LLM(model_file(SMOL), n_threads=2, ctx_size=256) as plain, pytest.raises(ValueError, match="needs a draft"):
        plain.submit(plain.tokenize("hi"), speculative="draft")


@pytest.mark.model
@pytest.mark.filterwarnings("ignore:.*no tokenizer.chat_template")
def test_a_draft_model_with_another_vocabulary_or_the_model_itself_is_refused():
    smol = model_file(SMOL)
    with pytest.raises(ValueError, match=r"cannot draft for .*smollm2.*its tokenizer is 'llama'"):
        LLM(smol, ctx_size=256, speculative=str(model_file("gemma-3-270m-q4_k_m")))
    with pytest.raises(
        ValueError, match=r"cannot draft for .*smollm2.*its vocabulary has 151936 tokens, the model.s 49152"
    ):
        LLM(smol, ctx_size=256, speculative=str(model_file("qwen2.5-coder-0.5b-instruct-q4_k_m")))
    with pytest.raises(ValueError, match="is the model itself"):
        LLM(smol, ctx_size=256, speculative=str(smol))
    with pytest.raises(ValueError, match="not-a-model"):
        LLM(smol, ctx_size=256, speculative="not-a-model")


@pytest.mark.model
def test_qwen_0_5b_drafting_for_1_5b_gives_the_same_tokens():
    big, small = model_file("qwen2.5-coder-1.5b-instruct-q4_k_m"), model_file("qwen2.5-coder-0.5b-instruct-q4_k_m")
    msgs = [{"role": "user", "content": f"Rename area to surface in this file and return the whole file:\n{CODE}"}]
    with LLM(big, n_threads=2, ctx_size=512, speculative=str(small)) as llm:
        off = [t for c in llm.chat(msgs, temperature=0, max_tokens=32, speculative="off") for t in c.token_ids]
        chunks = list(llm.chat(msgs, temperature=0, max_tokens=32))
        on = [t for c in chunks for t in c.token_ids]
        assert on == off
        assert chunks[-1].stats.draft_accepted > 0, chunks[-1].stats


class _FakeDraft:
    """Stands in for a DraftModel in the Drafter: proposes k copies of 7, records what it is asked."""

    cost = 0.4

    def __init__(self):
        self.asked, self.released = [], []

    def propose_all(self, items):
        self.asked.append([(seq_id, k) for seq_id, _, k in items])
        return {seq_id: [7] * k for seq_id, _, k in items}

    def release(self, seq_id):
        self.released.append(seq_id)

    def reset(self):
        pass


def test_the_drafter_drafts_by_ngrams_first_and_only_the_models_drafts_feed_its_cost_policy():
    fake = _FakeDraft()
    d = Drafter(draft=fake, shared_ngrams=False)
    d.open("copy", "draft")
    d.open("new", "draft")
    copying = [1, 2, 3, 4, 5, 1, 2]  # 1 2 occurred before: an n-gram match of 2 drafts 3 4 5 ...
    fresh = [9, 8, 6, 5]
    assert d.propose([("copy", copying), ("new", fresh)]) == {"copy": [3, 4, 5, 1], "new": [7, 7, 7, 7]}
    assert fake.asked == [[("new", 4)]]  # one batched round, for the sequence without a match
    for _ in range(20):  # the n-gram drafts all fail: the pacer shortens them, the model's record is untouched
        d.observe("copy", 4, 0)
    assert d._seqs["copy"].policy.pays()
    d.close("copy", copying, 5)
    d.close("new", fresh, 4)
    assert fake.released == ["copy", "new"]


def test_the_model_rests_while_its_first_drafts_do_not_pay_and_probes_again():
    """A draft position costing 0.4 of a step: drafts kept half the time or less do not pay (0.4 + a verified row's
    0.1), so after a few proposals the model rests, probing after PROBE_EVERY steps and then less often; kept often
    again, it drafts every step."""
    d = ModelCostPolicy(0.4)
    proposals = 0
    while d.pays():  # 3 drafts, 1 kept: a third
        d.observe(3, 1)
        proposals += 1
        assert proposals <= 8, "still drafting at a loss"
    assert proposals >= 4  # it gathers a few proposals' evidence first
    # probes after PROBE_EVERY steps, then twice as many while the probes do not pay
    calls = [d.pays() for _ in range(3 * ModelCostPolicy.PROBE_EVERY)]
    assert [i for i, c in enumerate(calls) if c] == [
        ModelCostPolicy.PROBE_EVERY - 2,
        3 * ModelCostPolicy.PROBE_EVERY - 2,
    ]
    for _ in range(12):  # the probes' drafts are kept now: the record climbs back over the cost
        d.observe(2, 2)
    assert all(d.pays() for _ in range(5))


def test_a_cheap_draft_model_drafts_even_when_most_of_its_drafts_fail():
    d = ModelCostPolicy(0.05)
    for i in range(30):
        assert d.pays(), i
        d.observe(4, i % 2 * 2)  # a quarter of its drafts kept: above 0.05 + 0.1
