"""The model store: layout, atomic commits, locks, name resolution, `localllm list` and `localllm rm`."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from hf_server import HubServer, make_gguf
from localllm import cli
from localllm.hub.describe import describe
from localllm.hub.names import stem
from localllm.hub.resolve import resolve_model
from localllm.hub.store import (
    DamagedModelError,
    ModelBusyError,
    ModelNotFoundError,
    ModelNotPulledError,
    Store,
    StoreError,
    default_home,
    key,
    safe_file_name,
)

DATA = make_gguf()
SHA = hashlib.sha256(DATA).hexdigest()


def _catalog(path: Path, repo: str = "test/tiny-GGUF") -> Path:
    path.write_text(
        json.dumps(
            {
                "default": "tiny:1m",
                "models": {
                    "tiny:1m": {
                        "description": "a generated test model",
                        "file": "tiny-1m-q4_k_m.gguf",
                        "size": len(DATA),
                        "sha256": SHA,
                        "aliases": ["tiny", "tiny-1m-q4_k_m"],
                        "sources": [{"type": "hf", "repo": repo, "file": "tiny-1m-q4_k_m.gguf", "revision": "main"}],
                    }
                },
            }
        )
    )
    return path


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("LOCALLLM_HOME", str(h))
    monkeypatch.setenv("LOCALLLM_CATALOG", str(_catalog(tmp_path / "catalog.json")))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("sys.argv", list(sys.argv))  # cli.main rewrites it
    return h


def put(store: Store, name: str, data: bytes = DATA, file: str = "m.gguf", source: str = "test"):
    """Commits `data` as model `name` the way a pull does."""
    staged = store.tmp(name) / (file + ".partial")
    staged.write_bytes(data)
    info = describe([staged])
    info.update(sha256=[hashlib.sha256(data).hexdigest()], source=source)
    with store.lock(name):
        return store.commit(name, [staged], [file], info)


# -- layout --------------------------------------------------------------------------------------------
def test_default_home(monkeypatch, tmp_path):
    monkeypatch.setenv("LOCALLLM_HOME", str(tmp_path / "x"))
    assert default_home() == tmp_path / "x"
    monkeypatch.delenv("LOCALLLM_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_home() == tmp_path / "data" / "localllm"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_home() == tmp_path / ".local" / "share" / "localllm"


def test_keys_are_file_safe_and_never_collide():
    names = ["hf.co/u/r:Q4_K_M", "hf.co-u-r-Q4_K_M", "qwen2.5-coder:0.5b", "../../etc", "a b", "a:b", "a/b"]
    keys = [key(n) for n in names]
    assert len(set(keys)) == len(keys)
    for k in keys:
        assert "/" not in k and ":" not in k and not k.startswith(".")
    assert key("qwen2.5-coder:0.5b").startswith("qwen2.5-coder-0.5b-")


# -- commit, read, find ----------------------------------------------------------------------------------
def test_commit_records_the_model_and_cleans_tmp(home):
    store = Store()
    assert store.models() == []
    m = put(store, "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    assert m.path.read_bytes() == DATA and m.path.parent.parent == home / "models"
    assert (m.size, m.sha256, m.architecture, m.quant, m.context_length) == (len(DATA), (SHA,), "llama", "Q4_K_M", 2048)
    assert m.parameters == 40_000 // 64 * 64 + 64
    assert store.models() == [m] and store.get("tiny:1m") == m
    assert not (home / "tmp" / key("tiny:1m")).exists()
    manifest = json.loads((m.dir / "manifest.json").read_text())
    assert manifest["name"] == "tiny:1m" and manifest["files"] == ["tiny-1m-q4_k_m.gguf"]


def test_commit_replaces_a_stored_model(home):
    store = Store()
    put(store, "x", make_gguf(seed=1))
    m = put(store, "x", DATA)
    assert m.path.read_bytes() == DATA and len(store.models()) == 1
    assert not (home / "tmp" / key("x")).exists()


def test_replacing_a_model_is_one_atomic_swap(home, monkeypatch):
    """Where renameat2(RENAME_EXCHANGE) exists, the old directory is never moved out first: a crash at any
    point leaves a whole model in place."""
    import localllm.hub.store as store_mod

    store = Store()
    first = put(store, "x", make_gguf(seed=1))
    swapped = []
    real = store_mod._exchange

    def spy(a, b):
        ok = real(a, b)
        swapped.append(ok)
        assert not ok or (b / "manifest.json").exists()  # the new model is in place at once
        return ok

    moved = []
    real_replace = os.replace

    def no_move_of_the_model(src, dst):
        moved.append(Path(src))
        return real_replace(src, dst)

    monkeypatch.setattr(store_mod, "_exchange", spy)
    monkeypatch.setattr(store_mod.os, "replace", no_move_of_the_model)
    m = put(store, "x", DATA)
    assert m.path.read_bytes() == DATA and swapped
    if not swapped[0]:
        pytest.skip("no renameat2 RENAME_EXCHANGE on this system or file system (two renames used)")
    assert first.dir not in moved  # never renamed away before the new one was in place


@pytest.mark.parametrize(
    "bad", ["../evil.gguf", "a/b.gguf", "manifest.json", "", ".", "..", "a\\b.gguf", "x\0.gguf", "x" * 300 + ".gguf"]
)
def test_commit_refuses_file_names_that_leave_the_model_directory(home, bad):
    store = Store()
    staged = store.tmp("x") / "m.partial"
    staged.write_bytes(DATA)
    with pytest.raises(StoreError, match="cannot be the name of a stored file: pass --name NAME"):
        store.commit("x", [staged], [bad], {"sha256": [SHA]})
    assert staged.read_bytes() == DATA and store.models() == []
    assert [p.name for p in (home / "tmp").rglob("*")] == [key("x"), "m.partial"]


def test_file_names_and_stems():
    assert [safe_file_name(n) for n in ("m.gguf", "m x.gguf", "..m.gguf", "manifest.json.gguf")] == [
        "m.gguf",
        "m x.gguf",
        "..m.gguf",
        "manifest.json.gguf",
    ]
    assert [stem(f) for f in ("m.gguf", "M-Q8_0.GGUF", "m-Q8_0-00001-of-00002.gguf", "m.bin")] == [
        "m",
        "M-Q8_0",
        "m-Q8_0",
        "m.bin",
    ]


def test_find_by_every_spelling(home):
    store = Store()
    put(store, "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    put(store, "hf.co/u/Repo-GGUF:Q8_0", file="Repo-Q8_0.gguf", source="hf.co/u/Repo-GGUF/Repo-Q8_0.gguf@main")
    put(store, "fromurl", file="fromurl.gguf", source="http://host/fromurl.gguf")
    for s in ("tiny:1m", "tiny", "tiny:latest", "TINY:1M", "tiny-1m-q4_k_m"):
        assert store.find(s).name == "tiny:1m", s
    for s in ("u/Repo-GGUF:q8_0", "hf.co/u/Repo-GGUF:Q8_0", "huggingface.co/u/Repo-GGUF:Q8_0", "Repo-Q8_0"):
        assert store.find(s).name == "hf.co/u/Repo-GGUF:Q8_0", s
    assert store.find("http://host/fromurl.gguf").name == "fromurl"
    assert store.find("u/Repo-GGUF") is None  # Q4_K_M by default: another model
    assert store.find("nothing") is None


def test_models_skips_directories_without_a_manifest(home):
    store = Store()
    put(store, "ok")
    (home / "models" / "junk").mkdir()
    (home / "models" / "bad").mkdir()
    (home / "models" / "bad" / "manifest.json").write_text("{")
    assert [m.name for m in store.models()] == ["ok"]
    assert store.get("junk") is None


# -- resolve_model -------------------------------------------------------------------------------------
def test_resolve_returns_existing_paths_as_is(home, tmp_path):
    f = tmp_path / "local.gguf"
    f.write_bytes(DATA)
    assert resolve_model(str(f)) == f
    with pytest.raises(ModelNotFoundError, match="no such file: ./missing.gguf"):
        resolve_model("./missing.gguf")
    with pytest.raises(ModelNotFoundError, match="no such file: missing.gguf"):
        resolve_model("missing.gguf")


def test_resolve_stored_names(home):
    m = put(Store(), "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    assert resolve_model("tiny:1m") == m.path
    assert resolve_model("tiny") == m.path
    assert resolve_model("tiny-1m-q4_k_m") == m.path


def test_resolve_catalog_name_not_pulled_says_how(home):
    with pytest.raises(ModelNotPulledError, match=r"not in the store yet: run `localllm pull tiny`"):
        resolve_model("tiny")
    with pytest.raises(ModelNotPulledError, match=r"localllm pull u/r:Q8_0"):
        resolve_model("u/r:Q8_0")
    with pytest.raises(ValueError):  # the CLI prints ValueErrors as one line
        resolve_model("tiny")


def test_resolve_unknown_name_suggests_close_names(home):
    put(Store(), "my-model")
    with pytest.raises(ModelNotFoundError, match=r"unknown model 'tinny': .*did you mean tiny:1m") as e:
        resolve_model("tinny")
    assert isinstance(e.value, LookupError) and isinstance(e.value, ValueError)
    with pytest.raises(ModelNotFoundError, match="did you mean my-model"):
        resolve_model("my-modle")
    with pytest.raises(ModelNotFoundError, match=r"unknown model 'zzzz': not in the store or the catalog \(`localllm"):
        resolve_model("zzzz")


def test_resolve_damaged_model(home):
    m = put(Store(), "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    with open(m.path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(DamagedModelError, match=r"damaged \(tiny-1m-q4_k_m.gguf has 100 bytes, expected .*--force"):
        resolve_model("tiny")
    m.path.unlink()
    with pytest.raises(DamagedModelError, match="is missing"):
        resolve_model("tiny")


def test_resolve_pulls_when_asked_and_then_works_offline(home, monkeypatch):
    with HubServer() as hf:
        hf.add("test/tiny-GGUF", "tiny-1m-q4_k_m.gguf", DATA)
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        p = resolve_model("tiny", pull=True)
        assert p.read_bytes() == DATA
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: no network
    assert resolve_model("tiny") == p
    assert resolve_model("tiny", pull=True) == p


# -- locks and rm ----------------------------------------------------------------------------------------
def test_lock_refuses_or_waits(home):
    store = Store()
    seen = []
    with store.lock("a"):
        busy = rf"a is in use by another localllm process \(pid {os.getpid()}\)"
        with pytest.raises(ModelBusyError, match=busy), store.lock("a", wait=False):
            pass
        with store.lock("b", wait=False):  # other models are not blocked
            pass

        def waiter():
            with store.lock("a", on_wait=seen.append):
                seen.append("got")

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.2)
        assert seen == [str(os.getpid())]
    t.join(5)
    assert seen == [str(os.getpid()), "got"]


def test_remove(home):
    store = Store()
    m = put(store, "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    (store.tmp("tiny:1m") / "leftover.partial").write_bytes(b"x")
    assert store.remove("tiny").name == "tiny:1m"
    assert store.models() == [] and not m.dir.exists()
    assert not (home / "tmp" / key("tiny:1m")).exists()
    assert list((home / "tmp").iterdir()) == []


def test_remove_unknown_or_busy(home):
    store = Store()
    put(store, "my-model")
    with pytest.raises(ModelNotFoundError, match="not in the store; did you mean my-model"):
        store.remove("my-modle")
    with store.lock("my-model"), pytest.raises(ModelBusyError):
        store.remove("my-model")
    assert store.find("my-model") is not None


# -- the list and rm commands -----------------------------------------------------------------------------
def test_list_command(home, capsys):
    assert cli.main(["list"]) == 0
    assert "no models in" in capsys.readouterr().out
    put(Store(), "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "QUANT", "ARCH", "PARAMS", "PULLED"]
    assert out[1].split()[:7] == ["tiny:1m", "160.5", "kB", "Q4_K_M", "llama", "40K", "just"]
    assert cli.main(["list", "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["name"] == "tiny:1m" and item["size"] == len(DATA) and item["damaged"] is None


def test_list_catalog_command(home, capsys):
    assert cli.main(["list", "--catalog"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "SIZE", "STORED", "DESCRIPTION"]
    assert out[1].split()[:4] == ["tiny:1m", "160.5", "kB", "-"]
    put(Store(), "tiny:1m")
    assert cli.main(["list", "--catalog", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["stored"] is True


def test_list_flags_damaged_models(home, capsys):
    m = put(Store(), "x")
    m.path.unlink()
    cli.main(["list"])
    assert "x (damaged)" in capsys.readouterr().out


def test_rm_command(home, capsys):
    put(Store(), "a")
    put(Store(), "b")
    assert cli.main(["rm", "a", "nope", "b"]) == 1
    cap = capsys.readouterr()
    assert cap.out.splitlines() == ["deleted a (160.5 kB)", "deleted b (160.5 kB)"]
    assert cap.err.startswith("error: unknown model 'nope'")
    assert Store().models() == []
