"""Accuracy against float64 on llama.cpp's recorded sequences: a report, not a test (pytest does not collect it).

    python tests/accuracy_report.py [--paths scalar,avx2] [MODEL ...]     # default: the four test models

For each test model, each teacher-forced sequence of tests/reference/<model>.json (prompt + llama.cpp's 32 greedy
tokens) goes through the float64 forward over the same dequantized weights (tests/reference_forward.py: the truth
where llama.cpp and localllm disagree), and through localllm on each CPU path given. At every position: whether the
top-1 is float64's (where not, by how much float64 prefers its own), and |logit - float64's| over the 10 ids
llama.cpp recorded there (the only logits its file has). llama.cpp's recorded top 10 are scored the same way.
Prints one line per (model, source); each localllm line adds its mean distance minus llama.cpp's over the same
positions, with that difference's standard error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import model_file  # noqa: E402
from reference_forward import ReferenceModel  # noqa: E402

MODELS = [
    "smollm2-135m-instruct-q4_1",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "gemma-3-270m-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
]


def distances(rows: list[np.ndarray], want: list[np.ndarray], recorded: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """Per position: (float64's margin of its top-1 over the source's top-1, 0 where they agree; mean |dlogit| over
    llama.cpp's recorded ids)."""
    margin, dist = [], []
    for got, w, tops in zip(rows, want, recorded):
        for p, top in enumerate(tops):
            ids = [i for i, _ in top]
            margin.append(w[p].max() - w[p][int(np.argmax(got[p]))])
            dist.append(np.mean(np.abs(np.asarray(got[p], dtype=np.float64)[ids] - w[p][ids])))
    return np.array(margin), np.array(dist)


def score(rows: list[np.ndarray], want: list[np.ndarray], recorded: list[list]) -> tuple[int, int, float]:
    """(positions whose top-1 is float64's, positions, mean |dlogit| over llama.cpp's recorded ids)."""
    margin, dist = distances(rows, want, recorded)
    return int((margin == 0).sum()), len(margin), float(dist.mean())


def paired(dist: np.ndarray, llama: np.ndarray) -> str:
    """The mean of dist - llama over the same positions, with its standard error: whether a source is farther from
    float64 than llama.cpp beyond what the positions' spread allows."""
    d = dist - llama
    return f"vs llama.cpp {d.mean():+.3f} +- {d.std(ddof=1) / np.sqrt(len(d)):.3f}"


def main() -> None:
    from localllm import native
    from localllm.llm import LLM
    from localllm.model.gguf import GGUFFile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--paths", default=",".join(p for p in native.available_paths()))
    args = ap.parse_args()
    for name in args.models:
        path = model_file(name)
        ref = json.loads((HERE / "reference" / f"{name}.json").read_text())["teacher_forced"]
        seqs = [tf["prompt_ids"] + tf["greedy_ids"] for tf in ref]
        recorded = [tf["topk_per_position"] for tf in ref]
        with GGUFFile(path) as f:
            want = ReferenceModel(f, float64=True).logits_batch(seqs)
        llama_rows = []
        for tops, w in zip(recorded, want):  # llama.cpp's recorded logits, -inf off its top 10
            rows = np.full(w.shape, -np.inf)
            for p, top in enumerate(tops):
                rows[p, [i for i, _ in top]] = [v for _, v in top]
            llama_rows.append(rows)
        results = {"llama.cpp": distances(llama_rows, want, recorded)}
        for cpu_path in args.paths.split(","):
            native.configure(cpu_path)
            try:
                with LLM(path, n_threads=2, ctx_size=256) as llm:
                    results[cpu_path] = distances([llm.logits(s) for s in seqs], want, recorded)
            finally:
                native.configure()
        for source, (margin, dist) in results.items():
            flips = margin[margin > 0]
            line = (
                f"{name:<36} {source:<10} top-1 = float64's at {len(margin) - len(flips)}/{len(margin)}"
                f" (float64 margins of the others: max {flips.max(initial=0):.2f}), mean |dlogit| {dist.mean():.3f}"
            )
            if source != "llama.cpp":
                line += f", {paired(dist, results['llama.cpp'][1])}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
