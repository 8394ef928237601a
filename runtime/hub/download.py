"""HTTP for pulls, on the standard library: resumable, verified downloads and small JSON requests.

    sha = download(url, partial, size=..., sha256=..., headers=..., net=NetConfig(), progress=...)
    data, next_url = get_json(url, headers, net)        # next_url from a `Link: <...>; rel="next"` header

download() appends to `partial` (resuming with `Range: bytes=N-`), retries dropped connections, stalls
and 5xx answers with backoff, and returns only when `partial` holds exactly `size` bytes whose sha256
is `sha256` (either may be None: unknown). A sidecar `partial.json` pins what the bytes are, so a partial
file of some other version is started over, never spliced.

Errors are PullError (a ValueError) subclasses naming the host or file. An Authorization header is
sent only to the origin (scheme, host, port) it was given for: a redirect to a CDN, another port or
plain http drops it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from .disk import check_space, discard, load_pin, make_pin, save_pin, sync, write
from .errors import ChecksumError, NetworkError, PullError
from .progress import Progress
from .units import format_size

CHUNK = 1 << 20  # the most read at once; read1() returns what has arrived, so progress stays live
USER_AGENT = "localllm/0.1 (python-urllib)"


class HTTPStatusError(PullError):
    def __init__(self, status: int, url: str, headers: Message | None = None, body: str = ""):
        self.status, self.url, self.headers, self.body = status, url, headers or Message(), body
        super().__init__(
            f"{host_of(url)}: HTTP {status} {http.client.responses.get(status, '')}".rstrip()
            + f" for {urlsplit(url).path}"
        )


@dataclass(frozen=True)
class NetConfig:
    timeout: float = 30.0  # seconds to connect, and of silence mid-transfer before the attempt is dropped
    retries: int = 5  # attempts after a failure that made no progress
    backoff: float = 1.0  # first wait between attempts; doubles each time, at most 30 s


DEFAULT_NET = NetConfig()


def host_of(url: str) -> str:
    """host[:port] of url, never its user:password part."""
    u = urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = None
    return (f"{u.hostname}:{port}" if port else u.hostname) or url


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of url, the port filled in for http and https: where a credential may go."""
    u = urlsplit(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:
        port = None
    return scheme, (u.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _Redirect(urllib.request.HTTPRedirectHandler):
    # Authorization (an unredirected header) follows a redirect only to the same origin: never to
    # another host or port, and never from https down to http
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        auth = req.unredirected_hdrs.get("Authorization")
        if new is not None and auth and origin(new.full_url) == origin(req.full_url):
            new.add_unredirected_header("Authorization", auth)
        return new


_OPENER = urllib.request.build_opener(_Redirect())


def _network_error(url: str, err: BaseException, timeout: float, connecting: bool) -> NetworkError:
    host = host_of(url)
    if isinstance(err, socket.gaierror):
        return NetworkError(f"cannot reach {host}: name lookup failed (no network?)", host, False)
    if isinstance(err, ConnectionRefusedError):
        return NetworkError(f"cannot reach {host}: connection refused", host, False)
    if isinstance(err, (TimeoutError, socket.timeout)):
        if connecting:
            return NetworkError(f"cannot reach {host}: no answer in {timeout:g} s", host, False)
        return NetworkError(f"{host}: no data for {timeout:g} s (stalled)", host, True)
    if isinstance(err, ssl.SSLError):
        return NetworkError(f"{host}: TLS error: {getattr(err, 'reason', None) or err}", host, False)
    if isinstance(err, OSError) and connecting:
        return NetworkError(f"cannot reach {host}: {err.strerror or err}", host, False)
    return NetworkError(f"{host}: connection lost ({type(err).__name__}: {err})", host, True)


def _open(url: str, headers: dict[str, str], timeout: float) -> http.client.HTTPResponse:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    for k, v in headers.items():
        if k.lower() == "authorization":
            req.add_unredirected_header("Authorization", v)
        else:
            req.add_header(k, v)
    try:
        return _OPENER.open(req, timeout=timeout)
    except urllib.error.HTTPError as e:
        try:
            body = e.read(4096).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            body = ""
        e.close()
        raise HTTPStatusError(e.code, e.url or url, e.headers, body) from None
    except http.client.InvalidURL as e:  # a space or control character in the URL: no retry can help
        raise PullError(f"invalid URL {url!r}: {e}") from None
    except urllib.error.URLError as e:  # raised while connecting and sending the request
        reason = e.reason if isinstance(e.reason, BaseException) else OSError(str(e.reason))
        raise _network_error(url, reason, timeout, connecting=True) from None
    except (OSError, http.client.HTTPException) as e:  # while reading the status line and headers
        raise _network_error(url, e, timeout, connecting=False) from None


def _retryable(e: PullError) -> bool:
    if isinstance(e, NetworkError):
        return e.transient
    return isinstance(e, HTTPStatusError) and (e.status >= 500 or e.status == 429)


def _wait(failures: int, net: NetConfig, err: PullError, progress: Progress) -> int:
    """Counts one more failure; raises err once the retries are spent, else sleeps and returns the count."""
    failures += 1
    if failures > net.retries:
        raise err
    delay = min(net.backoff * 2 ** (failures - 1), 30.0)
    progress.message(f"{err}; retrying in {delay:g} s ({failures}/{net.retries})")
    time.sleep(delay)
    return failures


def get_json(url: str, headers: dict[str, str], net: NetConfig, progress: Progress | None = None):
    """GET url as JSON; returns (data, next_url or None). Retries like download()."""
    progress = progress or Progress(quiet=True)
    failures = 0
    while True:
        try:
            with _open(url, headers, net.timeout) as resp:
                raw = resp.read()
                link = resp.headers.get("Link", "")
            break
        except PullError as e:
            if not _retryable(e):
                raise
            failures = _wait(failures, net, e, progress)
        except (OSError, http.client.HTTPException) as e:
            failures = _wait(failures, net, _network_error(url, e, net.timeout, False), progress)
    try:
        data = json.loads(raw)
    except ValueError:
        raise PullError(f"{host_of(url)}: answer to {urlsplit(url).path} is not JSON") from None
    m = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
    return data, (urljoin(url, m.group(1)) if m else None)


_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


def _body_range(resp: http.client.HTTPResponse, url: str) -> tuple[int, int | None]:
    """(offset of the body's first byte in the file, file length or None)."""
    if resp.status == 206:
        m = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", "").strip())
        if not m:
            raise PullError(f"{host_of(url)}: partial answer without a valid Content-Range")
        return int(m[1]), (None if m[3] == "*" else int(m[3]))
    n = resp.headers.get("Content-Length", "")
    return 0, (int(n) if n.isdigit() else None)


def download(
    url: str,
    partial: Path,
    *,
    size: int | None = None,
    sha256: str | None = None,
    headers: dict[str, str] | None = None,
    net: NetConfig = DEFAULT_NET,
    progress: Progress | None = None,
    label: str | None = None,
) -> str:
    """Fetches url into `partial`, resuming what is there; returns the file's sha256 (hex).

    Raises ChecksumError (bytes deleted) when the size or sha256 is wrong, DiskFullError, HTTPStatusError
    and NetworkError (bytes kept for a later resume) when the server or network fails past the retries.
    """
    progress = progress or Progress(quiet=True)
    label = label or partial.name.removesuffix(".partial")
    headers = dict(headers or {})
    host = host_of(url)
    pin = make_pin(url, size, sha256)
    old = load_pin(partial)
    if old is None or any(old.get(k) != v for k, v in pin.items()):
        discard(partial)
    etag = old.get("etag") if old and isinstance(old.get("etag"), str) else None
    partial.parent.mkdir(parents=True, exist_ok=True)
    save_pin(partial, {**pin, "etag": etag})

    h = hashlib.sha256()
    with open(partial, "ab+") as f:
        f.seek(0)
        while chunk := f.read(1 << 22):
            h.update(chunk)
        done = f.tell()
        if size is not None and done > size:
            f.truncate(0)
            h, done = hashlib.sha256(), 0
        failures = 0
        # the most bytes the partial has held: only passing it is progress that earns fresh retries (a
        # server that ignores Range starts over at 0 each time, so counting bytes received never ends)
        best = done
        begun = False
        while size is None or done < size:
            req = dict(headers)
            if done:
                req["Range"] = f"bytes={done}-"
                if etag and not sha256:
                    req["If-Range"] = etag
            try:
                resp = _open(url, req, net.timeout)
            except HTTPStatusError as e:
                if e.status == 416 and done:  # nothing left past `done`: complete, or the file changed
                    m = re.fullmatch(r"bytes\s+\*/(\d+)", e.headers.get("Content-Range", "").strip())
                    total = int(m[1]) if m else None
                    if total == done and size in (None, done):
                        size = done
                        break
                    f.truncate(0)
                    h, done = hashlib.sha256(), 0
                    continue
                if not _retryable(e):
                    raise
                failures = _wait(failures, net, e, progress)
                continue
            except PullError as e:
                if not _retryable(e):
                    raise
                failures = _wait(failures, net, e, progress)
                continue
            with resp:
                start, total = _body_range(resp, resp.url or url)
                if start != done:
                    if start != 0:
                        raise PullError(f"{host}: asked for bytes from {done}, got bytes from {start}")
                    f.truncate(0)  # a 200 to a Range request: the server starts over
                    h, done = hashlib.sha256(), 0
                if total is not None and size is not None and total != size:
                    discard(partial)
                    raise ChecksumError(
                        f"{host} serves {label} as {total} bytes, expected {size}: not the file that was asked for"
                    )
                if size is None:
                    size = total
                etag = resp.headers.get("ETag") or etag
                save_pin(partial, {**pin, "etag": etag})
                if size is not None:
                    check_space(partial.parent, size - done)
                progress.begin(label, size, done)
                begun = True
                err: PullError | None = None
                try:
                    while chunk := resp.read1(CHUNK):
                        write(f, chunk, partial)
                        h.update(chunk)
                        done += len(chunk)
                        progress.advance(len(chunk))
                except (OSError, http.client.HTTPException) as e:
                    err = _network_error(url, e, net.timeout, connecting=False)
            if err is None:
                if size is None:  # no length given: the body was the whole file
                    size = done
                    break
                if done >= size:
                    break
                err = NetworkError(
                    f"{host}: connection closed at {format_size(done)} of {format_size(size)}", host, True
                )
            if done > best:
                best, failures = done, 0
            failures = _wait(failures, net, err, progress)
        sync(f, partial)
    if not begun:
        progress.begin(label, size, done)
    progress.end()
    if done != size:
        discard(partial)
        raise ChecksumError(f"{label} from {host} has {done} bytes, expected {size}; the download was deleted")
    digest = h.hexdigest()
    if sha256 and digest != sha256:
        discard(partial)
        raise ChecksumError(
            f"{label} from {host} failed verification: sha256 {digest[:16]}… is not the "
            f"expected {sha256[:16]}…; the download was deleted"
        )
    return digest
