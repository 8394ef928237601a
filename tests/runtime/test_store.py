"""The model store: layout, atomic commits, locks, name resolution, `localllm list` and `localllm rm`."""

from __future__ import annotations

import hashlib
import json
import os
import re
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


def test_models_are_the_sound_manifests_and_scan_has_the_rest(home):
    store = Store()
    put(store, "ok")
    (home / "models" / "junk").mkdir()
    (home / "models" / "bad").mkdir()
    (home / "models" / "bad" / "manifest.json").write_text("{")
    (home / "models" / "notes.txt").write_text("not a model")  # only directories (and key-named files) are entries
    assert [m.name for m in store.models()] == ["ok"]
    assert store.get("junk") is None
    models, damaged = store.scan()
    assert [m.name for m in models] == ["ok"]
    assert [(d.name, d.problem) for d in damaged] == [
        (
            "bad",
            "manifest.json is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2",
        ),
        ("junk", "manifest.json is missing"),
    ]


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
    with pytest.raises(
        DamagedModelError,
        match=rf"^stored model tiny:1m is damaged \(tiny-1m-q4_k_m.gguf has 100 bytes, expected {len(DATA)}\): "
        r"run `localllm pull tiny:1m` to repair it or `localllm rm tiny:1m` to remove it$",
    ):
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


# -- damage: nothing lost from sight, nothing opened outside the store -----------------------------------
def _edit(**fields):
    """A damage that sets manifest fields."""

    def damage(d: Path) -> None:
        p = d / "manifest.json"
        p.write_text(json.dumps({**json.loads(p.read_text()), **fields}))

    return damage


def _write(text: str):
    def damage(d: Path) -> None:
        (d / "manifest.json").write_text(text)

    return damage


def _truncate(d: Path) -> None:
    p = d / "manifest.json"
    p.write_bytes(p.read_bytes()[:40])


def _directory(d: Path) -> None:
    (d / "manifest.json").unlink()
    (d / "manifest.json").mkdir()


def _fifo(d: Path) -> None:
    (d / "manifest.json").unlink()
    os.mkfifo(d / "manifest.json")  # reading it would block forever


def _pulled_at(text: str):
    def damage(d: Path) -> None:
        p = d / "manifest.json"
        p.write_text(re.sub(r'"pulled_at": [^,]*', f'"pulled_at": {text}', p.read_text()))

    return damage


DAMAGED_MANIFESTS = {
    "truncated": (_truncate, "manifest.json is not valid JSON: "),
    "not JSON": (_write("{'name': 'tiny:1m'}"), "manifest.json is not valid JSON: "),
    "empty": (_write(""), "manifest.json is empty"),
    "an array": (_write("[]"), "manifest.json holds an array, not an object"),
    "a string": (_write('"tiny:1m"'), "manifest.json holds a string, not an object"),
    "deep nesting": (_write("[" * 100_000), "manifest.json is not valid JSON"),
    "too long": (_write(" " * (1 << 20) + "{}"), "manifest.json is longer than 1048576 bytes"),
    "a directory": (_directory, "manifest.json is a directory"),
    "a FIFO": (_fifo, "manifest.json is not a regular file"),
    "missing": (lambda d: (d / "manifest.json").unlink(), "manifest.json is missing"),
    "no files": (_edit(files=[], sizes=[], sha256=[]), "manifest.json: 'files' must be a list of file names, not []"),
    "string files": (_edit(files="tiny-1m-q4_k_m.gguf"), "'files' must be a list of file names"),
    "string sizes": (_edit(sizes="160512"), "'sizes' must be one size in bytes per file, not \"160512\""),
    "float sizes": (_edit(sizes=[160512.0]), "'sizes' must be one size in bytes per file"),
    "huge size": (_edit(sizes=[10**400]), "'sizes' must be one size in bytes per file"),
    "sizes too short": (_edit(sizes=[]), "'sizes' must be one size in bytes per file, not []"),
    "bad sha256": (_edit(sha256=["abc"]), "'sha256' must be one sha256 per file"),
    "string parameters": (_edit(parameters="40K"), "'parameters' must be a count, not \"40K\""),
    "negative context": (_edit(context_length=-1), "'context_length' must be a count, not -1"),
    "string pulled_at": (_edit(pulled_at="yesterday"), "'pulled_at' must be a time (seconds since 1970), not"),
    "pulled_at 1e300": (_pulled_at("1e300"), "'pulled_at' must be a time (seconds since 1970), not 1e+300"),
    "pulled_at NaN": (_pulled_at("NaN"), "'pulled_at' must be a time (seconds since 1970), not NaN"),
    "pulled_at huge int": (_pulled_at("9" * 400), "'pulled_at' must be a time (seconds since 1970)"),
    "pulled_at true": (_edit(pulled_at=True), "'pulled_at' must be a time (seconds since 1970), not true"),
    "no name": (_edit(name=None), "'name' must be a printable name, not null"),
    "another model's name": (_edit(name="other"), "manifest.json names another model ('other')"),
    "absolute path": (_edit(files=["/tmp/other.gguf"]), 'manifest.json names "/tmp/other.gguf", which is not a file'),
    "parent path": (
        _edit(files=["../../../../../etc/passwd"]),
        'manifest.json names "../../../../../etc/passwd", which is not a file in the model\'s directory',
    ),
    "the manifest as a file": (_edit(files=["manifest.json"]), 'manifest.json names "manifest.json", which is not'),
    "bad identity": (_edit(identity=[[1]]), "'identity' must be one [inode, mtime_ns] per file"),
}
REPAIR = "run `localllm pull tiny:1m` to repair it or `localllm rm tiny:1m` to remove it"


@pytest.fixture(params=DAMAGED_MANIFESTS, ids=list(DAMAGED_MANIFESTS))
def damaged(request, home):
    """The catalog model tiny:1m stored with its manifest damaged: (model as stored, what list says is wrong)."""
    damage, problem = DAMAGED_MANIFESTS[request.param]
    m = put(Store(), "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    damage(m.dir)
    return m, problem


def test_a_damaged_manifest_is_listed_as_damaged_with_the_repair_command(damaged, capsys):
    m, problem = damaged
    put(Store(), "ok")
    assert Store().models()[0].name == "ok"
    (entry,) = Store().scan()[1]
    assert (entry.name, entry.dir, entry.size) == ("tiny:1m", m.dir, len(DATA))
    assert entry.problem.startswith(problem) or problem in entry.problem
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[0] == "NAME" and out[1].split()[0] == "ok" and out[2] == ""
    assert out[3].startswith("tiny:1m (damaged): ") and problem in out[3] and out[3].endswith(REPAIR)
    assert len(out) == 4
    assert cli.main(["list", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)
    assert [(i["name"], i["damaged"] is not None, i["repair"]) for i in items] == [
        ("ok", False, None),
        ("tiny:1m", True, "localllm pull tiny:1m"),
    ]


def test_a_damaged_manifest_says_so_when_run(damaged, capsys):
    _, problem = damaged
    for name in ("tiny", "tiny:1m"):
        with pytest.raises(DamagedModelError, match=rf"^stored model tiny:1m is damaged \(.*\): {re.escape(REPAIR)}$"):
            resolve_model(name)
    assert cli.main(["run", "tiny", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: stored model tiny:1m is damaged (") and problem in err and err.count("\n") == 1


def test_rm_removes_a_damaged_model_and_its_files(damaged, capsys):
    m, _ = damaged
    assert cli.main(["rm", "tiny"]) == 0
    assert capsys.readouterr().out == "deleted tiny:1m (160.5 kB, damaged)\n"
    assert not m.dir.exists() and Store().scan() == ([], [])


def test_pull_repairs_a_damaged_manifest_without_the_network(damaged, capsys):
    """The catalog knows the file's sha256: the stored copy is verified and kept (the hub is a closed port)."""
    m, problem = damaged
    assert cli.main(["pull", "tiny"]) == 0
    cap = capsys.readouterr()
    assert "tiny:1m is damaged (" in cap.err and problem in cap.err and "repairing it" in cap.err
    assert "found in the store's copy of the model" in cap.err
    assert cap.out == f"tiny:1m: {m.path}\n"
    fixed = Store().get("tiny:1m")
    assert fixed.path.read_bytes() == DATA and fixed.sha256 == (SHA,) and Store().scan()[1] == []
    assert resolve_model("tiny") == m.path


def test_pull_repairs_a_damaged_file(home, monkeypatch, capsys):
    m = put(Store(), "tiny:1m", file="tiny-1m-q4_k_m.gguf")
    with open(m.path, "r+b") as f:
        f.truncate(100)
    with HubServer() as hf:
        hf.add("test/tiny-GGUF", "tiny-1m-q4_k_m.gguf", DATA)
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        assert cli.main(["pull", "tiny"]) == 0
    assert f"tiny:1m is damaged (tiny-1m-q4_k_m.gguf has 100 bytes, expected {len(DATA)}): repairing it" in (
        capsys.readouterr().err
    )
    assert resolve_model("tiny").read_bytes() == DATA


def test_a_damaged_model_without_a_readable_name(home, capsys):
    """Neither the manifest nor the catalog names it: it is listed, and removed, by its directory's name; a
    name whose directory it is finds it too."""
    m = put(Store(), "mine")
    (m.dir / "manifest.json").write_text("{")
    assert cli.main(["list"]) == 0
    line = f"{m.dir.name} (damaged): manifest.json is not valid JSON: "
    out = capsys.readouterr().out
    assert out.startswith(line) and out.endswith(f": remove it with `localllm rm {m.dir.name}` and pull it again\n")
    with pytest.raises(DamagedModelError, match=r"^stored model mine is damaged .*`localllm rm mine`"):
        resolve_model("mine")
    assert cli.main(["rm", m.dir.name]) == 0 and not m.dir.exists()


def test_a_damaged_import_says_where_to_pull_it_from_again(home, tmp_path, capsys):
    src = tmp_path / "local.gguf"
    src.write_bytes(DATA)
    from localllm.hub.pull import pull

    m = pull(str(src), name="mine")
    _edit(pulled_at="yesterday")(m.dir)
    hint = f"run `localllm pull {src} --name mine` to repair it or `localllm rm mine` to remove it"
    with pytest.raises(DamagedModelError, match=re.escape(hint)):
        resolve_model("mine")
    assert cli.main(["pull", str(src), "--name", "mine"]) == 0
    assert resolve_model("mine") == m.path


@pytest.mark.parametrize("where", ["absolute", "relative", "etc/passwd"])
def test_manifest_paths_never_leave_the_model_directory(home, tmp_path, where):
    other = tmp_path / "other.gguf"
    other.write_bytes(make_gguf(seed=2))
    m = put(Store(), "x")
    path = {"absolute": str(other), "relative": "../../../other.gguf", "etc/passwd": "../../../../../etc/passwd"}[where]
    assert where == "etc/passwd" or (m.dir / path).resolve() == other  # it would reach another model
    _edit(files=[path], sizes=[len(other.read_bytes())], sha256=[hashlib.sha256(other.read_bytes()).hexdigest()])(m.dir)
    with pytest.raises(DamagedModelError, match=re.escape(f'names "{path}", which is not a file in the model')):
        resolve_model("x")


def test_a_symlink_out_of_the_model_directory_is_never_followed(home, tmp_path):
    m = put(Store(), "x")
    other = tmp_path / "other.gguf"
    other.write_bytes(DATA)  # the very same bytes: still not the store's file
    m.path.unlink()
    m.path.symlink_to(other)
    with pytest.raises(DamagedModelError, match=rf"\(m.gguf leads outside the model's directory \(to {other}\)\)"):
        resolve_model("x")
    m.path.unlink()
    m.path.symlink_to(m.path)  # a loop
    with pytest.raises(DamagedModelError, match="m.gguf"):
        resolve_model("x")
    m.path.unlink()
    os.mkfifo(m.path)
    with pytest.raises(DamagedModelError, match=r"\(m.gguf is not a regular file\)"):
        resolve_model("x")


def test_a_file_replaced_between_runs_is_damaged(home, monkeypatch):
    """Same size, other bytes, a new inode: the identity recorded at the pull differs, the sha256 is checked."""
    import localllm.hub.store as store_mod

    m = put(Store(), "x")
    other = bytearray(DATA)
    other[-1] ^= 1
    tmp = m.dir / "new"
    tmp.write_bytes(bytes(other))
    os.replace(tmp, m.path)
    with pytest.raises(DamagedModelError, match=r"\(m.gguf is not the file that was pulled \(replaced since: its"):
        resolve_model("x")
    # the right bytes back in a new file (a restore from a backup): checked once, then known again
    tmp.write_bytes(DATA)
    os.replace(tmp, m.path)
    hashed = []
    real = store_mod.sha256_of
    monkeypatch.setattr(store_mod, "sha256_of", lambda p: hashed.append(p) or real(p))
    assert resolve_model("x") == m.path and hashed == [m.path]
    assert resolve_model("x") == m.path and hashed == [m.path]  # its new identity is recorded
    assert Store().get("x").identity == ((m.path.stat().st_ino, m.path.stat().st_mtime_ns),)


def test_a_manifest_without_identity_is_checked_by_size(home):
    """Manifests written before identities were recorded still work."""
    m = put(Store(), "x")
    manifest = json.loads((m.dir / "manifest.json").read_text())
    del manifest["identity"]
    (m.dir / "manifest.json").write_text(json.dumps(manifest))
    assert Store().get("x").identity is None and resolve_model("x") == m.path


@pytest.mark.parametrize("where", ["file", "below a file", "models is a file", "loop"])
def test_an_unusable_store_is_one_error_naming_it(tmp_path, monkeypatch, capsys, where):
    f = tmp_path / "file"
    f.write_text("x")
    home, why = {
        "file": (f, f"{f} is not a directory"),
        "below a file": (f / "sub", f"{f} is not a directory"),
        "models is a file": (tmp_path / "h", f"{tmp_path / 'h' / 'models'} is not a directory"),
        "loop": (tmp_path / "loop", f"{tmp_path / 'loop'}: Too many levels of symbolic links"),
    }[where]
    if where == "models is a file":
        home.mkdir()
        (home / "models").write_text("x")
    if where == "loop":
        home.symlink_to(home)
    monkeypatch.setenv("LOCALLLM_HOME", str(home))
    monkeypatch.setattr("sys.argv", list(sys.argv))
    line = f"error: cannot use the model store {home} (LOCALLLM_HOME): {why}\n"
    for argv in (["list"], ["list", "--json"], ["rm", "x"], ["pull", str(f)], ["run", "x", "hi"], ["show", "x"]):
        assert cli.main(argv) == 1, argv
        cap = capsys.readouterr()
        assert (cap.out, cap.err) == ("", line), argv
    with pytest.raises(StoreError, match=re.escape(line[7:-1])):
        resolve_model("tiny", pull=True)
