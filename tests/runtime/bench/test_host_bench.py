"""`python -m localllm.bench.host`: the host's cost per token with the step stubbed (whole rows and candidates, each
chain) and the real step with and without candidates, all producing figures."""

from __future__ import annotations

import pytest
from conftest import model_file
from localllm.bench import host


@pytest.mark.model
def test_the_host_bench_measures_every_chain_both_ways(capsys):
    assert host.main([str(model_file("smollm2-135m-instruct-q4_1")), "--tokens", "32", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    for chain in host.CHAINS:
        for mode in ("whole rows", "candidates"):
            assert f"{chain:<16} {mode:<11} " in out.split("the real step")[0]
    assert out.count("greedy") == 4


def test_the_host_bench_refuses_bad_counts(capsys):
    with pytest.raises(SystemExit):
        host.main(["m.gguf", "--tokens", "1"])
    assert "--tokens must be at least 2" in capsys.readouterr().err
