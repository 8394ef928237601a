"""A PEP 503 simple package index on 127.0.0.1 for tests, serving wheels generated on the spot.

with PackageIndex(tmp_path / "index") as idx:
    idx.add_wheel("my-model-part1", "1.0", {"data/part01.bin": b"..."})
    monkeypatch.setenv(...) for each of idx.pip_env().items()    # pip looks only here
    idx.log -> ["/simple/my-model-part1/", "/packages/my_model_part1-1.0-py3-none-any.whl", ...]
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import threading
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _dist(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.server.log.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()


class PackageIndex:
    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "simple").mkdir(parents=True, exist_ok=True)
        (self.root / "packages").mkdir(exist_ok=True)
        self.projects: dict[str, list[str]] = {}
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(self.root)))
        self._server.daemon_threads = True
        self._server.log = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/simple/"

    @property
    def log(self) -> list[str]:
        return self._server.log  # type: ignore[attr-defined]

    def add_wheel(self, project: str, version: str, members: dict[str, bytes]) -> Path:
        """Writes a py3-none-any wheel holding `members` (plus its dist-info) and lists it in the index."""
        dist = _dist(project)
        whl = self.root / "packages" / f"{dist}-{version}-py3-none-any.whl"
        info = f"{dist}-{version}.dist-info"
        files = dict(members)
        files[f"{info}/METADATA"] = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n".encode()
        files[f"{info}/WHEEL"] = (
            b"Wheel-Version: 1.0\nGenerator: localllm-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
        with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as z:
            for n, d in files.items():
                z.writestr(n, d)
            z.writestr(f"{info}/RECORD", record)
        self.projects.setdefault(project, []).append(whl.name)
        self._write_pages()
        return whl

    def _write_pages(self) -> None:
        names = sorted(self.projects)
        (self.root / "simple" / "index.html").write_text(
            "<!DOCTYPE html><html><body>"
            + "".join(f'<a href="{re.sub(r"[-_.]+", "-", n).lower()}/">{n}</a>' for n in names)
            + "</body></html>"
        )
        for n in names:
            d = self.root / "simple" / re.sub(r"[-_.]+", "-", n).lower()
            d.mkdir(exist_ok=True)
            links = []
            for w in self.projects[n]:
                sha = hashlib.sha256((self.root / "packages" / w).read_bytes()).hexdigest()
                links.append(f'<a href="../../packages/{w}#sha256={sha}">{w}</a>')
            (d / "index.html").write_text("<!DOCTYPE html><html><body>" + "".join(links) + "</body></html>")

    def pip_env(self) -> dict[str, str]:
        """PIP_* variables that point pip at this index only, without retries or cache."""
        return {
            "PIP_INDEX_URL": self.url,
            "PIP_EXTRA_INDEX_URL": self.url,
            "PIP_FIND_LINKS": "",
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_RETRIES": "0",
            "PIP_TIMEOUT": "5",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1",
        }

    def __enter__(self) -> PackageIndex:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
