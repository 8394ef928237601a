"""`localllm chat`: argument parsing, the default model, and one clear line for a model that is not there."""

from __future__ import annotations

import argparse

import pytest
from localllm import cli
from localllm.commands import chat
from localllm.hub import catalog


@pytest.fixture
def with_chat(monkeypatch, tmp_path):
    """cli.COMMANDS with "chat" in it (as it is once registered there) and an empty store."""
    monkeypatch.setitem(cli.COMMANDS, "chat", ("localllm.commands.chat", "chat with a model in the terminal"))
    monkeypatch.setenv("LOCALLLM_HOME", str(tmp_path / "home"))


def parse(argv):
    p = argparse.ArgumentParser()
    chat.register(p.add_subparsers())
    return p.parse_args(["chat", *argv])


def test_arguments():
    a = parse([])
    assert a.model is None and a.threads is None and a.ctx_size == 4096 and a.temperature == 0.8 and a.system is None
    assert not a.no_save and parse(["--no-save"]).no_save
    a = parse(
        ["smollm2", "-t", "2", "-c", "512", "--temperature", "0", "--system", "Be brief.", "--top-p", "0.9", "-n", "64"]
    )
    assert (a.model, a.threads, a.ctx_size, a.temperature, a.system, a.top_p, a.max_tokens) == (
        "smollm2",
        2,
        512,
        0.0,
        "Be brief.",
        0.9,
        64,
    )
    from localllm.commands.kv import kv_kwargs

    kv = kv_kwargs(parse(["--kv-type", "q8_0", "--v-type", "q4_0", "--kv-budget", "64"]))
    assert (kv["kv_type"], kv["v_type"], kv["kv_budget_mib"]) == ("q8_0", "q4_0", 64)


def test_missing_model_is_one_line(with_chat, capsys):
    assert cli.main(["chat", "smollm2:135m"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "localllm pull smollm2:135m" in err and "Traceback" not in err


def test_default_model_is_the_catalogs(with_chat, capsys):
    assert cli.main(["chat"]) == 1
    err = capsys.readouterr().err
    default = catalog.load().default
    assert err.count("\n") == 1 and f"localllm pull {default}" in err


def test_unknown_model_and_bad_settings_are_one_line(with_chat, capsys):
    assert cli.main(["chat", "no-such-model-xyz"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
    assert cli.main(["chat", "smollm2", "--temperature", "-1"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "temperature" in err


def test_display_name(tmp_path):
    f = tmp_path / "my-model.Q4_0.gguf"
    f.write_bytes(b"")
    assert chat.display_name(str(f), f) == "my-model.Q4_0"
    assert chat.display_name("smollm2:135m", tmp_path / "x.gguf") == "smollm2:135m"


def test_missing_model_offers_to_pull_in_a_terminal(with_chat, capsys, monkeypatch):
    from localllm import hub

    monkeypatch.setattr(chat, "interactive", lambda: True)
    monkeypatch.setattr("builtins.input", lambda: "n")
    assert cli.main(["chat", "smollm2:135m"]) == 1  # declined: the same one line
    err = capsys.readouterr().err
    assert "Pull it now? [y/N]" in err and "localllm pull smollm2:135m" in err and "Traceback" not in err

    pulls = []
    real = hub.resolve_model

    def resolve(name, pull=False):
        if pull:
            pulls.append(name)
            raise ValueError("no network in this test")
        return real(name, pull)

    monkeypatch.setattr(hub, "resolve_model", resolve)
    monkeypatch.setattr("builtins.input", lambda: "y")
    assert cli.main(["chat", "smollm2:135m"]) == 1
    assert pulls == ["smollm2:135m"] and "no network in this test" in capsys.readouterr().err

    def eof():
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)  # Ctrl+D at the question: no
    assert cli.main(["chat", "smollm2:135m"]) == 1
    assert pulls == ["smollm2:135m"]
