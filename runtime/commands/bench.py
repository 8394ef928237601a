"""`localllm bench MODEL`: load time, prompt processing (pp512) and generation (tg128) speed, effective
weight bandwidth against the roofline, and peak RSS.

`localllm bench MODEL --compare`: the same measurements from llama.cpp (llama-cpp-python, run by the interpreter
of its own virtual environment: --llama-python, $LOCALLLM_LLAMA_PYTHON, or ~/.cache/localllm/llama-venv) on the
same model, threads, KV type and prompt tokens in the same run, repetitions alternating (ours, then one of
llama.cpp's in its own process, and again; best of each), plus the time from process start to the first token of
a short prompt for `localllm run` and for a llama-cpp-python script; printed as ratios.

`localllm bench spec MODEL [--draft-model MODEL] [--compare]` (or `bench MODEL --speculative`): tokens/s of chat
requests at temperature 0 (whole-file code edits, a reformat, prose) with drafting off, n-gram drafts and a draft
model, and with --compare llama-cpp-python plain and with prompt lookup on the same prompt ids, all alternated;
draft acceptance, mean accepted length, whether the replies are the same tokens, and the ratios
(localllm.bench.speculation).

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
from pathlib import Path

from localllm.commands.device import add_device_arguments, device_kwargs
from localllm.commands.kv import add_kv_arguments, kv_kwargs, kv_label

DEFAULT_MODELS = ["qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b"]
TEST_CACHE_NAMES = {
    "qwen2.5-coder:0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder:1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m",
}


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmarks: `bench MODEL` (pp512, tg128), `bench spec MODEL` (speculative decoding), "
        "`bench serve MODEL`, `bench embed MODEL`, `bench kernels` (matrix products)",
        description="Benchmarks. `bench MODEL`: load time, pp512, tg128, GB/s, peak RSS. "
        "`bench spec MODEL [--draft-model MODEL] [--compare]`: editor tasks at temperature 0 with drafting off, "
        "n-gram and a draft model (and llama.cpp plain and with prompt lookup), alternated. "
        "`bench serve MODEL`: a live server under an editor's workload. "
        "`bench embed MODEL [--compare]`: embeddings of 512-token chunks per second. "
        "`bench kernels [MODEL...]`: matrix products on real weights vs read bandwidth.",
    )
    p.add_argument(
        "what",
        help="`kernels`, `spec`, `serve` or `embed` (then one MODEL), or a model (store name or .gguf path) to benchmark end "
        "to end",
    )
    p.add_argument(
        "models", nargs="*", help=f"for `kernels`: store names or .gguf paths (default: {' '.join(DEFAULT_MODELS)})"
    )
    p.add_argument("-p", "--n-prompt", type=int, default=512, help="bench MODEL: prompt tokens (default 512)")
    p.add_argument(
        "-n",  # llama-bench's; spelt out so that argparse does not read it as an abbreviation of -ngl (--gpu-layers)
        "-g",
        "--n-gen",
        type=int,
        default=128,
        help="bench MODEL: generated tokens, as llama-bench's -n (default 128)",
    )
    p.add_argument(
        "-d",
        "--depth",
        type=int,
        default=0,
        help="bench MODEL: tokens already in the KV cache before pp and tg, as llama-bench's -d (default 0)",
    )
    p.add_argument(
        "-r", "--repetitions", "--reps", type=int, default=2, help="bench MODEL and spec: runs per test, best kept"
    )
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
    add_device_arguments(p)
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
        "--step-n",
        type=int,
        nargs="*",
        default=[1, 2, 4, 8, 16],
        metavar="N",
        help="bench kernels: also time one decode step of each model carrying N sequences (none: skip)",
    )
    p.add_argument(
        "--stream-mib",
        type=int,
        default=512,
        metavar="MIB",
        help="weights streamed per N = 1 measurement (copies of the matrices, default 512)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="bench MODEL: N clients at once through the engine, for each N: aggregate and per-stream decode "
        "tok/s, time to first token",
    )
    p.add_argument(
        "--multi-turn",
        action="store_true",
        help="bench MODEL: time to first token of a follow-up turn (1,500 tokens of history) with and without "
        "its cached prefix",
    )
    p.add_argument(
        "--clients",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="bench serve MODEL: concurrent HTTP clients per level (default 1 4 8); --compare adds "
        "llama-cpp-python's server",
    )
    p.add_argument("--speculative", action="store_true", help="bench MODEL --speculative: the same as bench spec MODEL")
    p.add_argument(
        "--draft-model",
        default=None,
        metavar="MODEL",
        help="bench spec: also decode with this draft model (store name or .gguf path) proposing the drafts",
    )
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=300.0,
        metavar="S",
        help="bench spec: before each run wait up to S seconds for other processes to use under 0.3 cores "
        "(default 300; 0: never wait)",
    )
    p.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        metavar="N",
        help="bench spec: cap every task's max_tokens at N (default: each task's own, 384 for edits, 128 for prose)",
    )
    p.add_argument("--level-seconds", type=float, default=30.0, help="bench serve: seconds per level (default 30)")
    p.set_defaults(func=run)


def _resolve(name: str, pull: bool) -> Path:
    """The store's (localllm.hub.resolve_model); the two default models also from the test-model cache
    (models/fetch_test_models.py), so a development checkout benchmarks without pulling them again."""
    from localllm.hub import resolve_model

    try:
        return resolve_model(name, pull=pull)
    except (LookupError, ValueError, OSError):
        cached = TEST_CACHE_NAMES.get(name)
        env = os.environ.get("LOCALLLM_TEST_MODELS")
        base = Path(env) if env else Path.home() / ".cache" / "localllm" / "test-models"
        if cached and (base / f"{cached}.gguf").is_file():
            return base / f"{cached}.gguf"
        raise


def _fmt_row(r: dict, ns: list[int]) -> str:
    cells = [f"{r['model'][:36]:<36}", f"{r['type']:<6}", f"{r['threads']:>2}"]
    if "n1_gbs" in r:
        cells.append(f"{r['n1_gbs']:6.1f} GB/s ({r.get('n1_pct', 0):3.0f}%)")
    for n in ns:
        if n > 1:
            cells.append(f"{r[f'n{n}_gflops']:7.1f}")
    for n in (4, 8):  # what batching and speculative verification pay for N rows against one (issue 18's targets)
        if f"n{n}_time_ratio" in r:
            cells.append(f"{r[f'n{n}_time_ratio']:13.2f}x")
    return " ".join(cells)


def run(args: argparse.Namespace) -> int:
    if args.what == "serve":
        return run_serve(args)
    if args.what == "embed":
        return run_embed(args)
    if args.what == "spec":
        if len(args.models) != 1:
            raise ValueError("bench spec takes one model: localllm bench spec MODEL [--draft-model MODEL] [--compare]")
        return run_speculation(args, _resolve(args.models[0], args.pull))
    return run_kernels(args) if args.what == "kernels" else run_model(args)


def run_embed(args: argparse.Namespace) -> int:
    """bench embed MODEL [--compare]: embeddings of 512-token chunks per second, llama.cpp's beside them."""
    from localllm import native
    from localllm.bench.compare import llama_python
    from localllm.bench.embed import bench_embed, chunks, llama_embed
    from localllm.llm import LLM

    if len(args.models) != 1:
        raise ValueError("bench embed takes one model: localllm bench embed MODEL [--compare]")
    path = _resolve(args.models[0], args.pull)
    threads = (args.threads or [native.physical_cores()])[0]
    python = llama_python(args.llama_python) if args.compare else None
    reps = args.repetitions or 3
    rows = {"localllm": [], "llama.cpp": [], "llama.cpp fa": []}
    with LLM(path, n_threads=threads, ctx_size=2048) as llm:
        texts = chunks(llm, 8, 512)
        llm.embed(texts[:1])  # warm-up, as the llama.cpp side does its own
        for _ in range(reps):  # alternated: one of ours, then llama.cpp's runs (flash attention off and on)
            rows["localllm"].append(bench_embed(llm, texts, 1))
            if python:
                rows["llama.cpp"].append(llama_embed(python, path, threads, texts, 1))
                rows["llama.cpp fa"].append(llama_embed(python, path, threads, texts, 1, flash_attn=True))
    best = {k: max(v, key=lambda r: r["tokens_per_s"]) for k, v in rows.items() if v}
    if args.json:
        print(json.dumps(best, indent=1))
        return 0
    print(
        f"{path.name}: {threads} threads, kernel path {native.current_path()}; 8 chunks of 512 tokens, best of {reps}"
    )
    for name, r in best.items():
        print(f"  {name:<12} {r['chunks_per_s']:7.2f} chunks/s {r['tokens_per_s']:9.1f} tok/s")
    if "llama.cpp" in best:  # against llama.cpp's faster setting
        theirs = max(best["llama.cpp"]["tokens_per_s"], best["llama.cpp fa"]["tokens_per_s"])
        print(f"  ratio      {best['localllm']['tokens_per_s'] / theirs:.2f}x (to llama.cpp's faster)")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    """bench serve MODEL [--clients N...] [--compare]: a live server under an editor's workload over HTTP."""
    from localllm import native
    from localllm.bench.compare import llama_python
    from localllm.bench.serve import drive, llama_cpp_server, local_server, stream_overhead, structured_tps, tools_ttft

    if len(args.models) != 1:
        raise ValueError("bench serve takes one model: localllm bench serve MODEL")
    clients = args.clients or [1, 4, 8]
    if min(clients) < 1 or args.level_seconds <= 0:
        raise ValueError("--clients and --level-seconds must be positive")
    path = _resolve(args.models[0], args.pull)
    threads = (args.threads or [native.physical_cores()])[0]
    seconds = args.level_seconds
    python = llama_python(args.llama_python) if args.compare else None
    sides = [("localllm", lambda: local_server(path, threads, 4096, parallel=max(clients)))]
    if python:
        sides.append(("llama-cpp-python", lambda: llama_cpp_server(python, path, threads, 4096)))
    results: dict = {name: {} for name, _ in sides}
    tools = structured = None
    for name, start in sides:
        with start() as url:
            model = path.name
            drive(url, model, 1, 2.0)  # warm-up: the weights paged in
            for n in clients:
                results[name][n] = drive(url, model, n, seconds)
            if name == "localllm":
                tools = tools_ttft(url, model)
                structured = structured_tps(url, model)
    overhead = stream_overhead(path, threads)
    if args.json:
        report = {
            "results": results,
            "stream_overhead_ms_per_token": overhead,
            "tools_ttft": tools,
            "structured_tps": structured,
        }
        print(json.dumps(report, indent=1))
        return 0
    print(
        f"{path.name}: {threads} threads, kernel path {native.current_path()}; {seconds:.0f} s per level, "
        "chat turns with history and FIM requests, 32 greedy tokens each, streamed"
    )
    print(f"  {'server':<18}{'clients':>8}{'requests':>9}{'TTFT p50 s':>11}{'p95 s':>8}{'tok/s':>8}")
    for name, levels in results.items():
        for n, r in levels.items():
            print(
                f"  {name:<18}{n:>8}{r['requests']:>9}{r['ttft_p50_s']:>11.2f}{r['ttft_p95_s']:>8.2f}"
                f"{r['aggregate_tps']:>8.1f}" + (f"  errors: {r['errors']}" if r["errors"] else "")
            )
    if python:
        for n in clients:
            a, b = results["localllm"][n], results["llama-cpp-python"][n]
            print(
                f"  {n} clients: tok/s {a['aggregate_tps'] / b['aggregate_tps']:.2f}x, "
                f"p95 TTFT {a['ttft_p95_s'] / b['ttft_p95_s']:.2f}x of llama-cpp-python's server"
            )
    print(f"  serve's own overhead per streamed token: {overhead:.3f} ms (HTTP stream vs in-process)")
    print(
        f"  first visible token of a code reply, one client: {tools['with_tools_s']:.3f} s with a tool offered, "
        f"{tools['without_s']:.3f} s without ({tools['with_tools_s'] / tools['without_s']:.2f}x)"
    )
    print(
        f"  decode under a JSON Schema, one client: {structured['structured_tps']:.1f} tok/s, "
        f"{structured['plain_tps']:.1f} unconstrained ({structured['structured_tps'] / structured['plain_tps']:.2f}x)"
    )
    return 0


def _where(r: dict, threads: int) -> str:
    """'2 threads, kernel path avx512', or the device ('cuda:0', 'cuda:0 0-15 + cpu 16-23') and the threads."""
    from localllm import native

    if r.get("device", "cpu") == "cpu":
        return f"{threads} threads, kernel path {native.current_path()}"
    return f"device {r['device']}, {threads} CPU threads"


def run_engine(args: argparse.Namespace, path: Path, threads: int) -> int:
    """bench MODEL --parallel N... / --multi-turn: the engine under concurrent clients and follow-up turns."""
    from localllm import native
    from localllm.bench.engine import multi_turn, parallel_levels

    head = f"{path.name}: {threads} threads, kernel path {native.current_path()}, kv {args.k_type or args.kv_type}/{args.v_type or args.kv_type}"
    result: dict = {}
    if args.parallel:
        if min(args.parallel) < 1:
            raise ValueError("--parallel values must be positive")
        levels = parallel_levels(
            path,
            threads,
            args.parallel,
            n_prompt=64,
            n_gen=args.n_gen,
            reps=args.repetitions,
            **kv_kwargs(args),
            **device_kwargs(args),
        )
        result["parallel"] = levels
        if not args.json:
            print(f"{head}; {args.n_gen} tokens per stream after a 64-token prompt, clients submitting at once")
            print(f"  {'streams':>7} {'aggregate tok/s':>16} {'per stream':>11} {'x one':>6} {'TTFT s':>7}")
            base = levels[min(levels)]["aggregate_tps"]
            for n, r in levels.items():
                print(
                    f"  {n:>7} {r['aggregate_tps']:>16.1f} {r['stream_tps']:>11.1f} "
                    f"{r['aggregate_tps'] / base:>5.2f}x {r['ttft_s']:>7.2f}"
                )
    if args.multi_turn:
        r = multi_turn(path, threads, reps=args.repetitions, **kv_kwargs(args), **device_kwargs(args))
        result["multi_turn"] = r
        if not args.json:
            print(f"{head}; a follow-up turn of {r['prompt_tokens']} prompt tokens")
            print(f"  cold prefill      time to first token {r['cold_ttft_s']:.3f} s")
            print(
                f"  cached prefix     time to first token {r['warm_ttft_s']:.3f} s "
                f"({r['cached_tokens']} tokens reused): {r['speedup']:.1f}x sooner"
            )
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


def run_speculation(args: argparse.Namespace, path: Path) -> int:
    """bench spec MODEL (or bench MODEL --speculative): editor tasks with drafting off, n-gram and a draft model,
    and with --compare llama.cpp plain and with prompt lookup, alternated."""
    from localllm import native
    from localllm.bench.compare import llama_python
    from localllm.bench.speculation import LOOKUP_SWEEP, ratios, speculation_tasks

    if args.parallel or args.multi_turn:
        raise ValueError("bench spec runs on its own: not with --parallel or --multi-turn")
    threads = (args.threads or [native.physical_cores()])[0]
    if threads < 1 or args.repetitions < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        raise ValueError("--threads, --reps and --max-tokens must be positive")
    kv = kv_kwargs(args)
    if args.compare and (kv["k_type"] not in (None, kv["kv_type"]) or kv["v_type"] not in (None, kv["kv_type"])):
        raise ValueError("--compare runs one KV type for K and V: use --kv-type only")
    if args.quiet_wait < 0:
        raise ValueError("--quiet-wait must be 0 or more seconds")
    draft = str(_resolve(args.draft_model, args.pull)) if args.draft_model else None
    python = llama_python(args.llama_python) if args.compare else None
    report = {
        "model": path.name,
        "draft_model": Path(draft).name if draft else None,
        "threads": threads,
        "path": native.current_path(),
        "reps": args.repetitions,
        "lookup_sweep": list(LOOKUP_SWEEP),
        "loadavg_before": os.getloadavg()[0],
    }
    rows = speculation_tasks(
        path,
        threads,
        reps=args.repetitions,
        draft=draft,
        llama=python,
        max_tokens=args.max_tokens,
        quiet=0.3 if args.quiet_wait > 0 else None,
        quiet_wait_s=args.quiet_wait,
        **kv,
    )
    for r in rows:
        r["ratios"] = ratios(r)
    report.update(loadavg_after=os.getloadavg()[0], rows=rows)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(spec_report(report))
    return 0


def spec_report(report: dict) -> str:
    """bench spec's tables from its JSON report."""
    rows, draft = report["rows"], report["draft_model"] is not None
    waited = sum(r.get("waited_s", 0) for r in rows)
    loaded = sum(r.get("loaded_runs", 0) for r in rows)
    lines = [
        f"{report['model']}: {report['threads']} threads, kernel path {report['path']}"
        + (f", draft model {report['draft_model']}" if draft else "")
        + f"; chat requests at temperature 0, best of {report['reps']} runs of each, alternated, each from an "
        "empty cache",
        f"load average {report['loadavg_before']:.2f} before, {report['loadavg_after']:.2f} after; {waited:.0f} s "
        f"spent waiting for other processes to go quiet before runs, {loaded} runs started with them busy",
        "tok/s end to end, prompt included (after the first token in brackets); acc: drafts kept / drafts verified;",
        "len: mean drafts kept per drafting step; same: every run of every mode replied with the same tokens",
        _spec_table(rows, draft),
    ]
    if "lookup" in rows[0]["modes"]:
        lines.append(
            f"llama.cpp: llama-cpp-python {rows[0].get('llama_version', '?')} on the same prompt token ids, greedy; "
            "lookup: LlamaPromptLookupDecoding, the best num_pred_tokens (k) of "
            + " ".join(map(str, report["lookup_sweep"]))
        )
        lines.append(_llama_table(rows, draft))
    return "\n".join(lines)


def _tps(m: dict) -> str:
    """'  42.1 ( 55.0)': end to end, then after the first token; 16 wide."""
    return f"{m['tps']:6.1f} ({m['decode_tps']:5.1f})  "


def _ratio(x: dict, key: str, width: int) -> str:
    return f"{x[key]:>{width - 1}.2f}x" if key in x else f"{'-':>{width}}"


def _spec_table(rows: list[dict], draft: bool) -> str:
    head = f"  {'task':<14}{'prompt':>7}{'tokens':>7}  {'off':<16}{'ngram':<16}{'acc':>4}{'len':>5}"
    if draft:
        head += f"  {'draft':<16}{'acc':>4}{'len':>5}"
    lines = [head + f"{'ngram/off':>11}" + (f"{'draft/off':>11}" if draft else "") + "  same"]
    for r in rows:
        m, x = r["modes"], r["ratios"]
        line = f"  {r['task']:<14}{r['prompt_tokens']:>7}{r['tokens']:>7}  {_tps(m['off'])}{_tps(m['ngram'])}"
        line += f"{100 * m['ngram']['acceptance']:>3.0f}%{m['ngram']['mean_accepted']:>5.1f}"
        if draft:
            line += f"  {_tps(m['draft'])}{100 * m['draft']['acceptance']:>3.0f}%{m['draft']['mean_accepted']:>5.1f}"
        line += _ratio(x, "ngram_vs_off", 11) + (_ratio(x, "draft_vs_off", 11) if draft else "")
        lines.append(line + ("  yes" if r["same"] else "  NO: replies differ"))
    return "\n".join(lines)


def _llama_table(rows: list[dict], draft: bool) -> str:
    head = f"  {'task':<14}  {'llama plain':<16}{'lookup':<16}{'k':>2}{'lookup/plain':>14}{'ngram/lookup':>14}"
    head += f"{'(decode)':>10}" + (f"{'draft/lookup':>14}{'(decode)':>10}" if draft else "")
    lines = [head + "  same"]
    for r in rows:
        m, x = r["modes"], r["ratios"]
        line = f"  {r['task']:<14}  {_tps(m['llama'])}{_tps(m['lookup'])}{m['lookup']['num_pred']:>2}"
        line += _ratio(x, "lookup_vs_llama", 14) + _ratio(x, "ngram_vs_lookup", 14)
        line += _ratio(x, "ngram_vs_lookup_decode", 10)
        if draft:
            line += _ratio(x, "draft_vs_lookup", 14) + _ratio(x, "draft_vs_lookup_decode", 10)
        same = "yes" if r["llama_same"] else "NO: plain and lookup differ"
        lines.append(line + f"  {same}" + ("" if r["llama_matches_ours"] else ", not ours (other kernels)"))
    return "\n".join(lines)


def run_model(args: argparse.Namespace) -> int:
    from localllm import native
    from localllm.bench.compare import compare_first_token, llama_cpp_rounds, llama_python
    from localllm.bench.model import bench_llm, model_prompt_ids

    if args.models:
        raise ValueError("bench MODEL takes one model; use `bench kernels MODEL...` for several")
    for name, v in (("--n-prompt", args.n_prompt), ("--n-gen", args.n_gen), ("--repetitions", args.repetitions)):
        if v < 1:
            raise ValueError(f"{name} must be positive")
    if args.depth < 0:
        raise ValueError("--depth must be 0 or more")
    if args.threads and len(args.threads) > 1:
        raise ValueError("bench MODEL runs one thread count (--threads N); `bench kernels` takes several")
    path = _resolve(args.what, args.pull)
    threads = (args.threads or [native.physical_cores()])[0]
    if args.speculative:
        return run_speculation(args, path)
    if args.parallel or args.multi_turn:
        if args.compare:
            raise ValueError("--compare measures pp and tg; run it apart from --parallel and --multi-turn")
        if args.depth:
            raise ValueError("--depth sets pp and tg's context; run it apart from --parallel and --multi-turn")
        return run_engine(args, path, threads)
    python = llama_python(args.llama_python) if args.compare else None
    ids = model_prompt_ids(path, args.n_prompt)
    depth_ids = model_prompt_ids(path, args.depth, seed=1).tolist() if args.depth else None
    between, lr = (None, None)
    if python:
        between, lr = llama_cpp_rounds(python, path, threads, ids.tolist(), args.n_gen, kv_kwargs(args), depth_ids)
    r = bench_llm(
        path,
        threads,
        args.n_prompt,
        args.n_gen,
        args.repetitions,
        args.bandwidth_mib,
        {**kv_kwargs(args), **device_kwargs(args)},
        ids=ids,
        depth_ids=depth_ids,
        between=between,
        kv_label=kv_label,
    )
    at = f" @ d{args.depth}" if args.depth else ""
    if python:
        compare_first_token(path, threads, r, python, lr)
    if args.json:
        print(json.dumps({**r, "llama_cpp": lr} if lr else r, indent=1))
    elif lr:
        print(f"{r['model']}: {_where(r, threads)}, kv {r['kv']}; llama-cpp-python {lr['version']}, same run")
        print(f"  {'':<22}{'localllm':>10}{'llama.cpp':>11}{'ratio':>8}")
        rows = [
            ("load s", "load_s"),
            (f"pp{r['n_prompt']}{at} tok/s", "pp_tps"),
            (f"tg{r['n_gen']}{at} tok/s", "tg_tps"),
            ("peak RSS MiB", "peak_rss_mb"),
            ("first token s", "first_token_s"),
        ]
        for label, key in rows:
            print(f"  {label:<22}{r[key]:>10.2f}{lr[key]:>11.2f}{r[key] / lr[key]:>7.2f}x")
        print(
            f"  localllm's tg{r['n_gen']} streams {r['weights_streamed_mb']:.0f} MB of weights a token: "
            f"{r['tg_gbs']:.1f} GB/s, {100 * r['tg_gbs'] / r['read_bandwidth_gbs']:.0f}% of the "
            f"{r['read_bandwidth_gbs']:.1f} GB/s read bandwidth"
        )
    else:
        print(f"{r['model']}: {_where(r, threads)}, kv {r['kv']}")
        print(f"  load         {r['load_s']:.2f} s (model map, tokenizer, KV cache)")
        pp, tg = f"pp{r['n_prompt']}{at}", f"tg{r['n_gen']}{at}"
        print(f"  {pp:<12} {r['pp_tps']:.1f} tok/s")
        print(
            f"  {tg:<12} {r['tg_tps']:.1f} tok/s  ({r['weights_streamed_mb']:.0f} MB of weights per token: "
            f"{r['tg_gbs']:.1f} GB/s of {r['read_bandwidth_gbs']:.1f} GB/s read bandwidth)"
        )
        print(f"  peak RSS     {r['peak_rss_mb']:.0f} MiB")
    return 0


def run_kernels(args: argparse.Namespace) -> int:
    from localllm import native
    from localllm.bench.machine import int8_peak, read_bandwidth
    from localllm.bench.matrices import bench_matrices, check_tensor_names
    from localllm.bench.step import step_times

    threads = args.threads or sorted({1, native.physical_cores()})
    if any(t < 1 for t in threads):
        raise ValueError("--threads values must be positive")
    if any(n < 1 for n in args.n):
        raise ValueError("--n values must be positive")
    if any(n < 1 for n in args.step_n):
        raise ValueError("--step-n values must be positive")
    if args.bandwidth_mib < 1 or args.stream_mib < 1:
        raise ValueError("--bandwidth-mib and --stream-mib must be positive")
    paths = [_resolve(m, args.pull) for m in (args.models or DEFAULT_MODELS)]
    ns = sorted(set(args.n) | {1})
    out = sys.stderr if args.json else sys.stdout
    if args.tensors:
        check_tensor_names(paths, args.tensors)
    native.configure(threads=max(threads))
    bw = read_bandwidth(mib=args.bandwidth_mib)
    peak = int8_peak()
    print(
        f"machine: {os.cpu_count()} logical CPUs, kernel path {native.current_path()}; "
        f"streaming read bandwidth {bw:.1f} GB/s with {max(threads)} threads (the decode roofline)"
        + (f"; int8 multiply-add peak {peak:.0f} GOP/s (the N = 512 roofline)" if peak else ""),
        file=out,
    )
    choices = {}
    th = max(threads)
    print(f"CPU path per model (model/cpu_path.py: one layer and the head on each path, {th} threads):", file=out)
    for p in paths:
        choices[p.name] = _path_choice(p, th, bw, out)
    print(
        f"{'model':<36} {'type':<6} {'th':>2} {'N=1 GB/s (% roofline)':<22} "
        + " ".join(f"{'N=' + str(n):>7}" for n in ns if n > 1)
        + "  (GFLOP/s)"
        + "".join(f"  t(N={n})/t(N=1)" for n in (4, 8) if n in ns),
        file=out,
    )

    def show(row: dict) -> None:
        row["n1_pct"] = 100 * row["n1_gbs"] / bw
        print(_fmt_row(row, ns), file=out, flush=True)

    results = []
    for p in paths:
        results += bench_matrices(p, threads, ns, args.seconds, show, args.stream_mib << 20, args.tensors)
    steps = {}
    if args.step_n:
        th = max(threads)
        print(f"decode step, N sequences of one token at context 64, {th} threads: ms per step (x N = 1)", file=out)
        for p in paths:
            if choices[p.name]["choice"] is None:  # matrices alone: no model to step
                print(f"  {p.name[:36]:<36} not a model: none", file=out, flush=True)
                continue
            ms = steps[p.name] = step_times(p, th, sorted(set(args.step_n)), seconds=args.seconds)
            cells = "  ".join(f"N={n} {t:.2f} ({t / ms[min(ms)]:.2f}x)" for n, t in ms.items()) or "an encoder: none"
            print(f"  {p.name[:36]:<36} {cells}", file=out, flush=True)
    if args.json:
        report = {"read_bandwidth_gbs": bw, "int8_peak_gops": peak, "path": native.current_path(), "choices": choices}
        report.update(results=results, step_ms={name: {str(n): t for n, t in ms.items()} for name, ms in steps.items()})
        print(json.dumps(report, indent=1))
    return 0


def _path_choice(path, threads: int, bw: float, out) -> dict:
    """Each SIMD path's estimated decode (GB/s of the weights a token reads, tok/s) and prompt speed on the model,
    and the path a model load chooses (cpu_path.pick; a forced path is said as such)."""
    from localllm import native
    from localllm.model import cpu_path
    from localllm.model.architectures import UnsupportedModelError, spec_from_gguf
    from localllm.model.gguf import GGUFFile

    with GGUFFile(path) as f:
        try:
            spec = spec_from_gguf(f)
        except UnsupportedModelError as e:  # matrices alone (models/synthetic_matrices.py): timed, no model to run
            print(f"  {path.name[:36]:<36} not a model this runtime runs ({e}): no path to choose", file=out)
            return {"choice": None, "forced": bool(native.forced_path()), "timings": {}}
        timings = cpu_path.measure(f, spec, threads)
    choice = native.forced_path() or cpu_path.pick(timings)
    for name, t in timings.items():
        mark = " <- chosen" if name == choice else ""
        print(
            f"  {path.name[:36]:<36} {name:<8} decode {t.decode_gbps:5.1f} GB/s ({100 * t.decode_gbps / bw:3.0f}% of "
            f"read bandwidth, ~{1 / t.decode_s:5.1f} tok/s)  prompt ~{1 / t.prompt_s:6.1f} tok/s{mark}",
            file=out,
        )
    if native.forced_path():
        print(f"  {path.name[:36]:<36} {choice} is forced (LOCALLLM_CPU or native.configure)", file=out)
    return {"choice": choice, "forced": bool(native.forced_path()), "timings": {n: vars(t) for n, t in timings.items()}}
