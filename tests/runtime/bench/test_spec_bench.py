"""`localllm bench spec` (runtime/bench/speculation.py, runtime/commands/bench.py): the order runs alternate in,
the rows built from runs (best run, ratios, the same-reply checks), a short real run on the tiny model with a draft
model, llama.cpp's side where its environment exists, and the command's arguments and tables. No timing bounds:
the machine is shared."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import model_file
from localllm.bench import speculation
from localllm.bench.speculation import (
    LOOKUP_SWEEP,
    LlamaLookup,
    _order,
    _row,
    busy_cores,
    ratios,
    speculation_tasks,
    wait_quiet,
)
from localllm.cli import main

SMOL = "smollm2-135m-instruct-q4_1"
LLAMA_PYTHON = Path.home() / ".cache" / "localllm" / "llama-venv" / "bin" / "python"
QUICK_TASKS = [speculation.TASKS[0], speculation.TASKS[4]]  # a whole-file edit and free prose


def localllm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "localllm.cli", *args], capture_output=True, text=True, env=os.environ, timeout=600
    )


def ours(tokens, elapsed, first=0.5, proposed=0, accepted=0, steps=0):
    return {
        "tokens": tokens,
        "elapsed_s": elapsed,
        "first_s": first,
        "draft_proposed": proposed,
        "draft_accepted": accepted,
        "draft_steps": steps,
    }


def theirs(tokens, elapsed, first=1.0, steps=None):
    return {
        "tokens": tokens,
        "elapsed_s": elapsed,
        "first_s": first,
        "steps": len(tokens) - 1 if steps is None else steps,
    }


def test_runs_interleave_ours_with_llama_cpp_and_reverse_every_other_repetition():
    first = _order(["off", "ngram", "draft"], [0, 2, 4, 10], 0)
    assert first == [
        ("ours", "off"),
        ("llama", 0),
        ("ours", "ngram"),
        ("llama", 2),
        ("ours", "draft"),
        ("llama", 4),
        ("llama", 10),
    ]
    assert _order(["off", "ngram", "draft"], [0, 2, 4, 10], 1) == first[::-1]
    assert _order(["off", "ngram"], [], 2) == [("ours", "off"), ("ours", "ngram")]
    assert _order(["off", "ngram"], [], 3) == [("ours", "ngram"), ("ours", "off")]


def test_a_row_keeps_each_modes_fastest_run_and_its_ratios():
    reply = list(range(10))
    runs = {
        ("ours", "off"): [ours(reply, 4.0), ours(reply, 2.5)],
        # 10 tokens: 6 drafts kept of 8 proposed over 2 drafting steps, so 4 steps produced them
        ("ours", "ngram"): [ours(reply, 1.0, 0.1, proposed=8, accepted=6, steps=2), ours(reply, 2.0, 0.2, 9, 1, 3)],
        ("llama", 0): [theirs(reply, 5.0, 1.4)],
        ("llama", 2): [theirs(reply, 4.0, 1.0, steps=5)],
        ("llama", 10): [theirs(reply, 3.0, 1.5, steps=3), theirs(reply, 3.5)],
    }
    row = _row("rename", "code", 321, 12, runs, "0.3.36")
    head = {k: row[k] for k in ("task", "kind", "prompt_tokens", "max_tokens", "tokens")}
    assert head == {"task": "rename", "kind": "code", "prompt_tokens": 321, "max_tokens": 12, "tokens": 10}
    assert row["same"] and row["llama_same"] and row["llama_matches_ours"] and row["llama_version"] == "0.3.36"
    m = row["modes"]
    assert set(m) == {"off", "ngram", "llama", "lookup"}
    assert m["off"]["tps"] == 10 / 2.5 and m["off"]["decode_tps"] == 9 / 2.0
    assert m["off"]["acceptance"] == 0 and m["off"]["tokens_per_step"] == 1.0
    ng = m["ngram"]
    assert ng["tps"] == 10 / 1.0 and ng["decode_tps"] == 9 / 0.9
    assert (ng["acceptance"], ng["mean_accepted"], ng["tokens_per_step"]) == (6 / 8, 3.0, 10 / 4)
    assert m["llama"]["tps"] == 10 / 5.0 and m["llama"]["decode_tps"] == 9 / 3.6
    # the best num_pred_tokens is the fastest run's; its steps after the prompt's evaluation give tokens per step
    assert m["lookup"]["num_pred"] == 10 and m["lookup"]["tps"] == 10 / 3.0 and m["lookup"]["tokens_per_step"] == 2.5
    x = ratios(row)
    assert x["ngram_vs_off"] == 2.5 and x["ngram_vs_off_decode"] == (9 / 0.9) / (9 / 2.0)
    assert x["lookup_vs_llama"] == 5.0 / 3.0
    assert x["ngram_vs_lookup"] == 3.0 and x["ngram_vs_lookup_decode"] == (9 / 0.9) / (9 / 1.5)
    assert "draft_vs_off" not in x and "draft_vs_lookup" not in x


def test_a_row_says_when_replies_differ():
    a, b = [1, 2, 3], [1, 2, 4]
    runs = {("ours", "off"): [ours(a, 1.0)], ("ours", "ngram"): [ours(a, 1.0), ours(b, 2.0)]}
    row = _row("story", "prose", 40, 3, runs, None)
    assert not row["same"] and "llama_same" not in row  # a slower run that differs counts too
    runs = {("ours", "off"): [ours(a, 1.0)], ("llama", 0): [theirs(a, 1.0)], ("llama", 4): [theirs(b, 1.0)]}
    row = _row("story", "prose", 40, 3, runs, "0.3.36")
    assert row["same"] and not row["llama_same"] and not row["llama_matches_ours"]


class DraftCounting(speculation.LLM):
    """The real LLM, recording how it was built and what each request asked for."""

    built: ClassVar[list] = []
    requests: ClassVar[list] = []

    def __init__(self, path, **kw):
        DraftCounting.built.append(kw.get("speculative"))
        super().__init__(path, **kw)

    def generate(self, ids, speculative=None, **kw):
        DraftCounting.requests.append(speculative)
        return super().generate(ids, speculative=speculative, **kw)


@pytest.mark.model
def test_tiny_model_with_a_draft_model(tmp_path, monkeypatch):
    """smollm2 drafting for itself (a copy: a draft must not be the model's own file); 2 repetitions, 12 tokens."""
    path = model_file(SMOL)
    draft = tmp_path / "smol-draft.gguf"
    shutil.copyfile(path, draft)
    DraftCounting.built, DraftCounting.requests = [], []
    monkeypatch.setattr(speculation, "LLM", DraftCounting)
    rows = speculation_tasks(path, 2, reps=2, draft=str(draft), max_tokens=12, tasks=QUICK_TASKS, quiet=None)
    # one LLM with the draft model loaded; each request names its mode: a warm-up each, then 2 runs a task
    assert DraftCounting.built == [str(draft)]
    assert sorted(DraftCounting.requests) == sorted(["off", "ngram", "draft"] * (1 + 2 * len(QUICK_TASKS)))
    assert [(r["task"], r["kind"], r["max_tokens"]) for r in rows] == [("rename", "code", 12), ("story", "prose", 12)]
    for r in rows:
        assert r["same"], r  # speculation never changes a token, whatever drafts it
        assert 0 < r["tokens"] <= 12 and r["prompt_tokens"] > 40
        m = r["modes"]
        assert set(m) == {"off", "ngram", "draft"}
        assert m["off"]["draft_proposed"] == 0 and m["off"]["tokens_per_step"] == 1.0
        for mode in m.values():
            assert mode["tokens"] == r["tokens"] and mode["tps"] > 0
            assert mode["mean_accepted"] == (mode["draft_accepted"] / mode["draft_steps"] if mode["draft_steps"] else 0)
            assert 0 <= mode["acceptance"] <= 1
        # the model's own greedy tokens as drafts: every draft the reply had room for is kept
        d = m["draft"]
        assert d["draft_proposed"] > 0 and d["draft_accepted"] == d["draft_proposed"], d
        assert set(ratios(r)) >= {"ngram_vs_off", "draft_vs_off"}
    # the edit repeats its input: n-gram drafts are proposed
    assert rows[0]["modes"]["ngram"]["draft_proposed"] > 0


def test_waiting_for_a_quiet_machine_gives_up_after_its_limit():
    busy = busy_cores(0.1)
    assert busy is not None and 0 <= busy <= os.cpu_count() + 1e-9
    waited, quiet = wait_quiet(-1.0, 0.5)  # never quiet enough
    assert not quiet and waited >= 0.5
    waited, quiet = wait_quiet(os.cpu_count() + 1.0, 60)  # always quiet enough
    assert quiet and waited < 30


def test_a_dead_llama_cpp_process_is_an_error_naming_it(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named llama_cpp' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"exit status 3\): ModuleNotFoundError: No module named llama_cpp"):
        LlamaLookup(str(fake), tmp_path / "m.gguf", 1, 64)


@pytest.mark.model
def test_llama_cpp_side_on_the_same_prompt_ids():
    if not LLAMA_PYTHON.exists():
        pytest.skip(f"no llama-cpp-python environment at {LLAMA_PYTHON}")
    path = model_file(SMOL)
    rows = speculation_tasks(path, 1, reps=1, llama=str(LLAMA_PYTHON), max_tokens=8, tasks=QUICK_TASKS[:1], quiet=None)
    (r,) = rows
    m = r["modes"]
    assert set(m) == {"off", "ngram", "llama", "lookup"} and r["llama_version"].startswith("0.")
    assert m["lookup"]["num_pred"] in LOOKUP_SWEEP
    for mode in ("llama", "lookup"):
        assert 0 < m[mode]["tokens"] <= 8 and m[mode]["tps"] > 0 and m[mode]["tokens_per_step"] >= 1
    assert m["llama"]["tokens_per_step"] == 1.0  # plain decoding: one evaluation per token
    assert {"ngram_vs_lookup", "lookup_vs_llama"} <= set(ratios(r))


@pytest.mark.model
def test_llama_cpp_lookup_past_n_batch_positions():
    """A prompt longer than llama.cpp's n_batch (512) through its prompt lookup: llama-cpp-python keeps a score row
    per position only with logits_all, which llama_cpp_lookup.py sets beside the draft model."""
    if not LLAMA_PYTHON.exists():
        pytest.skip(f"no llama-cpp-python environment at {LLAMA_PYTHON}")
    ids = [1000 + i % 300 for i in range(600)]  # repeats itself: lookup finds drafts in it
    with LlamaLookup(str(LLAMA_PYTHON), model_file(SMOL), 1, 640) as side:
        plain, lookup = side.run(ids, 16, 0), side.run(ids, 16, 10)
    assert len(plain["tokens"]) == len(lookup["tokens"]) == 16
    assert plain["steps"] == 15 and lookup["steps"] <= 15


@pytest.mark.parametrize(
    "args, message",
    [
        (["bench", "spec"], "bench spec takes one model"),
        (["bench", "spec", "a.gguf", "b.gguf"], "bench spec takes one model"),
        (["bench", "spec", "{model}", "--reps", "0"], "--reps"),
        (["bench", "spec", "{model}", "--max-tokens", "0"], "--max-tokens"),
        (["bench", "spec", "{model}", "--quiet-wait", "-1"], "--quiet-wait"),
        (["bench", "spec", "{model}", "--draft-model", "/nonexistent/draft.gguf"], "/nonexistent/draft.gguf"),
        (["bench", "spec", "{model}", "--compare", "--llama-python", "/nonexistent/python"], "--compare needs"),
        (["bench", "spec", "{model}", "--compare", "--k-type", "q8_0"], "one KV type"),
    ],
)
def test_bench_spec_argument_errors(args, message):
    path = model_file(SMOL)
    r = localllm(*(a.format(model=path) for a in args))
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr


def test_bench_spec_tables(monkeypatch, capsys):
    """The command's tables from rows (speculation_tasks replaced: no model runs), with --compare and a draft."""
    path = model_file(SMOL)
    reply = list(range(10))
    runs = {
        ("ours", "off"): [ours(reply, 2.0)],
        ("ours", "ngram"): [ours(reply, 1.0, 0.1, 8, 6, 2)],
        ("ours", "draft"): [ours(reply, 0.5, 0.1, 10, 9, 2)],
        ("llama", 0): [theirs(reply, 4.0)],
        ("llama", 4): [theirs(reply, 2.5, steps=4)],
    }
    got = {}

    def fake_tasks(p, threads, **kw):
        got.update(kw, path=p, threads=threads)
        return [_row("rename", "code", 321, 384, runs, "0.3.36"), _row("story", "prose", 40, 128, runs, "0.3.36")]

    monkeypatch.setattr(speculation, "speculation_tasks", fake_tasks)
    monkeypatch.setattr("localllm.bench.compare.llama_python", lambda arg: "/fake/python")
    argv = ["bench", "spec", str(path), "--draft-model", str(path), "--compare", "--reps", "3", "--threads", "1"]
    assert main(argv) == 0
    assert got["path"] == path and got["threads"] == 1 and got["reps"] == 3 and got["draft"] == str(path)
    assert got["llama"] == "/fake/python" and got["max_tokens"] is None and got["kv_type"] == "f16"
    assert (got["quiet"], got["quiet_wait_s"]) == (0.3, 300.0)
    out = capsys.readouterr().out.splitlines()
    rename = [line for line in out if line.strip().startswith("rename")]
    assert len(rename) == 2  # ours, then llama.cpp's
    # ours: prompt and reply tokens; off, ngram (75% of drafts kept, 3.0 a step), draft (90%, 4.5); ratios; same
    assert rename[0].split()[1:3] == ["321", "10"]
    for cell in ("5.0 (  6.0)", "10.0 ( 10.0)", "75%  3.0", "20.0 ( 22.5)", "90%  4.5"):
        assert cell in rename[0], (cell, rename[0])
    assert rename[0].split()[-3:] == ["2.00x", "4.00x", "yes"]
    # llama.cpp: plain, lookup with k 4; lookup/plain; ngram/lookup and draft/lookup, end to end then decode; same
    assert "2.5 (  3.0)" in rename[1] and "4.0 (  6.0)" in rename[1]
    assert rename[1].split()[-7:] == ["4", "1.60x", "2.50x", "1.67x", "5.00x", "3.75x", "yes"]
    assert any("num_pred_tokens (k) of 2 4 10" in line for line in out)
    assert main([*argv, "--json", "--quiet-wait", "0"]) == 0
    assert got["quiet"] is None
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == path.name and report["draft_model"] == path.name and report["reps"] == 3
    rows = report["rows"]
    assert [r["task"] for r in rows] == ["rename", "story"] and rows[0]["ratios"]["draft_vs_lookup"] == 5.0


@pytest.mark.model
def test_bench_speculative_is_bench_spec():
    path = model_file(SMOL)
    r = localllm(
        "bench", str(path), "--speculative", "--threads", "1", "--reps", "1", "--max-tokens", "2", "--quiet-wait", "0"
    )
    assert r.returncode == 0, r.stderr
    assert "ngram/off" in r.stdout and r.stdout.count("  yes") == len(speculation.TASKS) and "llama" not in r.stdout
    r = localllm(
        "bench",
        str(path),
        "--speculative",
        "--threads",
        "1",
        "--reps",
        "1",
        "--max-tokens",
        "2",
        "--quiet-wait",
        "0",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [row["task"] for row in rows] == [t[0] for t in speculation.TASKS]
    for row in rows:
        assert set(row["modes"]) == {"off", "ngram"} and row["same"] and 0 < row["tokens"] <= 2
        assert set(row["ratios"]) == {"ngram_vs_off", "ngram_vs_off_decode"}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
