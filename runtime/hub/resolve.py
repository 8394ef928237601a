"""The one resolver of model names: a path, a store name, or (when asked) something to pull -> a local GGUF file.

    resolve_model("./model.gguf") -> Path             # an existing file, as is (~ expanded)
    resolve_model("qwen2.5-coder:0.5b") -> Path       # the stored file (first part of a split model)
    resolve_model("qwen2.5-coder:0.5b", pull=True)    # pulled first when it is not stored yet

It sits above the store and the pull: the store never pulls, the pull never resolves.
A stored model is returned only when its manifest is sound and its files are the ones pulled (Store.verify:
inside its directory, the recorded size, and the recorded sha256 when the file's identity changed since).
Errors are StoreError (a ValueError): ModelNotFoundError (with close suggestions), ModelNotPulledError
(pullable, saying how), DamagedModelError (saying how to repair); with pull=True also PullError.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from . import catalog, names
from .store import DamagedModelError, ModelNotFoundError, ModelNotPulledError, Store, damaged_message, unknown_message


def _not_a_file(name: str, p: Path) -> str:
    """Why the path `name` is not a model file: missing, a directory, a device / FIFO / socket, a bad symlink."""
    if not p.is_symlink() and not p.exists():
        return f"no such file: {name}"
    try:
        mode = p.stat().st_mode
    except OSError as e:  # a dangling symlink or a symlink loop
        return f"{name}: cannot open the model file: {e.strerror}"
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
    return f"{name} is {kind}: give the path of a .gguf file or a model name from `localllm list`"


def resolve_model(name_or_path: str | os.PathLike, pull: bool = False) -> Path:
    """The GGUF file for a path, a store name, or (with pull=True) a catalog name, hub reference or URL to pull."""
    name_or_path = os.fspath(name_or_path)
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    if names.looks_like_path(name_or_path) or p.exists() or p.is_symlink():
        raise ModelNotFoundError(_not_a_file(name_or_path, p))
    store = Store()
    pullable = (
        catalog.load().get(name_or_path) is not None
        or names.parse_ref(name_or_path) is not None
        or name_or_path.startswith(("https://", "http://"))
    )
    try:
        m = store.find(name_or_path)  # DamagedModelError for a damaged manifest
        if m is not None and (why := store.verify(m)):
            raise DamagedModelError(damaged_message(m.name, why, m.source))
    except DamagedModelError:
        if not (pull and pullable):
            raise
        m = None  # pulling repairs it
    if m is not None:
        return m.path
    if not pullable:
        raise ModelNotFoundError(unknown_message(name_or_path, [x.name for x in store.models()]))
    if pull:
        from .pull import pull as do_pull  # here, not at the top: it brings the HTTP stack, which paths do not need

        return do_pull(name_or_path, store=store).path
    raise ModelNotPulledError(f"model {name_or_path!r} is not in the store yet: run `localllm pull {name_or_path}`")
