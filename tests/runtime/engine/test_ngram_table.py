"""The n-gram table shared by a model's requests (engine/drafting/ngram_table.py): chained drafts against a brute-force
reading of what was learned, its bound, the drafter's choice between its own match and the table's, and on a
real model: a regenerated reply drafts from the first one and is the same tokens."""

from __future__ import annotations

import pytest
from conftest import model_file
from hypothesis import given, settings
from hypothesis import strategies as st
from localllm.engine.drafting.ngram import NgramIndex
from localllm.engine.drafting.ngram_table import NgramTable
from localllm.llm import LLM


def brute_next(texts: list[list[int]], ctx: list[int], max_n: int, min_n: int) -> tuple[int, int | None]:
    """(n, follower) of the longest suffix of ctx (min_n..max_n) seen in texts, the latest occurrence winning."""
    for n in range(min(max_n, len(ctx)), min_n - 1, -1):
        suffix = ctx[len(ctx) - n :]
        found = None
        for text in texts:  # learned in order: later texts and later positions overwrite
            for i in range(n, len(text)):
                if text[i - n : i] == suffix:
                    found = text[i]
        if found is not None:
            return n, found
    return 0, None


@settings(max_examples=200, deadline=None, database=None)
@given(
    texts=st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=30), min_size=1, max_size=4),
    query=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    k=st.integers(1, 6),
)
def test_drafts_chain_the_latest_follower_of_the_longest_match(texts, query, k):
    table = NgramTable(max_n=4, min_n=2)
    for t in texts:
        table.learn(t)
    n_first, drafts = table.draft(query, k)
    ctx, want, first = list(query), [], 0
    while len(want) < k:
        n, nxt = brute_next(texts, ctx, 4, 2)
        if nxt is None:
            break
        first = first or n
        want.append(nxt)
        ctx.append(nxt)
    assert drafts == want and n_first == first


@settings(max_examples=200, deadline=None, database=None)
@given(
    texts=st.lists(
        st.tuples(st.lists(st.integers(0, 3), min_size=0, max_size=30), st.integers(0, 12)), min_size=1, max_size=4
    ),
    slices=st.lists(st.integers(1, 9), min_size=1, max_size=40),
    max_entries=st.integers(1, 40),
)
def test_queued_texts_learned_in_slices_are_the_texts_learned_at_once(texts, slices, max_entries):
    at_once, queued = NgramTable(max_n=4, min_n=2, max_entries=max_entries), NgramTable(4, 2, max_entries)
    queued.max_queued = 1000  # none dropped here (the bound has its own test)
    for tokens, start in texts:
        at_once.learn(tokens, start)
        queued.queue(tokens, start)
        tokens.append(99)  # the caller's list may change after queue(): the table kept its own copy
    left = queued.num_queued
    for limit in slices:
        done = queued.learn_queued(limit)
        assert done == min(limit, left) and queued.num_queued == left - done
        left -= done
    queued.learn_queued()
    assert queued.num_queued == 0 and queued.learn_queued() == 0
    assert list(queued._next.items()) == list(at_once._next.items())  # the same entries in the same LRU order


def test_the_queue_is_bounded_and_drops_the_oldest_followers():
    table = NgramTable(max_n=3, min_n=2, max_entries=8)  # n-grams of 4 followers at most: max_queued 4
    assert table.max_queued == 4
    table.queue([1, 2, 3, 4, 5, 6])
    table.queue([7, 8, 9])
    assert table.num_queued == 4  # of 5 + 2 followers, the oldest 3 (2, 3, 4) went unlearned
    assert table.learn_queued() == 4
    assert table.draft([1, 2], 1) == (0, []) and table.draft([3, 4], 3) == (2, [5, 6])
    assert table.draft([7, 8], 1) == (2, [9])


def test_the_drafter_learns_ended_requests_in_slices():
    from localllm.engine.drafting.drafter import LEARN_PER_STEP, Drafter

    d = Drafter()
    ended = list(range(1000, 1000 + 3 * LEARN_PER_STEP))  # a reply of 3 slices after a 10-token prompt
    d.open("a", "ngram")
    d.close("a", list(range(10)) + ended, 10)
    assert d.table.num_queued == len(ended)  # nothing learned at the end itself
    d.open("b", "ngram")
    assert d.propose([("b", [7, 1000, 1001, 1002])]) == {}  # nor by a proposal
    for left in (2, 1, 0):
        assert d.learn(LEARN_PER_STEP) == LEARN_PER_STEP  # the engine's, once a step
        assert d.table.num_queued == left * LEARN_PER_STEP
    assert d.learn(LEARN_PER_STEP) == 0
    # b now repeats the ended reply: it drafts what followed there
    assert d.propose([("b", [7, 1000, 1001, 1002])]) == {"b": [1003, 1004]}  # the pacer's start: 2 drafts


def test_learn_from_start_records_only_followers_from_there():
    table = NgramTable(max_n=3, min_n=2)
    table.learn([1, 2, 3, 4, 5], start=3)  # followers 4 and 5 only
    assert table.draft([1, 2], 3) == (0, [])
    assert table.draft([2, 3], 3) == (2, [4, 5])


def test_the_table_is_bounded_and_forgets_the_least_recently_used():
    table = NgramTable(max_n=2, min_n=2, max_entries=3)
    table.learn([1, 2, 3, 4, 5, 6])  # (1,2)->3 (2,3)->4 (3,4)->5 (4,5)->6: the first is gone
    assert len(table) == 3
    assert table.draft([1, 2], 1) == (0, [])
    assert table.draft([2, 3], 1) == (2, [4])  # read: now the most recent
    table.learn([7, 8, 9])
    assert table.draft([2, 3], 1) == (2, [4]) and table.draft([3, 4], 1) == (0, [])


def test_the_drafter_takes_the_tables_drafts_only_for_a_longer_match():
    table = NgramTable(max_n=4, min_n=2)
    table.learn([10, 11, 12, 13, 14, 15])

    def drafter():
        return NgramIndex(max_n=4, min_n=1, shared=table)

    # own tokens: 12 followed by 99 earlier (a match of 1); the table knows 11 12 -> 13 14 15 (a match of 2)
    assert drafter().draft([12, 99, 11, 12], 3) == [13, 14, 15]
    # own match of 2 (11 12 -> 7) ties the table's: the sequence's own text wins
    assert drafter().draft([11, 12, 7, 11, 12], 3) == [7, 11, 12]
    assert NgramIndex(max_n=4, min_n=1).draft([12, 99, 11, 12], 3) == [99, 11, 12]


@pytest.mark.model
def test_a_regenerated_reply_drafts_from_the_first_and_is_the_same_tokens():
    msgs = [{"role": "user", "content": "Write a Python class for a bank account with deposit and withdraw."}]
    with LLM(model_file("smollm2-135m-instruct-q4_1"), n_threads=2, ctx_size=512) as llm:
        runs = []
        for _ in range(2):
            llm.exclusive(lambda seq: None)  # drops the prefix cache: both pay the same prefill
            chunks = list(llm.chat(msgs, temperature=0, max_tokens=64, ignore_eos=True))
            runs.append(([t for c in chunks for t in c.token_ids], chunks[-1].stats))
        (first, st1), (second, st2) = runs
        assert second == first
        # nearly every token of the second reply was drafted from the first, and kept
        assert st2.draft_accepted >= 48 and st2.draft_accepted > 2 * st1.draft_accepted, (st1, st2)
        llm.reset_caches()  # forgets the first reply: a third run drafts as the first did
        chunks = list(llm.chat(msgs, temperature=0, max_tokens=64, ignore_eos=True))
        st3 = chunks[-1].stats
        assert (st3.draft_proposed, st3.draft_accepted, st3.cached_tokens) == (
            st1.draft_proposed,
            st1.draft_accepted,
            0,
        )
