"""`python -m localllm.bench.host`: the host's cost per token with the step stubbed (whole rows and candidates, each
chain), the engine step by step and pipelined over a stand-in device, and the real step with and without
candidates, all producing figures."""

from __future__ import annotations

import time

import pytest
from conftest import model_file
from localllm.bench import host


@pytest.mark.model
def test_the_host_bench_measures_every_chain_both_ways(capsys):
    args = [str(model_file("smollm2-135m-instruct-q4_1")), "--tokens", "32", "--reps", "1", "--streams", "1,3"]
    args += ["--device-ms", "2"]
    assert host.main(args) == 0
    out = capsys.readouterr().out
    for chain in host.CHAINS:
        for mode in ("whole rows", "candidates"):
            assert f"{chain:<16} {mode:<11} " in out.split("the real step")[0]
    assert out.count("greedy") == 6
    steps = [line.split() for line in out.splitlines() if "streams" in line and "a step" in line]
    assert [int(w[0]) for w in steps] == [1, 3] and all(float(w[2]) > 0 for w in steps)
    # the n replies are admitted together: every step carries all n rows (a prompt step, then 31 decode steps)
    assert [line.split("(")[1] for line in out.splitlines() if "steps of" in line] == [
        "32 steps of 1 rows)",
        "32 steps of 3 rows)",
    ]
    # over the stand-in device a step takes its 2 ms at least, either way
    piped = [line.split() for line in out.splitlines() if "pipelined" in line and "streams" in line]
    assert [int(w[0]) for w in piped] == [1, 3]
    assert all(float(w[5].rstrip(",")) >= 2 and float(w[7]) >= 2 and w[-2] == "32" for w in piped), piped


def test_the_stand_in_device_runs_apart_from_the_host():
    """launch returns at once; a step's collect returns its result once its time after the steps before it is over
    (lower bounds only: a busy machine may be late, never early)."""
    device = host.StandInDevice(lambda batch, top_k, n_valid: batch, ms=40)
    t0 = time.perf_counter()
    device.launch("a")
    device.launch("b")
    launched = time.perf_counter() - t0
    assert device.collect() == "a"
    first = time.perf_counter() - t0
    assert device.collect() == "b"
    second = time.perf_counter() - t0
    assert device.forward("c") == "c"  # after the device was idle: its 40 ms from now
    assert launched < 0.03 and first >= 0.04 and second >= 0.08
    assert time.perf_counter() - t0 >= second + 0.04 and device.steps == 3


@pytest.mark.model
def test_replies_read_by_asyncio_coroutines_decode_together():
    """--readers asyncio: the replies read on one event loop, as serve reads them; every step carries all n rows,
    step by step and pipelined, and each step takes the stand-in device's time at least."""
    path = model_file("smollm2-135m-instruct-q4_1")
    assert host.streams(path, 24, 1, [3], "asyncio")[3][1] == 24
    piped = host.pipelined(path, 24, 1, [1, 3], 2.0, "asyncio")
    assert sorted(piped) == [(1, False), (1, True), (3, False), (3, True)]
    assert all(steps == 24 and ms >= 2.0 for ms, steps in piped.values()), piped
