"""A stored model's manifest: what a pull recorded, read strictly, and the checks its files must pass to be opened.

    m = read(d)                  # StoredModel from d/manifest.json, or ManifestError saying what is wrong
    m.damage()                   # None, or what is wrong with its files (missing, resized, outside d, not files)
    m.changed()                  # indices of files whose identity (inode, mtime) differs from the recorded one

A manifest is untrusted input: anything but the exact shape below is ManifestError (bounded read, types,
ranges, file names confined to the model's own directory). ManifestError is a ValueError.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.json"
MAX_MANIFEST = 1 << 20  # bytes: a manifest is a few hundred
_MAX_INT = 1 << 63
_LAST_TIME = 32503680000  # 3000-01-01 UTC: pulled_at is a past time, and one every calendar function can show
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_TYPES = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


class ManifestError(ValueError):
    """A manifest that cannot be trusted; the message says what is wrong with it."""


def is_file_name(name) -> bool:
    """Whether `name` can be a file directly inside a model's directory (no path, not the manifest)."""
    return (
        isinstance(name, str)
        and name not in ("", ".", "..", MANIFEST)
        and not any(c in name for c in "/\\\0")
        and Path(name).name == name
        and len(name.encode("utf-8", "surrogateescape")) <= 200
    )


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_INT


@dataclass(frozen=True)
class StoredModel:
    name: str
    dir: Path
    files: tuple[str, ...]  # file names in dir, in split order; at least one
    sizes: tuple[int, ...]
    sha256: tuple[str, ...]
    source: str  # where it came from: a URL, hf.co/repo/file@revision, a package list or a local path
    pulled_at: float  # unix time
    architecture: str | None
    parameters: int | None
    quant: str | None
    context_length: int | None
    identity: tuple[tuple[int, int], ...] | None = None  # per file (inode, mtime_ns) when stored; None: not recorded

    @property
    def path(self) -> Path:
        return self.dir / self.files[0]

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def damage(self) -> str | None:
        """None when every file is a regular file inside dir (symlinks followed) with its recorded size, else what
        is wrong. Costs one stat per file."""
        home = os.path.realpath(self.dir)
        for f, n in zip(self.files, self.sizes):
            real = os.path.realpath(self.dir / f)
            if os.path.dirname(real) != home:
                return f"{f} leads outside the model's directory (to {real})"
            try:
                st = os.stat(real)
            except OSError as e:
                return f"{f} is missing" if isinstance(e, FileNotFoundError) else f"cannot read {f}: {e.strerror}"
            if not stat.S_ISREG(st.st_mode):
                return f"{f} is not a regular file"
            if st.st_size != n:
                return f"{f} has {st.st_size} bytes, expected {n}"
        return None

    def changed(self) -> list[int]:
        """Indices of the files whose inode or modification time is not the recorded one (replaced, rewritten or
        copied since the pull); [] when no identity is recorded or a file cannot be read (damage() says why)."""
        if self.identity is None:
            return []
        out = []
        for i, (f, ident) in enumerate(zip(self.files, self.identity)):
            try:
                st = os.stat(self.dir / f)
            except OSError:
                continue
            if (st.st_ino, st.st_mtime_ns) != ident:
                out.append(i)
        return out

    def with_identity(self) -> StoredModel:
        """This model with its files' current identity recorded (OSError when a file cannot be read)."""
        ids = tuple((st.st_ino, st.st_mtime_ns) for st in (os.stat(self.dir / f) for f in self.files))
        return dataclasses.replace(self, identity=ids)

    def manifest(self) -> dict:
        m = {
            "name": self.name,
            "files": list(self.files),
            "sizes": list(self.sizes),
            "sha256": list(self.sha256),
            "source": self.source,
            "pulled_at": self.pulled_at,
            "architecture": self.architecture,
            "parameters": self.parameters,
            "quant": self.quant,
            "context_length": self.context_length,
        }
        if self.identity is not None:
            m["identity"] = [list(x) for x in self.identity]
        return m

    @classmethod
    def from_manifest(cls, d: Path, m) -> StoredModel:
        """The model manifest `m` (parsed JSON) describes in directory d; ManifestError saying what is wrong."""
        if not isinstance(m, dict):
            raise ManifestError(f"{MANIFEST} holds {_JSON_TYPES.get(type(m), 'null')}, not an object")

        def field(k: str, ok, what: str, default=None, required=True):
            if k not in m:
                if required:
                    raise ManifestError(f"{MANIFEST} has no {k!r}")
                return default
            v = m[k]
            if not ok(v):
                raise ManifestError(f"{MANIFEST}: {k!r} must be {what}, not {json.dumps(v)[:60]}")
            return v

        def per_file(ok):
            return lambda v: isinstance(v, list) and len(v) == len(files) and all(ok(x) for x in v)

        name = field("name", lambda v: isinstance(v, str) and v != "" and v.isprintable(), "a printable name")
        files = field("files", lambda v: isinstance(v, list) and v != [], "a list of file names")
        for f in files:
            if not is_file_name(f):
                raise ManifestError(
                    f"{MANIFEST} names {json.dumps(f)[:80]}, which is not a file in the model's directory"
                )
        if len(set(files)) != len(files):
            raise ManifestError(f"{MANIFEST} names a file twice")
        sizes = field("sizes", per_file(_is_int), "one size in bytes per file")
        sha = field("sha256", per_file(lambda x: isinstance(x, str) and _SHA256.fullmatch(x)), "one sha256 per file")
        pulled_at = field(
            "pulled_at",
            lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < _LAST_TIME,  # not NaN
            "a time (seconds since 1970)",
            default=0,
            required=False,
        )
        identity = field(
            "identity",
            per_file(lambda x: isinstance(x, list) and len(x) == 2 and all(_is_int(i) for i in x)),
            "one [inode, mtime_ns] per file",
            required=False,
        )
        return cls(
            name=name,
            dir=d,
            files=tuple(files),
            sizes=tuple(sizes),
            sha256=tuple(sha),
            source=field("source", lambda v: isinstance(v, str), "a string", "", required=False),
            pulled_at=float(pulled_at),
            architecture=field("architecture", lambda v: v is None or isinstance(v, str), "a string", required=False),
            parameters=field("parameters", lambda v: v is None or _is_int(v), "a count", required=False),
            quant=field("quant", lambda v: v is None or isinstance(v, str), "a string", required=False),
            context_length=field("context_length", lambda v: v is None or _is_int(v), "a count", required=False),
            identity=tuple(tuple(x) for x in identity) if identity is not None else None,
        )


def load(d: Path):
    """d/manifest.json parsed (any JSON value), read without blocking and at most MAX_MANIFEST bytes;
    ManifestError when it is missing, not a regular file, too long or not JSON."""
    p = d / MANIFEST
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO in its place must not block
    except FileNotFoundError:
        raise ManifestError(f"{MANIFEST} is missing") from None
    except OSError as e:
        raise ManifestError(f"cannot read {MANIFEST}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ManifestError(f"{MANIFEST} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(f"{MANIFEST} is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_MANIFEST + 1)
    except OSError as e:
        raise ManifestError(f"cannot read {MANIFEST}: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_MANIFEST:
        raise ManifestError(f"{MANIFEST} is longer than {MAX_MANIFEST} bytes")
    if not data.strip():
        raise ManifestError(f"{MANIFEST} is empty")
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{MANIFEST} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (ValueError, RecursionError):
        raise ManifestError(f"{MANIFEST} is not valid JSON") from None


def read(d: Path) -> StoredModel:
    """The model stored in directory d; ManifestError saying what is wrong with its manifest."""
    return StoredModel.from_manifest(d, load(d))


@dataclass(frozen=True)
class DamagedEntry:
    """A directory in the store whose manifest cannot be trusted: what it holds is shown, removable and repairable,
    never opened."""

    name: str  # the manifest's name, else the catalog name the directory belongs to, else the directory's name
    dir: Path
    problem: str  # what is wrong, e.g. "manifest.json is not valid JSON (...)"
    size: int = 0  # bytes of the regular files directly in dir, but for the manifest
    source: str | None = None  # the manifest's source, when it has a readable one


def dir_size(d: Path) -> int:
    """Bytes of the regular files directly in d but for the manifest (0 when d cannot be read)."""
    n = 0
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name != MANIFEST and e.is_file(follow_symlinks=False):
                    n += e.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return n
