"""Speculative decoding on an editor's workload: chat requests at temperature 0 with a fixed max_tokens, each run
with n-gram drafting off and on, alternated, the prefix cache dropped before every run (both pay the same
prefill).

    rows = speculation_tasks(path, threads=2, reps=2)
    # [{"task", "kind", "off_tps", "ngram_tps", "off_decode_tps", "ngram_decode_tps", "speedup",
    #   "acceptance", "tokens_per_step", "same"}]

tps: completion tokens over the time from submission to the last chunk (end to end, prefill included);
decode_tps: the engine's own rate after the first token (stats.decode_tps). acceptance: drafts accepted over
drafts verified; tokens_per_step: completion tokens over the steps that produced them (each step emits one token
plus the drafts it accepted). same: the two replies are the same tokens (they must be wherever the products are
batch-invariant: native/kernels.h).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..llm import LLM

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

TASKS = [
    (
        "rename",
        "code",
        f"Rename the method add_item to add_stock everywhere in this file. Reply with the whole "
        f"edited file only.\n\n```python\n{SOURCE}```",
    ),
    (
        "add parameter",
        "code",
        f"Add a parameter `reason=None` to remove_item and record it in a list "
        f"self.removals. Reply with the whole edited file only.\n\n```python\n{SOURCE}```",
    ),
    (
        "convert loop",
        "code",
        f"Rewrite the loop in total() as a call to sum(). Reply with the whole edited file "
        f"only.\n\n```python\n{SOURCE}```",
    ),
    ("reformat", "reformat", f"Convert this CSV to a JSON list of objects. Reply with the JSON only.\n\n{TABLE}"),
    ("story", "prose", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("explain", "prose", "Explain to a curious child why the sky is blue and why sunsets are red."),
]


def _run(llm: LLM, prompt: str, max_tokens: int, speculative: str) -> tuple[float, list[int], object]:
    llm.exclusive(lambda seq: None)  # drops the prefix cache: each run prefills the same way
    t0 = time.perf_counter()
    chunks = list(
        llm.chat([{"role": "user", "content": prompt}], temperature=0, max_tokens=max_tokens, speculative=speculative)
    )
    elapsed = time.perf_counter() - t0
    return elapsed, [t for c in chunks for t in c.token_ids], chunks[-1].stats


def speculation_tasks(
    path: Path, threads: int, reps: int = 2, code_tokens: int = 384, prose_tokens: int = 128, **llm_kwargs
) -> list[dict]:
    """Best of reps per task and mode; off and ngram alternate within each repetition."""
    if reps < 1 or code_tokens < 1 or prose_tokens < 1:
        raise ValueError("reps and token counts must be positive")
    rows = []
    with LLM(path, n_threads=threads, ctx_size=2048, parallel=1, **llm_kwargs) as llm:
        _run(llm, "Hello", 4, "off")  # warm-up: the weights paged in
        for name, kind, prompt in TASKS:
            n = prose_tokens if kind == "prose" else code_tokens
            best: dict[str, tuple] = {}
            for rep in range(reps):
                for mode in ("off", "ngram") if rep % 2 == 0 else ("ngram", "off"):
                    elapsed, toks, st = _run(llm, prompt, n, mode)
                    if mode not in best or elapsed < best[mode][0]:
                        best[mode] = (elapsed, toks, st)
            (t_off, toks_off, st_off), (t_on, toks_on, st_on) = best["off"], best["ngram"]
            steps = max(st_on.completion_tokens - st_on.draft_accepted, 1)
            rows.append(
                {
                    "task": name,
                    "kind": kind,
                    "tokens": len(toks_on),
                    "off_tps": len(toks_off) / t_off,
                    "ngram_tps": len(toks_on) / t_on,
                    "off_decode_tps": st_off.decode_tps,
                    "ngram_decode_tps": st_on.decode_tps,
                    "speedup": (len(toks_on) / t_on) / (len(toks_off) / t_off),
                    "acceptance": st_on.draft_accepted / max(st_on.draft_proposed, 1),
                    "tokens_per_step": st_on.completion_tokens / steps,
                    "same": toks_on == toks_off,
                }
            )
    return rows
