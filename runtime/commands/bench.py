"""`localllm bench MODEL`: load time, prompt processing (pp512) and generation (tg128) speed, effective
weight bandwidth against the roofline, and peak RSS.

`localllm bench MODEL --compare`: the same measurements from llama.cpp (llama-cpp-python, run by the interpreter
of its own virtual environment: --llama-python, $LOCALLLM_LLAMA_PYTHON, or ~/.cache/localllm/llama-venv) on the
same model, threads, KV type and prompt tokens in the same run, repetitions alternating (ours, then one of
llama.cpp's in its own process, and again; best of each), plus the time from process start to the first token of
a short prompt for `localllm run` and for a llama-cpp-python script; printed as ratios.

`localllm bench kernels [MODEL ...]`: the native kernels on real weight matrices, against this
machine's streaming read bandwidth (the decode roofline).

For each model and weight type: N = 1 as GB/s of weights streamed (and % of the measured roofline),
N = 2..512 as effective GFLOP/s (2*M*K*N / time), with 1 and all threads. Matrices are copied until the
set is well past the last-level cache, so N = 1 streams from memory as a real decode does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from localllm.commands.kv import add_kv_arguments, kv_kwargs, kv_label

DEFAULT_MODELS = ["qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b"]
TEST_CACHE_NAMES = {
    "qwen2.5-coder:0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder:1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m",
}
STREAM_BYTES = 512 << 20  # working set for N = 1: far past any last-level cache here


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks: `bench MODEL` (pp512, tg128), `bench kernels` (matrix products)",
        description="Benchmarks. `bench MODEL`: load time, pp512, tg128, GB/s, peak RSS. "
        "`bench kernels [MODEL...]`: matrix products on real weights vs read bandwidth.",
    )
    p.add_argument("what", help="`kernels`, or a model (store name or .gguf path) to benchmark end to end")
    p.add_argument(
        "models", nargs="*", help=f"for `kernels`: store names or .gguf paths (default: {' '.join(DEFAULT_MODELS)})"
    )
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="bench MODEL: prompt tokens (default 512)")
    p.add_argument("-g", "--n-gen", type=int, default=128, help="bench MODEL: generated tokens (default 128)")
    p.add_argument("-r", "--repetitions", type=int, default=2, help="bench MODEL: runs per test, best kept")
    p.add_argument("--threads", type=int, nargs="+", default=None, help="thread counts (default: 1 and all cores)")
    p.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8, 16, 64, 512], help="activation rows")
    p.add_argument("--seconds", type=float, default=0.4, help="minimum time per measurement")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--pull", action="store_true", help="pull catalog models that are not in the store yet")
    p.add_argument("--compare", action="store_true", help="bench MODEL: run llama.cpp (llama-cpp-python) too, same run")
    p.add_argument(
        "--llama-python",
        default=None,
        metavar="PYTHON",
        help="interpreter that has llama-cpp-python (default $LOCALLLM_LLAMA_PYTHON or "
        "~/.cache/localllm/llama-venv/bin/python)",
    )
    add_kv_arguments(p)  # bench MODEL only
    p.add_argument(
        "--bandwidth-mib",
        type=int,
        default=1024,
        metavar="MIB",
        help="buffer for the read-bandwidth measurement (default 1024: far past any cache)",
    )
    p.add_argument(
        "--tensors",
        nargs="+",
        metavar="NAME",
        default=None,
        help="bench kernels: only these matrices (e.g. blk.0.ffn_down.weight)",
    )
    p.add_argument(
        "--stream-mib",
        type=int,
        default=512,
        metavar="MIB",
        help="weights streamed per N = 1 measurement (copies of the matrices, default 512)",
    )
    p.set_defaults(func=run)


def _resolve(name: str, pull: bool) -> Path:
    from localllm.commands.show import resolve

    try:
        return resolve(name, pull=pull)
    except (LookupError, ValueError, OSError):
        cached = TEST_CACHE_NAMES.get(name)
        env = os.environ.get("LOCALLLM_TEST_MODELS")
        base = Path(env) if env else Path.home() / ".cache" / "localllm" / "test-models"
        if cached and (base / f"{cached}.gguf").is_file():
            return base / f"{cached}.gguf"
        raise


def _timeit(fn, seconds: float) -> float:
    fn()
    best = float("inf")
    t_end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        if time.perf_counter() > t_end:
            return best


def read_bandwidth(seconds: float = 1.0, mib: int = 1024) -> float:
    """Best GB/s of a multi-threaded streaming read over a buffer of `mib` MiB: one stream per thread, or four
    interleaved and prefetched, whichever reads faster here (the kernels prefetch several rows ahead, so one
    plain stream alone understated the roofline where a core's single stream is latency-bound: 16.8 GB/s
    with two threads on a 16-core Xeon whose Q8_0 product streamed 27 GB/s). About `seconds` in all, half to
    each method (each adds a warm-up read)."""
    import numpy as np
    from localllm import kernels

    buf = np.ones(mib << 20, dtype=np.uint8)
    dt = min(_timeit(lambda s=s: kernels.stream_read(buf, s), seconds / 2) for s in (1, 4))
    return buf.nbytes / dt / 1e9


def int8_peak(seconds: float = 0.5) -> float | None:
    """Best GOP/s (two operations per multiply-add) of the kernel path's int8 multiply-add instruction and its
    accumulation (vpmaddubsw + vpaddw on AVX2, vpdpbusd on AVX-512 VNNI) in independent chains on every thread,
    over about `seconds`: the compute roofline of the N = 512 products, which also spend instructions on
    decoding weights and widening sums. None on the scalar path."""
    from localllm import kernels

    iters = 1 << 20  # a few ms a call
    first = kernels.int8_peak(iters)  # also the warm-up
    if first is None:
        return None
    return 2 * first[0] / _timeit(lambda: kernels.int8_peak(iters), seconds) / 1e9


def quantized_matrices(f) -> list:
    """The tensors of an open GGUF file that `bench kernels` times: quantized 2-D matrices of a supported type."""
    return [
        t
        for t in f.tensors.values()
        if len(t.dims) == 2 and t.type.supported and t.type.name not in ("F32", "F16", "BF16")
    ]


def check_tensor_names(paths: list[Path], names: list[str]) -> None:
    """--tensors, before anything is measured: every name a quantized matrix of some model (a misspelt one is not
    silently dropped), and every model holding one of them."""
    from localllm.gguf import GGUFFile

    found: dict[Path, set[str]] = {}
    for p in paths:
        with GGUFFile(p) as f:
            found[p] = {t.name for t in quantized_matrices(f)} & set(names)
    unknown = [n for n in names if not any(n in s for s in found.values())]
    if unknown:
        raise ValueError(f"no quantized matrix named {', '.join(unknown)} in {', '.join(p.name for p in paths)}")
    for p, s in found.items():
        if not s:
            raise ValueError(f"{p.name}: none of the matrices {', '.join(names)}")


def bench_model(
    path: Path,
    thread_counts: list[int],
    ns: list[int],
    seconds: float,
    out,
    stream_bytes: int = STREAM_BYTES,
    tensors: list[str] | None = None,
) -> list[dict]:
    import numpy as np
    from localllm import kernels
    from localllm.gguf import GGUFFile

    rows = []
    f = GGUFFile(path)
    by_type: dict[str, list] = {}
    for t in quantized_matrices(f):
        if tensors is None or t.name in tensors:
            by_type.setdefault(t.type.name, []).append(t)
    rng = np.random.default_rng(0)
    for tname, ts in sorted(by_type.items()):
        if tensors is None:  # the embedding is looked up, not multiplied (unless asked for by name)
            ts = [t for t in ts if t.name != "token_embd.weight"] or ts
        mats = [(t.type.id, t.rows(), t.row_len) for t in ts]
        stream = list(mats)
        while sum(m[1].nbytes for m in stream) < stream_bytes:
            stream += [(i, np.array(r), k) for i, r, k in mats]
        small = mats[: max(1, min(len(mats), 4))]
        xs = {k: rng.standard_normal((max(ns), k), dtype=np.float32) for k in {m[2] for m in mats}}
        for th in thread_counts:
            kernels.configure(threads=th)
            res = {"model": path.name, "type": tname, "threads": th}
            t1 = None
            for n in ns:
                sel = stream if n <= 16 else small
                dt = _timeit(
                    lambda sel=sel, n=n, xs=xs: [kernels.matmul_raw(i, r, k, xs[k][:n]) for i, r, k in sel], seconds
                )
                nbytes = sum(r.nbytes for _, r, _ in sel)
                flops = sum(2.0 * r.shape[0] * k * n for _, r, k in sel)
                if n == 1:
                    t1 = dt
                    res["n1_gbs"] = nbytes / dt / 1e9
                res[f"n{n}_gflops"] = flops / dt / 1e9
                if n > 1 and n <= 16 and t1:
                    res[f"n{n}_time_ratio"] = dt / t1
            rows.append(res)
            print(_fmt_row(res, ns), file=out, flush=True)
    f.close()
    kernels.configure()
    return rows


def _fmt_row(r: dict, ns: list[int]) -> str:
    cells = [f"{r['model'][:36]:<36}", f"{r['type']:<6}", f"{r['threads']:>2}"]
    if "n1_gbs" in r:
        cells.append(f"{r['n1_gbs']:6.1f} GB/s ({r.get('n1_pct', 0):3.0f}%)")
    for n in ns:
        if n > 1:
            cells.append(f"{r[f'n{n}_gflops']:7.1f}")
    if "n8_time_ratio" in r:
        cells.append(f"{r['n8_time_ratio']:5.2f}x")
    return " ".join(cells)


LLAMA_VENV_HINT = (
    "python -m venv ~/.cache/localllm/llama-venv && "
    "~/.cache/localllm/llama-venv/bin/pip install llama-cpp-python  (builds from source, ~11 min)"
)
FIRST_TOKEN_PROMPT = "def fibonacci(n):"


def llama_python(arg: str | None) -> str:
    """The interpreter that has llama_cpp; ValueError saying how to make one when there is none."""
    import subprocess

    cand = arg or os.environ.get("LOCALLLM_LLAMA_PYTHON") or str(Path.home() / ".cache/localllm/llama-venv/bin/python")
    try:
        ok = subprocess.run([cand, "-c", "import llama_cpp"], capture_output=True, timeout=120).returncode == 0
    except OSError:
        ok = False
    if not ok:
        raise ValueError(
            f"--compare needs llama-cpp-python: {cand} cannot import llama_cpp; make it with: {LLAMA_VENV_HINT}"
        )
    return cand


def _llama_script() -> str:
    return str(Path(__file__).resolve().parent.parent / "llama_cpp_bench.py")


def bench_llama_cpp(
    python: str, path: Path, threads: int, ids: list[int], n_gen: int, reps: int, ctx: int, kv: str
) -> dict:
    """llama.cpp's load, pp, tg and peak RSS in its own process (llama_cpp_bench.py)."""
    import subprocess

    args = {
        "mode": "bench",
        "model": str(path),
        "threads": threads,
        "n_prompt": len(ids),
        "n_gen": n_gen,
        "reps": reps,
        "ctx": ctx,
        "token_ids": [int(i) for i in ids],
        "kv": kv,
    }
    r = subprocess.run([python, _llama_script(), json.dumps(args)], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"llama-cpp-python failed on {path.name}: {r.stderr.strip().splitlines()[-1:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def first_token_s(cmd: list[str], runs: int = 3) -> float:
    """Best seconds from starting cmd to the first byte on its stdout (the process is then killed)."""
    import subprocess

    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=os.environ)
        try:
            if not p.stdout.read(1):
                raise RuntimeError(f"no output from {' '.join(cmd[:4])} ...")
            best = min(best, time.perf_counter() - t0)
        finally:
            p.kill()
            p.wait()
    return best


def llama_cpp_rounds(python: str, path: Path, threads: int, ids: list[int], n_gen: int, kv: dict):
    """-> (between, result): between(rep) runs one llama.cpp repetition (its own process; the best pp, tg and
    load are kept, peak RSS is the largest) into result, a dict bench_llama_cpp's keys fill."""
    if kv["k_type"] not in (None, kv["kv_type"]) or kv["v_type"] not in (None, kv["kv_type"]):
        raise ValueError("--compare runs one KV type for K and V: use --kv-type only")
    ctx = max(len(ids), n_gen + 1) + 16
    best: dict = {}

    def between(rep: int) -> None:
        lr = bench_llama_cpp(python, path, threads, ids, n_gen, 1, ctx, kv["kv_type"])
        if not best:
            best.update(lr)
            return
        for key in ("pp_tps", "tg_tps"):
            best[key] = max(best[key], lr[key])
        best["load_s"] = min(best["load_s"], lr["load_s"])
        best["peak_rss_mb"] = max(best["peak_rss_mb"], lr["peak_rss_mb"])

    return between, best


def compare_first_token(path: Path, threads: int, r: dict, python: str, lr: dict) -> None:
    """Both times to first token, alternated, best of each, into r and lr."""
    ours = [
        sys.executable,
        "-m",
        "localllm.cli",
        "run",
        str(path),
        FIRST_TOKEN_PROMPT,
        "--raw",
        "-n",
        "1",
        "--temperature",
        "0",
        "-t",
        str(threads),
        "-c",
        "256",
    ]
    theirs = [
        python,
        _llama_script(),
        json.dumps(
            {"mode": "first-token", "model": str(path), "threads": threads, "prompt": FIRST_TOKEN_PROMPT, "ctx": 256}
        ),
    ]
    lr["first_token_s"] = r["first_token_s"] = float("inf")
    for _ in range(5):  # alternated, best of each: the machine's load drifts between runs
        r["first_token_s"] = min(r["first_token_s"], first_token_s(ours, 1))
        lr["first_token_s"] = min(lr["first_token_s"], first_token_s(theirs, 1))


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM where there is /proc, else ru_maxrss."""
    import resource

    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def prompt_ids(n_vocab: int, n: int):
    """The benchmark's prompt: n token ids drawn with a fixed seed (the same for localllm and llama.cpp)."""
    import numpy as np

    return np.random.default_rng(0).integers(100, min(n_vocab, 30000), size=n)


def bench_llm(
    path: Path,
    threads: int,
    n_prompt: int,
    n_gen: int,
    reps: int,
    bw_mib: int,
    kv: dict | None = None,
    ids=None,
    between=None,
) -> dict:
    """pp: one step of n_prompt tokens from an empty cache (logits for the last); tg: n_gen single-token
    steps from a one-token context, as llama-bench measures them; best of reps. kv: LLM's KV cache keyword
    arguments. between(rep): called after each of our repetitions (--compare runs llama.cpp's there, so the
    two alternate and share the machine's drifting load)."""
    import numpy as np
    from localllm.llm import LLM

    t0 = time.perf_counter()
    llm = LLM(path, n_threads=threads, ctx_size=max(n_prompt, n_gen + 1) + 16, **(kv or {}))
    load_s = time.perf_counter() - t0
    kv_name = kv_label(llm)
    if ids is None:
        ids = prompt_ids(llm.n_vocab, n_prompt)
    last = np.array([n_prompt - 1], dtype=np.int32)
    pp = tg = float("inf")
    for rep in range(reps):
        t0 = time.perf_counter()
        llm._step(ids, 0, last)
        pp = min(pp, time.perf_counter() - t0)
        tok = np.array([ids[0]], dtype=np.int64)
        zero = np.zeros(1, dtype=np.int32)
        t0 = time.perf_counter()
        for i in range(n_gen):
            logits = llm._step(tok, i, zero)
            tok[0] = int(np.argmax(logits[0]))
        tg = min(tg, time.perf_counter() - t0)
        if between:
            between(rep)
    # every weight streams once per token, except an embedding table that is only looked up
    f = llm._file
    streamed = sum(
        t.nbytes for name, t in f.tensors.items() if name != "token_embd.weight" or "output.weight" not in f.tensors
    )
    peak_rss = peak_rss_mb()
    llm.close()
    bw = read_bandwidth(mib=bw_mib)
    return {
        "model": path.name,
        "threads": threads,
        "kv": kv_name,
        "load_s": load_s,
        "pp_tps": n_prompt / pp,
        "tg_tps": n_gen / tg,
        "n_prompt": n_prompt,
        "n_gen": n_gen,
        "weights_streamed_mb": streamed / 1e6,
        "tg_gbs": streamed * n_gen / tg / 1e9,
        "read_bandwidth_gbs": bw,
        "peak_rss_mb": peak_rss,
    }


def _n_vocab(f) -> int:
    from localllm.models import spec_from_gguf

    return spec_from_gguf(f).n_vocab


def run(args: argparse.Namespace) -> int:
    from localllm import kernels

    if args.what != "kernels":
        if args.models:
            raise ValueError("bench MODEL takes one model; use `bench kernels MODEL...` for several")
        for name, v in (("--n-prompt", args.n_prompt), ("--n-gen", args.n_gen), ("--repetitions", args.repetitions)):
            if v < 1:
                raise ValueError(f"{name} must be positive")
        path = _resolve(args.what, args.pull)
        threads = (args.threads or [kernels.physical_cores()])[0]
        python = llama_python(args.llama_python) if args.compare else None
        from localllm.gguf import GGUFFile

        with GGUFFile(path) as f:
            n_vocab = _n_vocab(f)
        ids = prompt_ids(n_vocab, args.n_prompt)
        between, lr = (
            llama_cpp_rounds(python, path, threads, ids.tolist(), args.n_gen, kv_kwargs(args))
            if python
            else (None, None)
        )
        r = bench_llm(
            path,
            threads,
            args.n_prompt,
            args.n_gen,
            args.repetitions,
            args.bandwidth_mib,
            kv_kwargs(args),
            ids=ids,
            between=between,
        )
        if python:
            compare_first_token(path, threads, r, python, lr)
        if args.json:
            print(json.dumps({**r, "llama_cpp": lr} if lr else r, indent=1))
        elif lr:
            print(
                f"{r['model']}: {threads} threads, kernel path {kernels.current_path()}, kv {r['kv']}; "
                f"llama-cpp-python {lr['version']}, same run"
            )
            print(f"  {'':<22}{'localllm':>10}{'llama.cpp':>11}{'ratio':>8}")
            rows = [
                ("load s", "load_s"),
                (f"pp{r['n_prompt']} tok/s", "pp_tps"),
                (f"tg{r['n_gen']} tok/s", "tg_tps"),
                ("peak RSS MiB", "peak_rss_mb"),
                ("first token s", "first_token_s"),
            ]
            for label, key in rows:
                print(f"  {label:<22}{r[key]:>10.2f}{lr[key]:>11.2f}{r[key] / lr[key]:>7.2f}x")
        else:
            print(f"{r['model']}: {threads} threads, kernel path {kernels.current_path()}, kv {r['kv']}")
            print(f"  load         {r['load_s']:.2f} s (model map, tokenizer, KV cache)")
            print(f"  pp{r['n_prompt']:<10} {r['pp_tps']:.1f} tok/s")
            print(
                f"  tg{r['n_gen']:<10} {r['tg_tps']:.1f} tok/s  ({r['weights_streamed_mb']:.0f} MB of weights per token: "
                f"{r['tg_gbs']:.1f} GB/s of {r['read_bandwidth_gbs']:.1f} GB/s read bandwidth)"
            )
            print(f"  peak RSS     {r['peak_rss_mb']:.0f} MiB")
        return 0

    paths = [_resolve(m, args.pull) for m in (args.models or DEFAULT_MODELS)]
    threads = args.threads or sorted({1, kernels.physical_cores()})
    if any(t < 1 for t in threads):
        raise ValueError("--threads values must be positive")
    if any(n < 1 for n in args.n):
        raise ValueError("--n values must be positive")
    ns = sorted(set(args.n) | {1})
    out = sys.stderr if args.json else sys.stdout
    kernels.configure(threads=max(threads))
    if args.bandwidth_mib < 1 or args.stream_mib < 1:
        raise ValueError("--bandwidth-mib and --stream-mib must be positive")
    if args.tensors:
        check_tensor_names(paths, args.tensors)
    bw = read_bandwidth(mib=args.bandwidth_mib)
    peak = int8_peak()
    print(
        f"machine: {os.cpu_count()} logical CPUs, kernel path {kernels.current_path()}; "
        f"streaming read bandwidth {bw:.1f} GB/s with {max(threads)} threads (the decode roofline)"
        + (f"; int8 multiply-add peak {peak:.0f} GOP/s (the N = 512 roofline)" if peak else ""),
        file=out,
    )
    print(
        f"{'model':<36} {'type':<6} {'th':>2} {'N=1 GB/s (% roofline)':<22} "
        + " ".join(f"{'N=' + str(n):>7}" for n in ns if n > 1)
        + "  (GFLOP/s)  t(N=8)/t(N=1)",
        file=out,
    )
    results = []
    with open(os.devnull, "w") as quiet:
        for p in paths:
            for r in bench_model(p, threads, ns, args.seconds, quiet, args.stream_mib << 20, args.tensors):
                r["n1_pct"] = 100 * r["n1_gbs"] / bw
                print(_fmt_row(r, ns), file=out, flush=True)
                results.append(r)
    if args.json:
        print(
            json.dumps(
                {"read_bandwidth_gbs": bw, "int8_peak_gops": peak, "path": kernels.current_path(), "results": results},
                indent=1,
            )
        )
    return 0
