"""The `localllm` command line as a user runs it: exit status, stdout, one clear line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import model_file
from localllm.model.gguf import GGUFFile


def localllm(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """env: the whole environment of the run (a minimal one), plus PYTHONPATH where this run has one (a package
    on PYTHONPATH rather than installed must still be found)."""
    if env is not None and "PYTHONPATH" in os.environ:
        env = {**env, "PYTHONPATH": os.environ["PYTHONPATH"]}
    return subprocess.run(
        [sys.executable, "-m", "localllm.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_help_lists_commands():
    r = localllm("--help")
    assert r.returncode == 0
    for cmd in ("show", "pull", "list", "rm", "bench"):
        assert cmd in r.stdout


def test_show_text_and_json_agree_with_the_file():
    path = model_file("qwen2.5-coder-0.5b-instruct-q4_k_m")
    r = localllm("show", str(path))
    assert r.returncode == 0, r.stderr
    assert "qwen2" in r.stdout and "14 / 2" in r.stdout and "Q5_0" in r.stdout and "chat template     yes" in r.stdout
    j = json.loads(localllm("show", str(path), "--json").stdout)
    with GGUFFile(path) as f:
        assert j["parameters"] == sum(t.n_elements for t in f.tensors.values())
        assert j["layers"] == f.arch_value("block_count") == 24
        assert j["vocab_size"] == len(f.metadata["tokenizer.ggml.tokens"])
        assert sum(q["bytes"] for q in j["quantization"].values()) == sum(t.nbytes for t in f.tensors.values())
    assert (j["heads"], j["kv_heads"], j["tokenizer"], j["chat_template"]) == (14, 2, "gpt2", True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["show", "/nonexistent/model.gguf"], "no such file"),
        (["show", "no-such-model-anywhere"], "no-such-model-anywhere"),
        (["bench", "kernels", "/nonexistent/model.gguf", "--n", "0"], "--n values"),
        (["bench", "/nonexistent/model.gguf", "--threads", "1", "2"], "one thread count"),
        (["bench", "kernels", "/nonexistent/model.gguf", "--step-n", "0"], "--step-n"),
        (["bench", "/nonexistent/model.gguf", "--depth", "-1"], "--depth"),
    ],
)
def test_errors_are_one_line_on_stderr(tmp_path, args, message):
    r = localllm(*args, env={"LOCALLLM_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


# the command line never shows a traceback: each of these is one `error:` line and exit status 1 (MODEL: the
# smallest test model's path, DIR: a directory)
EDGE_CASES = [
    (["run", "MODEL", "hi", "-c", "1099511627776"], "ctx_size 1099511627776 needs"),
    (["run", "MODEL", "hi", "-c", "1000000000"], "GiB of KV cache and this machine has"),
    (["run", "MODEL", "hi", "--kv-budget", "inf"], "kv_budget_mib must be a positive number"),
    (["run", "DIR", "hi"], "is a directory"),
    (["run", "/dev/zero", "hi"], "not a regular file"),
    (["run", "MODEL", "hi", "-t", "0"], "n_threads must be a positive integer"),
    (["chat", "MODEL"], "chat is a full-screen terminal app and needs a terminal"),
    (["perplexity", "MODEL", "/dev/zero", "--chunks", "0"], "/dev/zero is not a regular file"),
]


@pytest.mark.parametrize(("args", "message"), EDGE_CASES)
def test_edge_cases_are_one_error_line(tmp_path, args, message):
    model = str(model_file("smollm2-135m-instruct-q4_1"))
    args = [model if a == "MODEL" else str(tmp_path) if a == "DIR" else a for a in args]
    r = localllm(*args, env={"LOCALLLM_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_endless_stdin_is_refused_after_a_bounded_read():
    model = str(model_file("smollm2-135m-instruct-q4_1"))
    with open("/dev/zero", "rb") as zero:
        r = subprocess.run(
            [sys.executable, "-m", "localllm.cli", "run", model, "-c", "256"],
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=60,
        )
    # 256 tokens of at most 81 bytes each (smollm2's longest token): 20,736 bytes are read, and no more
    assert r.returncode == 1 and r.stderr.strip() == (
        "error: the prompt on stdin is longer than 20736 bytes, more than the context can hold: "
        "give a shorter prompt or raise --ctx-size"
    )


def test_options_may_come_before_the_prompt():
    model = str(model_file("smollm2-135m-instruct-q4_1"))
    r = localllm("run", model, "--temperature", "0", "-n", "3", "-c", "128", "--raw", "Hello")
    assert r.returncode == 0, r.stderr
    r2 = localllm("run", model, "Hello", "--temperature", "0", "-n", "3", "-c", "128", "--raw")
    assert r.stdout == r2.stdout and r.stdout.strip()


def test_show_corrupt_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    r = localllm("show", str(bad))
    assert r.returncode == 1 and "absurd" in r.stderr and "bad.gguf" in r.stderr


# bench kernels as briefly as it runs: one thread, tiny buffers, no time per measurement, JSON out
QUICK_KERNELS = ("--threads", "1", "--seconds", "0.01", "--bandwidth-mib", "64", "--stream-mib", "64", "--json")


def test_bench_kernels_json():
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm("bench", "kernels", str(path), *QUICK_KERNELS, "--n", "1", "2", "--step-n", "1", "3")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    # one decode step of the whole model carrying 1 and 3 sequences (timings only: no bound on a shared machine)
    step = j["step_ms"][path.name]
    assert set(step) == {"1", "3"} and all(ms > 0 for ms in step.values())
    assert j["read_bandwidth_gbs"] > 0
    # the compute roofline: measured on every SIMD path, absent on the scalar one
    assert (j["int8_peak_gops"] is None) == (j["path"] == "scalar")
    assert j["int8_peak_gops"] is None or j["int8_peak_gops"] > 0
    types = {row["type"] for row in j["results"]}
    assert types == {"Q4_1", "Q8_0"}  # smollm2's matrices; token_embd (Q8_0) is tied to the output
    for row in j["results"]:
        assert row["n1_gbs"] > 0 and row["n2_gflops"] > 0
    # the CPU path a load of this model takes here, and each SIMD path's timing (model/cpu_path.py)
    choice = j["choices"][path.name]
    assert choice["choice"] in choice["timings"] and not choice["forced"]
    assert all(t["decode_s"] > 0 and t["prompt_s"] > 0 for t in choice["timings"].values())


def test_bench_kernels_times_float_matrices_and_skips_an_encoders_decode_step():
    """F16 matrices (an encoder's, an F16 model's) are timed like quantized ones; an encoder has no decode step."""
    path = model_file("all-minilm-l6-v2-f16")
    r = localllm(
        "bench",
        "kernels",
        str(path),
        "--tensors",
        "blk.0.ffn_up.weight",
        *QUICK_KERNELS,
        "--n",
        "1",
        "2",
        "--step-n",
        "1",
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert [row["type"] for row in j["results"]] == ["F16"]
    assert j["results"][0]["n1_gbs"] > 0 and j["results"][0]["n2_gflops"] > 0
    assert j["step_ms"][path.name] == {}
    assert "an encoder: none" in r.stderr


def test_bench_depth_puts_pp_and_tg_after_that_many_tokens():
    """-d as llama-bench's: pp and tg after 600 tokens (more than one prefill step) in a context sized for all three,
    the depth in the JSON; refused beside --parallel, whose prompts are its own."""
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm("bench", str(path), "-d", "600", "-p", "8", "-g", "4", "-r", "1", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (j["depth"], j["n_prompt"], j["n_gen"]) == (600, 8, 4) and j["pp_tps"] > 0 and j["tg_tps"] > 0
    r = localllm("bench", str(path), "-d", "8", "--parallel", "1")
    assert r.returncode == 1 and "--depth" in r.stderr


def test_bench_reads_n_as_llama_benchs_n_gen_not_as_gpu_layers():
    """-n is llama-bench's generated tokens; argparse had taken it for an abbreviation of -ngl (--gpu-layers)."""
    import argparse

    from localllm.commands import bench

    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "m.gguf", "-n", "4"])
    assert (args.n_gen, args.gpu_layers) == (4, None)
    args = parser.parse_args(["bench", "m.gguf", "-ngl", "3", "-g", "5"])
    assert (args.n_gen, args.gpu_layers) == (5, 3)


@pytest.mark.parametrize("command", ["serve", "perplexity"])
def test_a_prefix_of_ngl_is_not_read_as_ngl(command, monkeypatch):
    """`-n 512` (llama-server's token limit) in a command without a -n of its own is refused, not read as
    `-ngl 512`: argparse matches single-dash prefixes whatever allow_abbrev says; cli.Parser matches -ngl whole."""
    from localllm import cli

    positionals = ["m.gguf"] if command == "serve" else ["m.gguf", "text.txt"]
    monkeypatch.setattr(sys, "argv", ["localllm", command, *positionals, "-n", "512"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args()
    monkeypatch.setattr(sys, "argv", ["localllm", command, *positionals, "-ngl", "3"])
    assert cli.build_parser().parse_args().gpu_layers == 3
    monkeypatch.setattr(sys, "argv", ["localllm", command, *positionals, "--gpu", "4"])  # long prefixes still match
    assert cli.build_parser().parse_args().gpu_layers == 4


def test_bench_parallel_and_multi_turn_json():
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm(
        "bench", str(path), "--threads", "1", "--parallel", "1", "3", "--multi-turn", "-g", "4", "-r", "1", "--json"
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert set(j["parallel"]) == {"1", "3"}
    for level in j["parallel"].values():  # timings only: no bound on a shared machine
        assert level["aggregate_tps"] > 0 and level["stream_tps"] > 0 and level["ttft_s"] > 0
    turn = j["multi_turn"]
    # the follow-up reuses every whole block of the first turn's history and reply (1500 + 16 tokens, KV for 1515)
    assert turn["cached_tokens"] == 1515 // 16 * 16
    assert turn["warm_ttft_s"] > 0 and turn["cold_ttft_s"] > 0


def test_bench_kernels_named_tensors():
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm("bench", "kernels", str(path), "--tensors", "blk.0.ffn_down.weight", *QUICK_KERNELS, "--n", "1")
    assert r.returncode == 0, r.stderr
    assert [row["type"] for row in json.loads(r.stdout)["results"]] == ["Q4_1"]
    r = localllm(
        "bench", "kernels", str(path), "--tensors", "no.such.weight", "--seconds", "0.01", "--bandwidth-mib", "64"
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().startswith("error: ") and "no.such.weight" in r.stderr
    # a misspelt name beside a good one is named too, not dropped; a 1-D tensor is not a matrix to time
    for names in (["blk.0.ffn_down.weight", "blk.0.ffn_dwon.weight"], ["blk.0.attn_norm.weight"]):
        r = localllm("bench", "kernels", str(path), "--tensors", *names, "--seconds", "0.01", "--bandwidth-mib", "64")
        assert r.returncode == 1 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and names[-1] in lines[0]
        assert "blk.0.ffn_down.weight" not in lines[0]


def test_bench_kernels_times_a_file_of_matrices_alone(tmp_path):
    """models/synthetic_matrices.py's files (matrices without a model's metadata, for machines the models cannot
    reach) are timed as any model's matrices: no CPU path to choose and no decode step, said in a line each."""
    import importlib.util
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "models" / "synthetic_matrices.py"
    spec = importlib.util.spec_from_file_location("synthetic_matrices", script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    path = tmp_path / "syn-1.5b.gguf"
    mod.write(path, mod.SHAPES[path.name], np.random.default_rng(0))
    args = ("bench", "kernels", str(path), "--seconds", "0.01", "--bandwidth-mib", "64", "--stream-mib", "64")
    r = localllm(*args, "--threads", "1", "--n", "1", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["choices"][path.name]["choice"] is None and j["step_ms"] == {}
    assert sorted(row["type"] for row in j["results"]) == ["Q4_K", "Q6_K"]
    assert all(row["n1_gbs"] > 0 for row in j["results"])
    r = localllm(*args, "--threads", "1", "--n", "1")
    assert r.returncode == 0, r.stderr
    assert "no path to choose" in r.stdout and "not a model: none" in r.stdout


def test_bench_compare_without_llama_cpp_says_how_to_get_it(tmp_path):
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm("bench", str(path), "--compare", "--llama-python", str(tmp_path / "no-python"), "-p", "8", "-g", "2")
    assert r.returncode == 1 and r.stdout == ""
    line = r.stderr.strip()
    assert line.startswith("error: --compare needs llama-cpp-python") and "pip install llama-cpp-python" in line


def test_bench_compare_runs_both_in_one_run():
    """Side by side with llama.cpp where llama-cpp-python's own environment exists (README: Performance); two
    repetitions, alternating, so the best-of merge of llama.cpp's runs is exercised."""
    from pathlib import Path

    llama = Path.home() / ".cache" / "localllm" / "llama-venv" / "bin" / "python"
    if not llama.exists():
        pytest.skip(f"no llama-cpp-python environment at {llama}")
    path = model_file("smollm2-135m-instruct-q4_1")
    r = localllm(
        "bench",
        str(path),
        "--compare",
        "--llama-python",
        str(llama),
        "-p",
        "32",
        "-g",
        "4",
        "-r",
        "2",
        "--threads",
        "1",
        "--bandwidth-mib",
        "64",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    for side in (j, j["llama_cpp"]):
        assert side["pp_tps"] > 0 and side["tg_tps"] > 0 and side["peak_rss_mb"] > 50 and 0 < side["first_token_s"] < 60


def test_show_says_whether_the_architecture_runs_here(tmp_path):
    import gguf

    path = tmp_path / "unknown.gguf"
    w = gguf.GGUFWriter(str(path), "phi42")
    w.add_uint32("phi42.block_count", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = localllm("show", str(path))
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("runs here"))
    assert "no: unsupported architecture 'phi42'" in line and "qwen3" in line and "gemma2" in line
    j = json.loads(localllm("show", str(path), "--json").stdout)
    assert j["supported"] is False and "smollm3" in j["architectures_supported"]
    r = localllm("run", str(path), "hi")
    assert r.returncode == 1 and r.stderr.startswith("error:")
