"""`python -m localllm.bench.host`: the host's cost per token with the step stubbed (whole rows and candidates, each
chain) and the real step with and without candidates, all producing figures."""

from __future__ import annotations

import pytest
from conftest import model_file
from localllm.bench import host


@pytest.mark.model
def test_the_host_bench_measures_every_chain_both_ways(capsys):
    args = [str(model_file("smollm2-135m-instruct-q4_1")), "--tokens", "32", "--reps", "1", "--streams", "1,3"]
    assert host.main(args) == 0
    out = capsys.readouterr().out
    for chain in host.CHAINS:
        for mode in ("whole rows", "candidates"):
            assert f"{chain:<16} {mode:<11} " in out.split("the real step")[0]
    assert out.count("greedy") == 5
    steps = [line.split() for line in out.splitlines() if "streams" in line and "a step" in line]
    assert [int(w[0]) for w in steps] == [1, 3] and all(float(w[2]) > 0 for w in steps)
    # the n replies are admitted together: every step carries all n rows (a prompt step, then 31 decode steps)
    assert [line.split("(")[1] for line in out.splitlines() if "steps of" in line] == [
        "32 steps of 1 rows)",
        "32 steps of 3 rows)",
    ]


def test_the_host_bench_refuses_bad_counts(capsys):
    with pytest.raises(SystemExit):
        host.main(["m.gguf", "--tokens", "1"])
    assert "--tokens must be at least 2" in capsys.readouterr().err
    for bad in ("0", "4,x", ""):
        with pytest.raises(SystemExit):
            host.main(["m.gguf", "--streams", bad])
        assert "--streams must be positive counts" in capsys.readouterr().err
