"""The model store: one directory tree of pulled models, safe for concurrent processes.

    $LOCALLLM_HOME (default $XDG_DATA_HOME/localllm, else ~/.local/share/localllm)
      models/<key>/manifest.json     # a model exists once its directory is there: it is renamed in whole
      models/<key>/<file>.gguf ...   # one file, or every part of a split GGUF
      tmp/<key>/                     # partial downloads and wheels of a pull in progress
      locks/<key>.lock               # flock'd while a pull or rm of that model runs

    Store().models() -> [StoredModel]; Store().find(name) -> StoredModel | None
    Store().commit(name, staged, files, info) -> StoredModel; Store().remove(name) -> StoredModel

<key> is the name made file-safe plus 8 hex digits of its sha256, so names never collide on disk.
Errors are StoreError (a ValueError) subclasses; unknown names come with close suggestions.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from . import catalog as catalog_mod
from . import names


class StoreError(ValueError):
    pass


class ModelNotFoundError(StoreError, LookupError):
    """A name that is neither stored, nor in the catalog, nor a hub reference or a file."""


class ModelNotPulledError(ModelNotFoundError):
    """A name that can be pulled but is not in the store yet."""


class ModelBusyError(StoreError):
    """Another process holds the model's lock (a pull or rm in progress)."""


class DamagedModelError(StoreError):
    """A stored model whose files are missing or have the wrong size."""


def default_home() -> Path:
    env = os.environ.get("LOCALLLM_HOME")
    if env:
        return Path(env).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "localllm"


def key(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class StoredModel:
    name: str
    dir: Path
    files: tuple[str, ...]  # file names in dir, in split order
    sizes: tuple[int, ...]
    sha256: tuple[str, ...]
    source: str  # where it came from: a URL, hf.co/repo/file@revision, a package list or a local path
    pulled_at: float  # unix time
    architecture: str | None
    parameters: int | None
    quant: str | None
    context_length: int | None

    @property
    def path(self) -> Path:
        return self.dir / self.files[0]

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def damage(self) -> str | None:
        """None when every file is there with its recorded size, else what is wrong."""
        for f, n in zip(self.files, self.sizes):
            try:
                got = (self.dir / f).stat().st_size
            except OSError:
                return f"{f} is missing"
            if got != n:
                return f"{f} has {got} bytes, expected {n}"
        return None

    def manifest(self) -> dict:
        return {
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

    @classmethod
    def from_manifest(cls, d: Path, m: dict) -> StoredModel:
        return cls(
            name=m["name"],
            dir=d,
            files=tuple(m["files"]),
            sizes=tuple(m["sizes"]),
            sha256=tuple(m["sha256"]),
            source=m.get("source", ""),
            pulled_at=float(m.get("pulled_at", 0)),
            architecture=m.get("architecture"),
            parameters=m.get("parameters"),
            quant=m.get("quant"),
            context_length=m.get("context_length"),
        )


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swaps two existing paths (Linux renameat2 RENAME_EXCHANGE); False where that is not
    available (other systems, old kernels, file systems without it), having changed nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: not supported here
        return False
    raise OSError(err, os.strerror(err), str(a))


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def safe_file_name(name: str) -> str:
    """`name` when it can be a file in a model directory, else StoreError (telling the user to pass --name)."""
    ok = (
        isinstance(name, str)
        and name not in ("", ".", "..", "manifest.json")
        and not any(c in name for c in "/\\\0")
        and Path(name).name == name
        and len(name.encode("utf-8", "surrogateescape")) <= 200
    )
    if not ok:
        raise StoreError(
            f"{name!r} cannot be the name of a stored file: pass --name NAME to store the model "
            f"under a name of your choosing"
        )
    return name


def _catalog() -> catalog_mod.Catalog | None:
    try:
        return catalog_mod.load()
    except catalog_mod.CatalogError:
        return None


class Store:
    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.models_dir = self.home / "models"
        self.tmp_dir = self.home / "tmp"
        self.locks_dir = self.home / "locks"

    # -- reading -------------------------------------------------------------------------------------
    def models(self) -> list[StoredModel]:
        """Every stored model, by name; directories without a readable manifest are skipped."""
        out = []
        if self.models_dir.is_dir():
            for d in self.models_dir.iterdir():
                try:
                    out.append(StoredModel.from_manifest(d, json.loads((d / "manifest.json").read_text())))
                except (OSError, ValueError, KeyError, TypeError):
                    continue
        return sorted(out, key=lambda m: m.name)

    def get(self, name: str) -> StoredModel | None:
        """The model stored under exactly `name`."""
        d = self.models_dir / key(name)
        try:
            m = StoredModel.from_manifest(d, json.loads((d / "manifest.json").read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return m if m.name == name else None

    def find(self, name: str) -> StoredModel | None:
        """The model `name` refers to: its store name, catalog alias, hub spelling, source URL or file stem."""
        spellings = [name]
        cat = _catalog()
        if cat and (e := cat.get(name)):
            spellings.append(e.name)
        if ref := names.parse_ref(name):
            spellings.append(ref.name)
        for s in spellings:
            if m := self.get(s):
                return m
        low = name.strip().lower()
        for m in self.models():
            if m.source == name or m.name.lower() == low or names.stem(m.files[0]).lower() == low:
                return m
        return None

    # -- writing -------------------------------------------------------------------------------------
    def tmp(self, name: str) -> Path:
        d = self.tmp_dir / key(name)
        d.mkdir(parents=True, exist_ok=True)
        return d

    @contextlib.contextmanager
    def lock(self, name: str, *, wait: bool = True, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Holds `name`'s lock; waits for another holder (calling on_wait(holder) first) or raises ModelBusyError."""
        self.locks_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.locks_dir / f"{key(name)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
                if not wait:
                    raise ModelBusyError(
                        f"{name} is in use by another localllm process (pid {holder}): a pull or rm is in progress"
                    ) from None
                if on_wait:
                    on_wait(holder)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield
        finally:
            os.close(fd)

    def commit(self, name: str, staged: list[Path], files: list[str], info: dict) -> StoredModel:
        """Moves verified files (staged in tmp, in split order) into the store as `name`; call under lock(name).

        info: sha256 (list), source, architecture, parameters, quant, context_length.
        Raises StoreError, before touching anything, when a file name could escape or clobber the model directory.
        """
        for f in files:
            safe_file_name(f)
        if len(set(files)) != len(files) or len(files) != len(staged):
            raise StoreError(f"cannot store {name}: file names {files} for {len(staged)} staged file(s)")
        tmp = self.tmp(name)
        stage = tmp / "model"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        for src, f in zip(staged, files):
            os.replace(src, stage / f)
        model = StoredModel(
            name=name,
            dir=self.models_dir / key(name),
            files=tuple(files),
            sizes=tuple((stage / f).stat().st_size for f in files),
            sha256=tuple(info["sha256"]),
            source=info.get("source", ""),
            pulled_at=time.time(),
            architecture=info.get("architecture"),
            parameters=info.get("parameters"),
            quant=info.get("quant"),
            context_length=info.get("context_length"),
        )
        with open(stage / "manifest.json", "w") as f:
            json.dump(model.manifest(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(stage)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        # replacing a model: one atomic swap where the system has it, so a crash leaves the old or the new
        # model in place, never none; elsewhere two renames (a crash between them loses the old model)
        if not (model.dir.exists() and _exchange(stage, model.dir)):
            if model.dir.exists():
                os.replace(model.dir, tmp / f"old-{os.getpid()}")
            os.replace(stage, model.dir)
        _fsync_dir(self.models_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        return model

    def remove(self, name: str) -> StoredModel:
        """Deletes a stored model (and any partial pull of it); raises ModelNotFoundError or ModelBusyError."""
        m = self.find(name)
        if m is None:
            raise ModelNotFoundError(unknown_message(name, [x.name for x in self.models()], with_catalog=False))
        with self.lock(m.name, wait=False):
            gone = self.tmp_dir / f"{key(m.name)}.removing-{os.getpid()}"
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
            os.replace(m.dir, gone)
            shutil.rmtree(gone, ignore_errors=True)
            shutil.rmtree(self.tmp_dir / key(m.name), ignore_errors=True)
        return m


def unknown_message(name: str, stored: list[str], with_catalog: bool = True) -> str:
    cat = _catalog() if with_catalog else None
    close = cat.suggest(name, extra=stored) if cat else difflib.get_close_matches(name, stored, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    where = "the store or the catalog" if with_catalog else "the store"
    return (
        f"unknown model {name!r}: not in {where}{hint} (`localllm list` shows the store, "
        f"`localllm list --catalog` the catalog)"
    )
