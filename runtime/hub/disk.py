"""A download on disk: the partial file and its sidecar pin, writes that turn a full disk into one clear error.

save_pin(partial, make_pin(url, size, sha256)); load_pin(partial) -> dict | None   # what the partial bytes are
write(f, chunk, partial); sync(f, partial)     # DiskFullError (partial deleted) or PullError, never a bare OSError
check_space(directory, need); discard(partial)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from pathlib import Path

from .errors import DiskFullError, PullError
from .units import format_size


def _sidecar(partial: Path) -> Path:
    return partial.with_name(partial.name + ".json")


def discard(partial: Path) -> None:
    for p in (partial, _sidecar(partial)):
        p.unlink(missing_ok=True)


def make_pin(url: str, size: int | None, sha256: str | None) -> dict:
    # what the partial bytes are: content when its hash is known, else the URL (plus the server's ETag)
    return {"sha256": sha256, "size": size} if sha256 else {"url": url, "size": size}


def load_pin(partial: Path) -> dict | None:
    try:
        pin = json.loads(_sidecar(partial).read_text())
    except (OSError, ValueError):
        return None
    return pin if isinstance(pin, dict) else None


def save_pin(partial: Path, pin: dict) -> None:
    tmp = _sidecar(partial).with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(pin))
        os.replace(tmp, _sidecar(partial))
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise _write_error(e, partial, _sidecar(partial)) from None


def check_space(directory: Path, need: int) -> None:
    """Raises DiskFullError when `directory`'s file system has fewer than `need` bytes free."""
    free = shutil.disk_usage(directory).free
    if need > free:
        raise DiskFullError(
            f"not enough disk space in {directory}: {format_size(need)} needed, {format_size(free)} free"
        )


def _write_error(e: OSError, path: Path, written: Path | None = None) -> PullError:
    """A failed write to `written` (default `path`) as DiskFullError (after deleting `path`) or PullError."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        discard(path)
        return DiskFullError(
            f"disk full while writing {path.name} in {path.parent}; the partial file "
            f"was deleted: free some space and pull again"
        )
    return PullError(f"cannot write {written or path}: {e.strerror or e}")


def _close(f) -> None:
    with contextlib.suppress(OSError):  # closing flushes again, and fails again
        f.close()


def write(f, data: bytes, path: Path) -> None:
    """f.write(data), turning ENOSPC into DiskFullError (after deleting `path`) and other errors into PullError."""
    try:
        f.write(data)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            _close(f)
        raise _write_error(e, path) from None


def sync(f, path: Path) -> None:
    """f.flush() and os.fsync, with write()'s errors (buffered bytes can meet a full disk here too)."""
    try:
        f.flush()
        os.fsync(f.fileno())
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            _close(f)
        raise _write_error(e, path) from None
