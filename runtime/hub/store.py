"""The model store: one directory tree of pulled models, safe for concurrent processes.

    $LOCALLLM_HOME (default $XDG_DATA_HOME/localllm, else ~/.local/share/localllm)
      models/<key>/manifest.json     # a model exists once its directory is there: it is renamed in whole
      models/<key>/<file>.gguf ...   # one file, or every part of a split GGUF
      tmp/<key>/                     # partial downloads and wheels of a pull in progress
      locks/<key>.lock               # flock'd while a pull or rm of that model runs

    Store().scan() -> ([StoredModel], [DamagedEntry]); Store().find(name) -> StoredModel | None
    Store().verify(model) -> None | what is wrong;   Store().remove(name) -> StoredModel | DamagedEntry
    Store().commit(name, staged, files, info) -> StoredModel

<key> is the name made file-safe plus 8 hex digits of its sha256, so names never collide on disk.
Nothing in the store is lost from sight: a directory whose manifest cannot be trusted (manifest.py) is a
DamagedEntry, listed, removable by `rm` and repaired by `pull`; a model's files are opened only when they are
regular files inside its own directory with their recorded size, and, when their identity (inode, mtime) has
changed since the pull, their recorded sha256.
Errors are StoreError (a ValueError) subclasses; unknown names come with close suggestions, damaged models
with the command that repairs them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from . import catalog as catalog_mod
from . import names
from .manifest import MANIFEST, DamagedEntry, ManifestError, StoredModel, dir_size, is_file_name, load


class StoreError(ValueError):
    pass


class ModelNotFoundError(StoreError, LookupError):
    """A name that is neither stored, nor in the catalog, nor a hub reference or a file."""


class ModelNotPulledError(ModelNotFoundError):
    """A name that can be pulled but is not in the store yet."""


class ModelBusyError(StoreError):
    """Another process holds the model's lock (a pull or rm in progress)."""


class DamagedModelError(StoreError):
    """A stored model whose manifest cannot be trusted or whose files are not the ones pulled; the message says
    what is wrong and how to repair it."""


def default_home() -> Path:
    env = os.environ.get("LOCALLLM_HOME")
    if env:
        return Path(env).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "localllm"


def key(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:80]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


_KEY = re.compile(r".*-[0-9a-f]{8}")  # what key() makes: the only non-directories in models/ taken for models


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
    if not is_file_name(name):
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


def _unusable(home: Path) -> str | None:
    """Why `home` cannot hold the store (it or a path above it is a file, a symlink loop, unreadable), else None;
    a home that does not exist yet is usable: the first pull makes it."""
    p = home
    while True:
        try:
            st = os.stat(p)
        except (FileNotFoundError, NotADirectoryError):  # a file above it is found on the way up
            if p.parent == p:
                return None
            p = p.parent
            continue
        except OSError as e:
            return f"{p}: {e.strerror}"
        if not stat.S_ISDIR(st.st_mode):
            return f"{p} is not a directory"
        if p == home and not os.access(p, os.R_OK | os.X_OK):
            return f"{p}: permission denied"
        return None


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


class Store:
    def __init__(self, home: str | os.PathLike | None = None):
        self.home = Path(home).expanduser() if home is not None else default_home()
        self.models_dir = self.home / "models"
        self.tmp_dir = self.home / "tmp"
        self.locks_dir = self.home / "locks"

    def check(self) -> None:
        """Raises StoreError naming the path when the store's directory cannot be one (LOCALLLM_HOME a file...)."""
        for p in (self.home, self.models_dir):
            if why := _unusable(p):
                env = " (LOCALLLM_HOME)" if os.environ.get("LOCALLLM_HOME") else ""
                raise StoreError(f"cannot use the model store {self.home}{env}: {why}")

    # -- reading -------------------------------------------------------------------------------------
    def entry(self, d: Path) -> StoredModel | DamagedEntry:
        """What the store directory d holds: its model, or a DamagedEntry saying what is wrong."""
        if not d.is_dir():
            return DamagedEntry(self._name_of(d), d, f"{d.name} is not a directory")
        raw = None
        try:
            raw = load(d)
            m = StoredModel.from_manifest(d, raw)
        except ManifestError as e:
            name, source = self._name_of(d), None
            if isinstance(raw, dict):  # what can still be read of it names the model and says where it came from
                if isinstance(raw.get("name"), str) and raw["name"].isprintable() and key(raw["name"]) == d.name:
                    name = raw["name"]
                if isinstance(raw.get("source"), str) and raw["source"].isprintable():
                    source = raw["source"]
            return DamagedEntry(name, d, str(e), dir_size(d), source)
        if key(m.name) != d.name:
            return DamagedEntry(self._name_of(d), d, f"{MANIFEST} names another model ({m.name!r})", dir_size(d))
        return m

    @staticmethod
    def _name_of(d: Path) -> str:
        """The name a damaged directory belongs to: the catalog name whose key it is, else the directory's name."""
        cat = _catalog()
        for e in cat.entries.values() if cat else ():
            if key(e.name) == d.name:
                return e.name
        return d.name

    def scan(self) -> tuple[list[StoredModel], list[DamagedEntry]]:
        """Every directory in the store, by name: the models, and the entries whose manifest cannot be trusted."""
        self.check()
        models, damaged = [], []
        if self.models_dir.is_dir():
            for d in self.models_dir.iterdir():
                if d.name.startswith(".") or not (d.is_dir() or _KEY.fullmatch(d.name)):
                    continue
                x = self.entry(d)
                (models if isinstance(x, StoredModel) else damaged).append(x)
        return sorted(models, key=lambda m: m.name), sorted(damaged, key=lambda m: m.name)

    def models(self) -> list[StoredModel]:
        """Every stored model with a trustworthy manifest, by name (scan() has the damaged entries too)."""
        return self.scan()[0]

    def read(self, name: str) -> StoredModel | DamagedEntry | None:
        """What is stored under exactly `name`: its model, a DamagedEntry, or None."""
        self.check()
        d = self.models_dir / key(name)
        if not os.path.lexists(d):
            return None
        x = self.entry(d)
        if isinstance(x, DamagedEntry) and x.name == d.name:
            x = dataclasses.replace(x, name=name)  # its directory is name's: that is its name
        return x

    def get(self, name: str) -> StoredModel | None:
        """The model stored under exactly `name` (None when there is none, or it is damaged)."""
        m = self.read(name)
        return m if isinstance(m, StoredModel) else None

    def lookup(self, name: str) -> StoredModel | DamagedEntry | None:
        """What `name` refers to: its store name, catalog alias, hub spelling, source URL or file stem; a damaged
        entry also by the directory name `localllm list` shows for it."""
        spellings = [name]
        cat = _catalog()
        if cat and (e := cat.get(name)):
            spellings.append(e.name)
        if ref := names.parse_ref(name):
            spellings.append(ref.name)
        for s in spellings:
            if (m := self.read(s)) is not None:
                return m
        low = name.strip().lower()
        models, damaged = self.scan()
        for m in models:
            if m.source == name or m.name.lower() == low or names.stem(m.files[0]).lower() == low:
                return m
        for x in damaged:
            if x.name.lower() == low or x.dir.name == name:
                return x
        return None

    def find(self, name: str) -> StoredModel | None:
        """The model `name` refers to (see lookup), or None; DamagedModelError when its manifest is damaged."""
        m = self.lookup(name)
        if isinstance(m, DamagedEntry):
            raise DamagedModelError(damaged_message(m.name, m.problem, m.source))
        return m

    def verify(self, m: StoredModel, *, locked: bool = False) -> str | None:
        """None when m's files are the ones pulled, else what is wrong. Costs a stat per file; a file whose
        identity changed since the pull (replaced, copied back) is hashed against its recorded sha256 and, when it
        matches, its new identity recorded (under m's lock: locked=True when the caller holds it)."""
        if why := m.damage():
            return why
        changed = m.changed()
        if m.identity is None or not changed:
            return None
        try:
            now = m.with_identity()  # taken before hashing: the identity of the bytes hashed
        except OSError as e:
            return f"cannot read {e.filename}: {e.strerror}"
        for i in changed:
            try:
                digest = sha256_of(m.dir / m.files[i])
            except OSError as e:
                return f"cannot read {m.files[i]}: {e.strerror}"
            if digest != m.sha256[i]:
                return f"{m.files[i]} is not the file that was pulled (replaced since: its sha256 differs)"
        hold = contextlib.nullcontext() if locked else self.lock(m.name, wait=False)
        with contextlib.suppress(OSError, StoreError), hold:  # busy or read-only: checked again next time
            if self.entry(m.dir) == m and not now.changed():  # nothing was replaced meanwhile
                self._write_manifest(m.dir, now)
        return None

    # -- writing -------------------------------------------------------------------------------------
    def tmp(self, name: str) -> Path:
        self.check()
        d = self.tmp_dir / key(name)
        d.mkdir(parents=True, exist_ok=True)
        return d

    @contextlib.contextmanager
    def lock(self, name: str, *, wait: bool = True, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Holds `name`'s lock; waits for another holder (calling on_wait(holder) first) or raises ModelBusyError."""
        self.check()
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
            dir=stage,
            files=tuple(files),
            sizes=tuple((stage / f).stat().st_size for f in files),
            sha256=tuple(info["sha256"]),
            source=info.get("source", ""),
            pulled_at=time.time(),
            architecture=info.get("architecture"),
            parameters=info.get("parameters"),
            quant=info.get("quant"),
            context_length=info.get("context_length"),
        ).with_identity()  # renames keep inode and mtime: what the stored files are from now on
        model = dataclasses.replace(model, dir=self.models_dir / key(name))
        self._write_manifest(stage, model)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        # replacing a model: one atomic swap where the system has it, so a crash leaves the old or the new
        # model in place, never none; elsewhere two renames (a crash between them loses the old model)
        if not (os.path.lexists(model.dir) and _exchange(stage, model.dir)):
            if os.path.lexists(model.dir):
                os.replace(model.dir, tmp / f"old-{os.getpid()}")
            os.replace(stage, model.dir)
        _fsync_dir(self.models_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        return model

    def _write_manifest(self, d: Path, m: StoredModel) -> None:
        """d/manifest.json holding m, replaced atomically and synced."""
        tmp = d / f".{MANIFEST}.{os.getpid()}"
        try:
            with open(tmp, "w") as f:
                json.dump(m.manifest(), f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, d / MANIFEST)
        finally:
            tmp.unlink(missing_ok=True)
        _fsync_dir(d)

    def remove(self, name: str) -> StoredModel | DamagedEntry:
        """Deletes a stored model, damaged or not, with all its files (and any partial pull of it); raises
        ModelNotFoundError or ModelBusyError."""
        m = self.lookup(name)
        if m is None:
            models, damaged = self.scan()
            known = [x.name for x in models] + [x.name for x in damaged]
            raise ModelNotFoundError(unknown_message(name, known, with_catalog=False))
        with self.lock(m.name, wait=False):
            gone = self.tmp_dir / f"{m.dir.name}.removing-{os.getpid()}"
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
            os.replace(m.dir, gone)
            if gone.is_dir() and not gone.is_symlink():
                shutil.rmtree(gone, ignore_errors=True)
            else:
                gone.unlink(missing_ok=True)
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


def repair_command(name: str, source: str | None = None) -> str | None:
    """The command that pulls the model stored as `name` again (from `source`, its manifest's, when the name
    alone is not pullable); None when nothing says where it came from."""
    cat = _catalog()
    ref = names.parse_ref(name)
    if (cat and cat.get(name)) or (ref and ref.name == name):
        return f"localllm pull {shlex.quote(name)}"
    if source and source.startswith(("https://", "http://", "/")):
        return f"localllm pull {shlex.quote(source)} --name {shlex.quote(name)}"
    if source and source.startswith("hf.co/") and "@" in source:
        return f"localllm pull {shlex.quote(source.rpartition('@')[0])} --name {shlex.quote(name)}"
    return None


def repair_hint(name: str, source: str | None = None) -> str:
    """What to do about the damaged model `name`: `run `localllm pull ...` to repair it or ...`."""
    rm = f"localllm rm {shlex.quote(name)}"
    if cmd := repair_command(name, source):
        return f"run `{cmd}` to repair it or `{rm}` to remove it"
    return f"remove it with `{rm}` and pull it again"


def damaged_message(name: str, problem: str, source: str | None = None) -> str:
    return f"stored model {name} is damaged ({problem}): {repair_hint(name, source)}"
