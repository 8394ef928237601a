"""Models on disk and how they get there: the store, the catalog, pulls and downloads, and one resolver above them.

    from localllm.hub import resolve_model, Store
    resolve_model("qwen2.5-coder:0.5b", pull=False) -> Path    # resolve.py over store.py, catalog.py, names.py
    from localllm.hub.pull import pull
    pull("hf.co/user/repo:Q8_0") -> stored model               # pull.py over hf.py, wheels.py, download.py

Layers, each importing only those below it:
    resolve.py   name or path -> local file (pulling when asked)
    pull.py      a reference -> verified file(s) committed into the store; describe.py reads what a GGUF is
    hf.py, wheels.py, download.py     the sources (hub API, package index, plain HTTP)
    disk.py, progress.py, errors.py   the partial file on disk, progress on stderr, the errors a pull raises
    store.py, catalog.py, names.py    what is stored, what can be pulled, what a name spells; units.py prints sizes
    manifest.py  what a stored model's manifest records, read strictly; the checks its files pass before use

This file imports only the light layers (no HTTP stack): resolving a path or a stored name needs no more.
"""

from .resolve import resolve_model
from .store import (
    DamagedEntry,
    DamagedModelError,
    ModelBusyError,
    ModelNotFoundError,
    ModelNotPulledError,
    Store,
    StoredModel,
    StoreError,
    default_home,
)

__all__ = [
    "DamagedEntry",
    "DamagedModelError",
    "ModelBusyError",
    "ModelNotFoundError",
    "ModelNotPulledError",
    "Store",
    "StoreError",
    "StoredModel",
    "default_home",
    "resolve_model",
]
