"""`localllm bench spec`: speculative decoding on an editor's workload. Chat requests at temperature 0 with a fixed
max_tokens (whole-file code edits, a reformat, free prose), each run with drafting off, n-gram drafting and (given
a draft model) the draft model; with a llama.cpp interpreter, llama-cpp-python plain and with prompt lookup
(`LlamaPromptLookupDecoding`, each num_pred_tokens of LOOKUP_SWEEP) on the same prompt token ids. All runs of a
task alternate (ours, then theirs, and the order reversed every other repetition) and every run starts from an
empty cache, so all pay the same prefill.

    rows = speculation_tasks(path, threads=2, reps=2, draft=None, llama=None)
    # one dict per task: "task", "kind", "prompt_tokens", "max_tokens", "tokens", "same", "modes"
    # modes: {"off" | "ngram" | "draft" | "llama" | "lookup": {"tps", "decode_tps", "tokens", ...}}

A mode's figures come from its fastest run: tps is completion tokens over the time from submission to the last
token (end to end, prefill included); decode_tps is the tokens after the first over the time after the first.
Ours also carry acceptance (drafts kept over drafts verified) and mean_accepted (drafts kept per step that carried
drafts: stats.draft_accepted / stats.draft_steps); all carry tokens_per_step (tokens over the steps that
produced them). "lookup" is the best num_pred_tokens ("num_pred"). same: every run of each of our modes produced
the same tokens (they must: speculation is lossless); llama_same: llama.cpp's plain and lookup runs agree with
each other. ratios(row) gives the speedups.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from ..llm import LLM

LOOKUP_SWEEP = (2, 4, 10)  # LlamaPromptLookupDecoding num_pred_tokens tried on every task; its default is 10
CTX_SIZE = 2048

SOURCE = '''import json
import os


class Inventory:
    """Items in a warehouse, saved as JSON."""

    def __init__(self, path):
        self.path = path
        self.items = {}
        if os.path.exists(path):
            with open(path) as f:
                self.items = json.load(f)

    def add_item(self, name, count):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove_item(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError(f"only {have} of {name} in stock")
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        result = 0
        for name in self.items:
            result = result + self.items[name]
        return result

    def save(self):
        with open(self.path, "w") as f:
            json.dump(self.items, f, indent=2)
'''

TABLE = """name,team,role,started
Ada Lovelace,analytics,lead,2019-03-01
Grace Hopper,compilers,principal,2017-06-12
Alan Turing,research,fellow,2018-01-20
Edsger Dijkstra,algorithms,lead,2020-09-15
Barbara Liskov,platform,architect,2016-11-03
"""

# (name, kind, max_tokens, prompt): kind "code" and "reformat" repeat their input, "prose" does not
TASKS = [
    (
        "rename",
        "code",
        384,
        f"Rename the method add_item to add_stock everywhere in this file. Reply with the whole "
        f"edited file only.\n\n```python\n{SOURCE}```",
    ),
    (
        "add parameter",
        "code",
        384,
        f"Add a parameter `reason=None` to remove_item and record it in a list "
        f"self.removals. Reply with the whole edited file only.\n\n```python\n{SOURCE}```",
    ),
    (
        "convert loop",
        "code",
        384,
        f"Rewrite the loop in total() as a call to sum(). Reply with the whole edited file "
        f"only.\n\n```python\n{SOURCE}```",
    ),
    ("reformat", "reformat", 384, f"Convert this CSV to a JSON list of objects. Reply with the JSON only.\n\n{TABLE}"),
    ("story", "prose", 128, "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("explain", "prose", 128, "Explain to a curious child why the sky is blue and why sunsets are red."),
]


class LlamaLookup:
    """llama-cpp-python in its own process (llama_cpp_lookup.py, run by `python`, the interpreter of its virtual
    environment), the model loaded once: run(ids, max_tokens, num_pred) -> its result dict (num_pred 0: plain).
    A context manager; ends the process on exit."""

    SCRIPT = str(Path(__file__).resolve().parent / "llama_cpp_lookup.py")

    def __init__(self, python: str, path: Path, threads: int, ctx: int, kv: str = "f16"):
        self._err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (lives as long as the process: close())
        args = {"model": str(path), "threads": threads, "ctx": ctx, "kv": kv}
        self._p = subprocess.Popen(
            [python, self.SCRIPT, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
        )
        self.version = self._read()["version"]

    def _read(self) -> dict:
        line = self._p.stdout.readline()
        if not line:
            self._p.wait()
            self._err.seek(0)
            tail = self._err.read().strip().splitlines()[-1:]
            raise RuntimeError(f"llama-cpp-python ended (exit status {self._p.returncode}): {' '.join(tail)}")
        return json.loads(line)

    def run(self, ids: list[int], max_tokens: int, num_pred: int) -> dict:
        self._p.stdin.write(json.dumps({"ids": [int(i) for i in ids], "max_tokens": max_tokens, "num_pred": num_pred}))
        self._p.stdin.write("\n")
        self._p.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self._p.poll() is None:
            self._p.stdin.close()
            try:
                self._p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._p.kill()
                self._p.wait()
        self._err.close()

    def __enter__(self) -> LlamaLookup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def busy_cores(seconds: float = 0.5) -> float | None:
    """Cores' worth of CPU time the whole machine used over the next `seconds` (/proc/stat); None without it."""

    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
        return sum(v) - v[3] - v[4], sum(v)

    try:
        busy0, total0 = read()
        time.sleep(seconds)
        busy1, total1 = read()
    except (OSError, ValueError, IndexError):
        return None
    return (os.cpu_count() or 1) * (busy1 - busy0) / max(total1 - total0, 1)


def wait_quiet(limit: float, wait_s: float) -> tuple[float, bool]:
    """Called while this benchmark is idle: waits until the machine's other processes use less than `limit` cores
    (a llama.cpp whose threads share cores with another busy process can run several times slower), at most
    wait_s seconds. Returns (seconds waited, whether it is quiet)."""
    t0 = time.perf_counter()
    time.sleep(0.2)  # our own threads (and llama.cpp's) stop spinning after a run
    while True:
        busy = busy_cores()
        if busy is None or busy < limit:
            return time.perf_counter() - t0, True
        if time.perf_counter() - t0 > wait_s:
            return time.perf_counter() - t0, False
        time.sleep(2.0)


def _drop_caches(llm: LLM) -> None:
    """Every run starts cold: no cached prefix (the model's or the draft model's) and an empty shared n-gram table
    (which would otherwise draft a repeated task from its earlier run)."""
    llm.reset_caches()


def _ours(llm: LLM, ids: list[int], max_tokens: int, speculative: str) -> dict:
    """One request of prompt ids (speculative: "off", "ngram" or "draft") from empty caches."""
    _drop_caches(llm)
    toks: list[int] = []
    first = 0.0
    t0 = time.perf_counter()
    last = None
    for chunk in llm.generate(ids, temperature=0, max_tokens=max_tokens, speculative=speculative):
        if chunk.token_ids and not toks:
            first = time.perf_counter() - t0
        toks += chunk.token_ids
        last = chunk
    elapsed = time.perf_counter() - t0
    st = last.stats
    return {
        "tokens": toks,
        "elapsed_s": elapsed,
        "first_s": first,
        "draft_proposed": st.draft_proposed,
        "draft_accepted": st.draft_accepted,
        "draft_steps": st.draft_steps,
    }


def _figures(run: dict) -> dict:
    """A run's rates: tps end to end, decode_tps after the first token, tokens_per_step."""
    n = len(run["tokens"])
    decode_s = run["elapsed_s"] - run["first_s"]
    out = {
        "tokens": n,
        "elapsed_s": run["elapsed_s"],
        "tps": n / run["elapsed_s"] if run["elapsed_s"] > 0 else 0.0,
        "decode_tps": (n - 1) / decode_s if n > 1 and decode_s > 0 else 0.0,
    }
    if "draft_steps" in run:  # ours: every step emits one token plus the drafts it accepted
        steps = n - run["draft_accepted"]
        out["acceptance"] = run["draft_accepted"] / run["draft_proposed"] if run["draft_proposed"] else 0.0
        out["mean_accepted"] = run["draft_accepted"] / run["draft_steps"] if run["draft_steps"] else 0.0
        out["tokens_per_step"] = n / steps if steps > 0 else 0.0
        out.update({k: run[k] for k in ("draft_proposed", "draft_accepted", "draft_steps")})
    else:  # llama.cpp: the first token comes with the prompt's evaluation
        out["tokens_per_step"] = n / (run["steps"] + 1) if n else 0.0
    return out


def _order(ours: list[str], theirs: list[int], rep: int) -> list[tuple[str, str | int]]:
    """This repetition's runs: ours and llama.cpp's interleaved, the order reversed on odd repetitions."""
    runs: list[tuple[str, str | int]] = []
    for a, b in itertools.zip_longest(ours, theirs):
        if a is not None:
            runs.append(("ours", a))
        if b is not None:
            runs.append(("llama", b))
    return runs if rep % 2 == 0 else runs[::-1]


def speculation_tasks(
    path: Path,
    threads: int,
    reps: int = 2,
    draft: str | None = None,
    llama: str | None = None,
    max_tokens: int | None = None,
    tasks: list[tuple[str, str, int, str]] | None = None,
    quiet: float | None = 0.3,
    quiet_wait_s: float = 300.0,
    **llm_kwargs,
) -> list[dict]:
    """One row per task (module docstring). draft: a draft model (path or store name) for the "draft" column;
    llama: the interpreter of llama-cpp-python's virtual environment for the "llama" and "lookup" columns;
    max_tokens: caps every task's max_tokens (a quick run); quiet: before each run, wait (at most quiet_wait_s) until
    other processes use less than this many cores (None: never wait; a row's "waited_s" and "loaded_runs", the runs
    that started with the machine still busy, say how it went); llm_kwargs: LLM's KV options."""
    if reps < 1 or (max_tokens is not None and max_tokens < 1):
        raise ValueError("reps and max_tokens must be positive")
    tasks = TASKS if tasks is None else tasks
    ours = ["off", "ngram"] + (["draft"] if draft is not None else [])
    theirs = [0, *LOOKUP_SWEEP] if llama else []
    rows = []
    spec = "ngram" if draft is None else draft  # a draft model loaded beside the model; requests name their mode
    with LLM(path, n_threads=threads, ctx_size=CTX_SIZE, parallel=1, speculative=spec, **llm_kwargs) as llm:
        side = None
        try:
            prompts = [llm.tokenizer.encode_chat([{"role": "user", "content": p}]) for _, _, _, p in tasks]
            caps = [n if max_tokens is None else min(n, max_tokens) for _, _, n, _ in tasks]
            if llama:
                kv = llm_kwargs.get("kv_type", "f16")
                ctx = max(len(ids) + n for ids, n in zip(prompts, caps)) + 16
                side = LlamaLookup(llama, path, threads, ctx, kv)
                for k in (0, LOOKUP_SWEEP[0]):
                    side.run(prompts[0][:8], 4, k)  # warm-up: its weights paged in
            for mode in ours:
                _ours(llm, prompts[0][:8], 4, mode)  # warm-up: the weights (the draft's too) paged in
            for (name, kind, _, _), ids, cap in zip(tasks, prompts, caps):
                runs: dict = {}
                waited, loaded = 0.0, 0
                for rep in range(reps):
                    for who, mode in _order(ours, theirs, rep):
                        if quiet is not None:
                            w, ok = wait_quiet(quiet, quiet_wait_s)
                            waited, loaded = waited + w, loaded + (not ok)
                        r = side.run(ids, cap, mode) if who == "llama" else _ours(llm, ids, cap, mode)
                        runs.setdefault((who, mode), []).append(r)
                row = _row(name, kind, len(ids), cap, runs, side.version if side else None)
                rows.append({**row, "waited_s": waited, "loaded_runs": loaded})
        finally:
            if side is not None:
                side.close()
    return rows


def _row(name: str, kind: str, prompt_tokens: int, cap: int, runs: dict, llama_version: str | None) -> dict:
    """A task's row from all its runs: {(who, mode): [run, ...]}."""

    def best(rs: list[dict]) -> dict:
        return min(rs, key=lambda r: r["elapsed_s"])

    modes: dict = {}
    ours = {mode: rs for (who, mode), rs in runs.items() if who == "ours"}
    for mode, rs in ours.items():
        modes[mode] = _figures(best(rs))
    replies = {tuple(r["tokens"]) for rs in ours.values() for r in rs}
    row = {
        "task": name,
        "kind": kind,
        "prompt_tokens": prompt_tokens,
        "max_tokens": cap,
        "tokens": modes["off"]["tokens"] if "off" in modes else 0,
        "same": len(replies) == 1,
    }
    theirs = {mode: rs for (who, mode), rs in runs.items() if who == "llama"}
    if theirs:
        modes["llama"] = _figures(best(theirs[0]))
        lookups = [(k, best(rs)) for k, rs in theirs.items() if k != 0]
        k, r = min(lookups, key=lambda kr: kr[1]["elapsed_s"])
        modes["lookup"] = {**_figures(r), "num_pred": k}
        llama_replies = {tuple(r["tokens"]) for rs in theirs.values() for r in rs}
        row["llama_same"] = len(llama_replies) == 1
        row["llama_matches_ours"] = llama_replies == replies
        row["llama_version"] = llama_version
    row["modes"] = modes
    return row


def ratios(row: dict) -> dict:
    """Speedups end to end ("x") and after the first token ("x_decode"): ngram_vs_off, draft_vs_off,
    lookup_vs_llama, ngram_vs_lookup, draft_vs_lookup, where both modes ran."""
    pairs = {
        "ngram_vs_off": ("ngram", "off"),
        "draft_vs_off": ("draft", "off"),
        "lookup_vs_llama": ("lookup", "llama"),
        "ngram_vs_lookup": ("ngram", "lookup"),
        "draft_vs_lookup": ("draft", "lookup"),
    }
    m = row["modes"]
    out = {}
    for name, (a, b) in pairs.items():
        if a in m and b in m and m[b]["tps"] > 0 and m[b]["decode_tps"] > 0:
            out[name] = m[a]["tps"] / m[b]["tps"]
            out[name + "_decode"] = m[a]["decode_tps"] / m[b]["decode_tps"]
    return out
