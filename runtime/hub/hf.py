"""The Hugging Face hub's API, as pulls use it: endpoint, token, file listing, file choice, error wording.

    files = list_files(repo, revision, net)
    cached_blob(repo, files[0])                     # the same file, already in the user's Hugging Face cache         # [RemoteFile(path, size, sha256 or None)]
    pick(files, ref)                                # the quant's file, or every part of a split file, in order

Endpoint, token and cache are found as huggingface_hub finds them: HF_ENDPOINT (default https://huggingface.co);
HF_TOKEN, else the token file $HF_TOKEN_PATH, else $HF_HOME/token (HF_HOME default $XDG_CACHE_HOME/huggingface,
XDG_CACHE_HOME default ~/.cache); the download cache $HF_HUB_CACHE, default $HF_HOME/hub.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from .download import DEFAULT_NET, HTTPStatusError, NetConfig, get_json, origin
from .errors import PullError
from .names import SPLIT, HubRef, has_quant, split_parts, stem

DEFAULT_ENDPOINT = "https://huggingface.co"


class AccessError(PullError):
    """401/403 from the hub: a gated or private repository, or a refused token."""


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # from the LFS pointer; None for a file kept in git itself


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _hf_home() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")


def token() -> str | None:
    env = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if env:
        return env.strip()
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(_hf_home(), "token")
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def headers() -> dict[str, str]:
    t = token()
    return {"Authorization": f"Bearer {t}"} if t else {}


def cached_blob(repo: str, f: RemoteFile) -> Path | None:
    """The copy of `f` that huggingface_hub already downloaded, or None.

    Its cache keeps an LFS file as $HF_HUB_CACHE/models--USER--REPO/blobs/<sha256> (snapshots link to it), so a
    file of known sha256 is found whatever revision fetched it; the caller still verifies the bytes.
    """
    if not f.sha256:
        return None
    cache = Path(os.environ.get("HF_HUB_CACHE") or os.path.join(_hf_home(), "hub")).expanduser()
    blob = cache / f"models--{repo.replace('/', '--')}" / "blobs" / f.sha256
    try:
        return blob if blob.is_file() and blob.stat().st_size == f.size else None
    except OSError:
        return None


def file_url(repo: str, revision: str, path: str) -> str:
    return f"{endpoint()}/{repo}/resolve/{quote(revision, safe='')}/{quote(path)}"


def explain(e: HTTPStatusError, repo: str, what: str) -> PullError:
    """A hub HTTP error as a message that says what to do; `what` names the thing asked for."""
    code = e.headers.get("X-Error-Code", "")
    host = endpoint().split("://", 1)[-1]
    have_token = token() is not None
    if code == "GatedRepo" or (e.status == 403 and not code):
        return AccessError(
            f"{repo} is gated (HTTP {e.status}): accept its terms at {endpoint()}/{repo} while "
            f"logged in, then set HF_TOKEN to an access token of that account "
            f"(export HF_TOKEN=hf_...; tokens: {endpoint()}/settings/tokens)"
        )
    if e.status in (401, 403):
        if code == "RepoNotFound" or not have_token:
            return AccessError(
                f"{repo} not found on {host}, or private (HTTP {e.status}): check the name; for a "
                f"private repository set HF_TOKEN (export HF_TOKEN=hf_...)"
            )
        return AccessError(f"{host} refused HF_TOKEN for {repo} (HTTP {e.status}): check the token and its access")
    if e.status == 404:
        if code == "RevisionNotFound":
            return PullError(f"{what}: revision not found in {repo} on {host} (HTTP 404)")
        return PullError(f"{what} not found on {host} (HTTP 404)")
    return e


def _remote_file(item) -> RemoteFile | None:
    """A listing entry as a RemoteFile; None for directories and entries without a usable path and size."""
    if not isinstance(item, dict) or item.get("type", "file") != "file":
        return None
    lfs = item.get("lfs") if isinstance(item.get("lfs"), dict) else {}
    path = item.get("path") or item.get("rfilename")
    size = lfs.get("size", item.get("size", 0))
    if not isinstance(path, str) or not path or type(size) is not int or size < 0:
        return None
    sha = lfs.get("oid") or lfs.get("sha256")
    return RemoteFile(path, size, sha if isinstance(sha, str) else None)


def list_files(repo: str, revision: str = "main", net: NetConfig = DEFAULT_NET, progress=None) -> list[RemoteFile]:
    """Every file of the repo at `revision`, with LFS sha256 and size, following pagination.

    The token goes only to the endpoint's origin: a `Link: rel=next` to another host is followed without it.
    Malformed entries (a path that is no string, a size that is no integer >= 0) are skipped.
    """
    home = endpoint()
    url: str | None = f"{home}/api/models/{repo}/tree/{quote(revision, safe='')}?recursive=true"
    out: list[RemoteFile] = []
    while url:
        try:
            data, url = get_json(url, headers() if origin(url) == origin(home) else {}, net, progress)
        except HTTPStatusError as e:
            raise explain(e, repo, f"{repo}@{revision}") from None
        if not isinstance(data, list):
            raise PullError(f"{home}: unexpected file listing for {repo}")
        out += [f for f in map(_remote_file, data) if f is not None]
    return out


def _quant_of(path: str) -> str:
    name = stem(path.rsplit("/", 1)[-1])
    m = re.search(r"[-.]([A-Za-z0-9_]+)$", name)
    return (m[1] if m else name).upper()


def _group(files: list[RemoteFile], first: RemoteFile) -> list[RemoteFile]:
    """`first` alone, or every part of the split file it starts, in order."""
    names = split_parts(first.path)
    if len(names) == 1:
        return [first]
    by_path = {f.path: f for f in files}
    parts = [by_path.get(p) for p in names]
    missing = [i + 1 for i, p in enumerate(parts) if p is None]
    if missing:
        raise PullError(f"{first.path}: split file is missing part(s) {', '.join(map(str, missing))} of {len(names)}")
    return parts  # type: ignore[return-value]


def pick(files: list[RemoteFile], ref: HubRef) -> list[RemoteFile]:
    """The file `ref` names: by path, or the model file whose name carries its quant tag."""
    ggufs = [f for f in files if f.path.lower().endswith(".gguf") and "mmproj" not in f.path.lower()]
    if ref.file:
        hit = next((f for f in files if f.path == ref.file), None)
        if hit is None:
            raise PullError(
                f"{ref.file} not found in {ref.repo}"
                + (f"; GGUF files there: {', '.join(f.path for f in ggufs[:8])}" if ggufs else "")
            )
        first = split_parts(hit.path)[0]
        hit = next((f for f in files if f.path == first), hit)
        return _group(files, hit)
    hits = sorted(
        (f for f in ggufs if has_quant(f.path, ref.quant)), key=lambda f: (SPLIT.search(f.path) is not None, f.path)
    )
    hits = [f for f in hits if not SPLIT.search(f.path) or SPLIT.search(f.path)[1] == "00001"]
    if not hits:
        quants = sorted({_quant_of(f.path) for f in ggufs})
        if not quants:
            raise PullError(f"{ref.repo} has no GGUF files")
        raise PullError(
            f"{ref.repo} has no {ref.quant} file; quants there: {', '.join(quants)} (e.g. pull {ref.repo}:{quants[0]})"
        )
    return _group(files, hits[0])
