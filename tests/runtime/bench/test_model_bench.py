"""`bench`'s tg (localllm.bench.model): each step's token is the greedy next token, read as the engine reads it: the
argmax of the whole row on the CPU, the device's top candidate where the head gives candidates (a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_file
from localllm.bench import model as bench_model
from localllm.engine.one_sequence import OneSequence
from localllm.llm import LLM


@pytest.mark.model
def test_a_steps_top_candidate_is_its_rows_argmax():
    with LLM(model_file("smollm2-135m-instruct-q4_1"), n_threads=2, ctx_size=64) as llm:
        seq = OneSequence(llm.model)
        zero = np.zeros(1, dtype=np.int32)
        by_row, by_top = [], []
        for out in (by_row, by_top):
            tok = np.array([42], dtype=np.int64)
            for i in range(6):
                if out is by_top:
                    top = seq.step(tok, i, zero, top_k=1)
                    assert top.ids.shape == (1, 1)
                    tok[0] = int(top.ids[0, 0])
                else:
                    tok[0] = int(np.argmax(seq.step(tok, i, zero)[0]))
                out.append(int(tok[0]))
        assert by_top == by_row


@pytest.mark.model
def test_tg_reads_the_top_candidate_where_the_head_gives_candidates(monkeypatch):
    asked: dict[bool, list[int]] = {}

    class Watched(LLM):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.model.supports_candidates = candidates  # as a GPU head says
            forward = self.model.forward

            def counted(batch, top_k=0, **kw):
                asked[candidates].append(top_k)
                return forward(batch, top_k=top_k, **kw)

            self.model.forward = counted

    monkeypatch.setattr(bench_model, "LLM", Watched)
    for candidates in (False, True):
        asked[candidates] = []
        r = bench_model.bench_llm(model_file("smollm2-135m-instruct-q4_1"), 2, 8, 5, 1, 16)
        assert r["tg_tps"] > 0 and r["pp_tps"] > 0
    # pp: one step of whole rows; tg: 5 steps, of whole rows on a CPU head, of one candidate on a GPU's
    assert asked == {False: [0] * 6, True: [0] + [1] * 5}
