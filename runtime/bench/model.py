"""End to end on one model, as llama-bench measures it: load time, pp (one step of n_prompt tokens from an
empty cache, logits for the last), tg (n_gen single-token steps from a one-token context, each step's token its
greedy next token: the argmax of its row, or where the head is on a GPU the top candidate the device picks, as the
engine's greedy decoding takes it, so that 4 bytes cross the bus rather than the vocabulary's row), weight bytes
streamed per token against the read bandwidth, peak RSS. depth D (llama-bench's -d): both after D tokens already
in the cache (depth_ids, prefilled untimed), as a long conversation or a code file in an editor's context.

    r = bench_llm(path, threads=2, n_prompt=512, n_gen=128, reps=2, bw_mib=1024)
    r["pp_tps"], r["tg_tps"], r["tg_gbs"], r["read_bandwidth_gbs"], r["peak_rss_mb"], r["load_s"]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..llm import LLM
from ..model.architectures import spec_from_gguf
from ..model.gguf import GGUFFile
from .machine import peak_rss_mb, read_bandwidth


def prompt_ids(n_vocab: int, n: int, seed: int = 0) -> np.ndarray:
    """The benchmark's prompt: n token ids drawn with a fixed seed (the same for localllm and llama.cpp); seed 1
    draws the context a depth puts before it."""
    return np.random.default_rng(seed).integers(100, min(n_vocab, 30000), size=n)


def model_prompt_ids(path: Path, n: int, seed: int = 0) -> np.ndarray:
    """prompt_ids for the model at path (its vocabulary size read from the file)."""
    with GGUFFile(path) as f:
        return prompt_ids(spec_from_gguf(f).n_vocab, n, seed)


def streamed_bytes(path: Path) -> int:
    """Weight bytes a decode step reads: every tensor, except an embedding table that is only looked up, and of a
    mixture of experts' stacked expert tensors (ffn_*_exps) the share of the experts a token uses."""
    with GGUFFile(path) as f:
        spec = spec_from_gguf(f)
        tied = "output.weight" not in f.tensors
        total = 0
        for name, t in f.tensors.items():
            if name == "token_embd.weight" and not tied:
                continue
            total += t.nbytes * spec.n_expert_used // spec.n_expert if "_exps." in name else t.nbytes
        return total


def bench_llm(
    path: Path,
    threads: int,
    n_prompt: int,
    n_gen: int,
    reps: int,
    bw_mib: int,
    kv: dict | None = None,
    ids=None,
    depth_ids=None,
    between: Callable[[int], None] | None = None,
    kv_label: Callable[[LLM], str] = lambda llm: (
        llm.k_type if llm.k_type == llm.v_type else f"{llm.k_type}/{llm.v_type}"
    ),
) -> dict:
    """Best of reps. kv: LLM's KV cache (and device) keyword arguments. ids: the prompt (default prompt_ids).
    depth_ids: tokens in the cache before pp and tg (default none). between(rep):
    called after each of our repetitions (--compare runs llama.cpp's there, so the two alternate and share the
    machine's drifting load). kv_label(llm): the result's "kv"."""
    depth = 0 if depth_ids is None else len(depth_ids)
    t0 = time.perf_counter()
    llm = LLM(path, n_threads=threads, ctx_size=depth + max(n_prompt, n_gen + 1) + 16, **(kv or {}))
    load_s = time.perf_counter() - t0
    kv_name = kv_label(llm)
    device = llm.model.device
    if ids is None:
        ids = prompt_ids(llm.n_vocab, n_prompt)
    last = np.array([n_prompt - 1], dtype=np.int32)
    top1 = llm.model.supports_candidates  # the head on a GPU (Model.supports_candidates)

    def measure(seq) -> tuple[float, float]:  # on the engine thread, alone (LLM.exclusive)
        for c0 in range(0, depth, 512):  # the depth's tokens, once: pp and tg then write only past them
            chunk = np.asarray(depth_ids[c0 : c0 + 512])
            seq.step(chunk, c0, np.array([len(chunk) - 1], dtype=np.int32))
        pp = tg = float("inf")
        for rep in range(reps):
            t0 = time.perf_counter()
            seq.step(ids, depth, last)
            pp = min(pp, time.perf_counter() - t0)
            tok = np.array([ids[0]], dtype=np.int64)
            zero = np.zeros(1, dtype=np.int32)
            t0 = time.perf_counter()
            for i in range(n_gen):
                if top1:
                    tok[0] = int(seq.step(tok, depth + i, zero, top_k=1).ids[0, 0])
                else:
                    tok[0] = int(np.argmax(seq.step(tok, depth + i, zero)[0]))
            tg = min(tg, time.perf_counter() - t0)
            if between:
                between(rep)
        return pp, tg

    pp, tg = llm.exclusive(measure)
    peak_rss = peak_rss_mb()
    llm.close()
    streamed = streamed_bytes(path)
    return {
        "model": path.name,
        "threads": threads,
        "kv": kv_name,
        "device": device,
        "load_s": load_s,
        "pp_tps": n_prompt / pp,
        "tg_tps": n_gen / tg,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "depth": depth,
        "weights_streamed_mb": streamed / 1e6,
        "tg_gbs": streamed * n_gen / tg / 1e9,
        "read_bandwidth_gbs": read_bandwidth(mib=bw_mib),
        "peak_rss_mb": peak_rss,
    }
