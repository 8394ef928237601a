"""A Hugging Face hub on 127.0.0.1 for tests: file listings, resolve redirects, Range, gates and faults.

    with HubServer() as hf:
        hf.add("user/repo", "model-Q4_K_M.gguf", data)        # an LFS file: listed with sha256 and size
        hf.gate("user/gated", token="hf_good")                # 401 without the token, 403 with another
        hf.fault("model-Q4_K_M.gguf", "drop", after=1000)     # the next matching download breaks once
        monkeypatch.setenv("HF_ENDPOINT", hf.url)
        hf.log -> [(method, path, headers)]                   # every request, in order
        hf.next_base = f"http://localhost:{hf.port}"          # where a listing's `Link: rel=next` points (hf.url)

Downloads answer `/{repo}/resolve/{rev}/{path}` with a 302 to `http://localhost:{port}/cdn/...`, another
host name as a CDN is, which serves the bytes with Range support. `serve(path, data)` adds a plain file at
`/plain/{path}` (for URL pulls). Faults, each consumed by the first matching request in order:
    status      answer HTTP `code` (any request)
    drop        send `after` bytes of the body (a download or a listing), then close the connection;
                with ignore_range=True, from the start of the file whatever Range asked for
    stall       send `after` bytes, then go silent for `seconds`
    corrupt     flip one byte in the body
    ignore_range  answer 200 with the whole file to a Range request
    content_range answer 206 with the Content-Range header `value`
    slow        send the body in 20 pieces over `seconds`
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import numpy as np

_DATA_FAULTS = {"drop", "stall", "corrupt", "ignore_range", "content_range", "slow"}


def make_gguf(arch: str = "llama", n_floats: int = 40_000, file_type: int | None = 15, seed: int = 0) -> bytes:
    """A small valid GGUF file (two F32 tensors, ~4*n_floats bytes) made with the gguf package's writer."""
    import gguf

    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.gguf"
        w = gguf.GGUFWriter(str(path), arch)
        w.add_context_length(2048)
        if file_type is not None:
            w.add_file_type(file_type)
        w.add_tensor("token_embd.weight", rng.standard_normal((n_floats // 64, 64)).astype(np.float32))
        w.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path.read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, error_code: str = "", msg: str = "") -> None:
        h = {"Content-Type": "application/json"}
        if error_code:
            h["X-Error-Code"] = error_code
        self._send(code, json.dumps({"error": msg or error_code}).encode(), h)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.server.hub
        url = urlsplit(self.path)
        path = unquote(url.path)
        hub.log.append((self.command, self.path, dict(self.headers.items())))
        fault = hub.take(path, data=path.startswith(("/cdn/", "/plain/", "/api/")))
        if fault and fault["kind"] == "status":
            return self._error(fault["code"], fault.get("error_code", ""))
        if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/?]+)", path):
            return self._tree(m[1], m[2], parse_qs(url.query), fault)
        if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
            repo, rev, file = m[1], m[2], m[3]
            if not self._allowed(repo):
                return
            if rev not in hub.revisions.get(repo, {"main"}):
                return self._error(404, "RevisionNotFound")
            if file not in hub.repos[repo]:
                return self._error(404, "EntryNotFound")
            data = hub.repos[repo][file][0]
            loc = f"http://localhost:{hub.port}/cdn/{repo}/{rev}/{file}"
            return self._send(
                302,
                b"",
                {
                    "Location": loc,
                    "X-Linked-Size": str(len(data)),
                    "X-Linked-Etag": f'"{hashlib.sha256(data).hexdigest()}"',
                },
            )
        if m := re.fullmatch(r"/cdn/([^/]+/[^/]+)/([^/]+)/(.+)", path):
            entry = hub.repos.get(m[1], {}).get(m[3])
            return self._body(entry[0], fault, True) if entry else self._error(404)
        if m := re.fullmatch(r"/plain/(.+)", path):
            entry = hub.plain.get(m[1])
            return self._body(entry[0], fault, entry[1]) if entry else self._error(404)
        self._error(404)

    def _allowed(self, repo: str) -> bool:
        hub = self.server.hub
        if repo not in hub.repos:
            self._error(401, "RepoNotFound", "Repository not found")
            return False
        token = hub.gates.get(repo)
        if token is None:
            return True
        auth = self.headers.get("Authorization")
        if auth == f"Bearer {token}":
            return True
        self._error(403 if auth else 401, "GatedRepo", "Access to this model is restricted")
        return False

    def _tree(self, repo: str, rev: str, q: dict, fault: dict | None) -> None:
        hub = self.server.hub
        if not self._allowed(repo):
            return
        if rev not in hub.revisions.get(repo, {"main"}):
            return self._error(404, "RevisionNotFound")
        items: list[dict] = []
        dirs = sorted({p.rsplit("/", 1)[0] for p in hub.repos[repo] if "/" in p})
        items += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d} for d in dirs]
        for p, (data, lfs) in sorted(hub.repos[repo].items()):
            item = {
                "type": "file",
                "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest(),
                "size": 134 if lfs else len(data),
                "path": p,
            }
            if lfs:
                item["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            items.append(item)
        start = int(q.get("cursor", ["0"])[0])
        page = items[start : start + hub.page_size]
        headers = {"Content-Type": "application/json"}
        if start + hub.page_size < len(items):
            base = hub.next_base or hub.url
            nxt = f"{base}/api/models/{repo}/tree/{rev}?recursive=true&cursor={start + hub.page_size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        body = json.dumps(page).encode()
        if fault and fault["kind"] == "drop":  # a listing cut short: Content-Length promises more
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: fault.get("after", 0)])
            self.close_connection = True
            return
        self._send(200, body, headers)

    def _body(self, data: bytes, fault: dict | None, with_length: bool) -> None:
        kind = fault["kind"] if fault else None
        start, total = 0, len(data)
        rng = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if rng and kind != "ignore_range" and not (fault or {}).get("ignore_range"):
            start = int(rng[1])
            if start >= total:
                return self._send(416, b"", {"Content-Range": f"bytes */{total}"})
        body = data[start:]
        if kind == "corrupt":
            i = len(body) // 2
            body = body[:i] + bytes([body[i] ^ 0xFF]) + body[i + 1 :]
        self.send_response(206 if start or kind == "content_range" else 200)
        if kind == "content_range":
            self.send_header("Content-Range", fault["value"])
        elif start:
            self.send_header("Content-Range", f"bytes {start}-{total - 1}/{total}")
        if with_length:
            self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if self.command == "HEAD":
            return
        if kind in ("drop", "stall"):
            self.wfile.write(body[: fault.get("after", 0)])
            self.wfile.flush()
            if kind == "stall":
                self.server.hub.stop.wait(fault.get("seconds", 5))
            self.close_connection = True
            return
        if kind == "slow":
            step = -(-len(body) // 20)
            for i in range(0, len(body), step):
                self.wfile.write(body[i : i + step])
                self.wfile.flush()
                if self.server.hub.stop.wait(fault["seconds"] / 20):
                    return
            return
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    hub: HubServer

    def handle_error(self, request, client_address) -> None:
        pass  # a client that hangs up mid-body (as the tests make it) is not an error here


class HubServer:
    def __init__(self, page_size: int = 1000):
        self.repos: dict[str, dict[str, tuple[bytes, bool]]] = {}
        self.revisions: dict[str, set[str]] = {}
        self.gates: dict[str, str] = {}
        self.plain: dict[str, tuple[bytes, bool]] = {}
        self.faults: list[dict] = []
        self.log: list[tuple[str, str, dict]] = []
        self.page_size = page_size
        self.next_base: str | None = None
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.hub = self
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def add(self, repo: str, path: str, data: bytes, lfs: bool = True, revisions: set[str] | None = None) -> str:
        """Adds a file; returns its sha256."""
        self.repos.setdefault(repo, {})[path] = (data, lfs)
        if revisions:
            self.revisions[repo] = {"main", *revisions}
        return hashlib.sha256(data).hexdigest()

    def serve(self, path: str, data: bytes, with_length: bool = True) -> str:
        self.plain[path] = (data, with_length)
        return f"{self.url}/plain/{path}"

    def gate(self, repo: str, token: str) -> None:
        self.gates[repo] = token

    def fault(self, match: str, kind: str, **kw) -> None:
        with self._lock:
            self.faults.append({"match": match, "kind": kind, **kw})

    def take(self, path: str, data: bool) -> dict | None:
        with self._lock:
            for f in self.faults:
                if f["match"] in path and (f["kind"] == "status" or (data and f["kind"] in _DATA_FAULTS)):
                    self.faults.remove(f)
                    return f
        return None

    def requests(self, contains: str) -> list[tuple[str, str, dict]]:
        return [r for r in self.log if contains in r[1]]

    def __enter__(self) -> HubServer:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
