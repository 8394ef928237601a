"""The llama.cpp side of `localllm bench MODEL --compare`: run by llama-cpp-python's own interpreter (its own
virtual environment), never imported by localllm. Standard library, numpy and llama_cpp only.

    python llama_cpp_script.py '{"mode": "bench", "model": PATH, "threads": 2, "n_prompt": 512, "n_gen": 128,
                                "reps": 2, "ctx": 656, "token_ids": [...], "depth_ids": [], "kv": "f16"}'
        -> one JSON line on stdout: load_s, pp_tps, tg_tps, peak_rss_mb, version
    python llama_cpp_script.py '{"mode": "first-token", "model": PATH, "threads": 2, "prompt": "...", "ctx": 256}'
        -> the first generated token's text on stdout, flushed, as soon as it exists (the caller times it)

bench measures what localllm.bench.model.bench_llm does: pp is one evaluation of n_prompt tokens from an empty cache
(logits for the last), tg is n_gen single-token evaluations from an empty cache, each token the argmax of the
previous logits; best of reps. depth_ids (optional): evaluated once first, untimed; pp and tg then start
at that depth. kv "q8_0" / "q4_0" set both cache types, with flash attention on, which llama.cpp
needs for a quantized V.
"""

import json
import resource
import sys
import time

GGML_TYPES = {"f16": 1, "q4_0": 2, "q8_0": 8}


def load(a):
    from llama_cpp import Llama

    kw = {}
    if a.get("kv", "f16") != "f16":
        kw = {"flash_attn": True, "type_k": GGML_TYPES[a["kv"]], "type_v": GGML_TYPES[a["kv"]]}
    n_batch = max(512, a.get("n_prompt", 0))
    return Llama(
        model_path=a["model"],
        n_ctx=a["ctx"],
        n_threads=a["threads"],
        n_threads_batch=a["threads"],
        n_batch=n_batch,
        n_ubatch=n_batch,
        verbose=False,
        **kw,
    )


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM (ru_maxrss after an exec also counts the parent's RSS at the fork). The same
    as localllm.bench.machine.peak_rss_mb, which this script cannot import (it runs in llama-cpp-python's venv)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench(a) -> dict:
    import llama_cpp
    import numpy as np

    t0 = time.perf_counter()
    llm = load(a)
    load_s = time.perf_counter() - t0
    ids = [int(i) for i in a["token_ids"]]
    depth_ids = [int(i) for i in a.get("depth_ids", [])]
    n_vocab = llm.n_vocab()
    llm.reset()
    if depth_ids:
        llm.eval(depth_ids)
    pp = tg = float("inf")
    for _ in range(a["reps"]):
        llm.n_tokens = len(depth_ids)  # eval drops cached positions from n_tokens on
        t0 = time.perf_counter()
        llm.eval(ids)
        pp = min(pp, time.perf_counter() - t0)
        llm.n_tokens = len(depth_ids)
        tok = ids[0]
        t0 = time.perf_counter()
        for _ in range(a["n_gen"]):
            llm.eval([tok])
            tok = int(np.argmax(np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))))
        tg = min(tg, time.perf_counter() - t0)
    rss = peak_rss_mb()
    return {
        "load_s": load_s,
        "pp_tps": len(ids) / pp,
        "tg_tps": a["n_gen"] / tg,
        "peak_rss_mb": rss,
        "version": getattr(llama_cpp, "__version__", "?"),
    }


def first_token(a) -> None:
    llm = load(a)
    for chunk in llm.create_completion(a["prompt"], max_tokens=1, temperature=0.0, stream=True):
        sys.stdout.write(chunk["choices"][0]["text"] or "\n")
        sys.stdout.flush()
        break


def main() -> None:
    a = json.loads(sys.argv[1])
    if a["mode"] == "bench":
        print(json.dumps(bench(a)), flush=True)
    elif a["mode"] == "first-token":
        first_token(a)
    else:
        raise SystemExit(f"unknown mode {a['mode']!r}")


if __name__ == "__main__":
    main()
