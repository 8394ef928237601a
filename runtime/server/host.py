"""Which models the server holds: the default one, loaded at start, and others loaded on demand when a request
names them (max_models resident at once, the least recently used idle one unloaded to make room; a model with
requests in flight is never unloaded under them). A model loaded on demand is unloaded once it has been idle for
its keep-alive (Ollama's keep_alive: 5 minutes unless a request says otherwise); the default model stays.

    host = ModelHost("qwen2.5-coder:0.5b", llm_kwargs={"n_threads": 2, "parallel": 4}, max_models=1)
    await host.start()                          # loads the default model (health: "loading" until then)
    lease = await host.acquire("qwen2.5-coder:0.5b")   # APIError 404 naming an unknown model, 503 when busy
    lease.keep_alive = 30.0                     # optional: idle seconds before unloading (None: never, 0: at once)
    lease.name, lease.llm; ...; lease.release()       # or return lease.stream(body, closing=...): released when it is over
    host.models()                               # the store's models, for /v1/models and /api/tags
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from fastapi.responses import StreamingResponse

from ..engine.drafting.draft_model import DraftMismatchError
from ..hub import DamagedModelError, ModelNotFoundError, ModelNotPulledError, Store, resolve_model
from ..llm import LLM
from ..model.gguf import GGUFFile
from .errors import APIError

log = logging.getLogger("localllm.serve")

DEFAULT_KEEP_ALIVE = 300.0  # seconds, Ollama's default


class _Loaded:
    def __init__(self, name: str, path: Path, llm: LLM, pinned: bool):
        self.name, self.path, self.llm = name, path, llm
        self.pinned = pinned  # the default model: never unloaded for being idle
        self.in_flight = 0
        self.created = int(time.time())
        self.keep_alive: float | None = DEFAULT_KEEP_ALIVE  # idle seconds before unloading; None: never
        self.expires_at: float | None = None  # time.time() of the unload an idle model is due for
        self.timer: asyncio.TimerHandle | None = None


_UNSET = object()


class Lease:
    """One request's hold on a loaded model: the model is not unloaded while a lease on it is live.
    keep_alive: set it to give the model that idle time (seconds, None: never) once the last lease is released."""

    def __init__(self, entry: _Loaded, idle: Callable[[_Loaded], None]):
        self._entry, self._idle = entry, idle
        self.name, self.llm = entry.name, entry.llm
        self.keep_alive = _UNSET
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            if self.keep_alive is not _UNSET:
                self._entry.keep_alive = self.keep_alive
            self._entry.in_flight -= 1
            if self._entry.in_flight == 0:
                self._idle(self._entry)

    def stream(self, body: AsyncIterator, media_type: str, closing: tuple = (), **kw) -> StreamingResponse:
        """A streaming response of body that holds this lease until the response is over, however it ends: sent
        whole, failed, or the client gone before the body was first read (an async generator that never started
        runs no finally, so a release inside one would leak the lease). closing: the async generators body reads
        from (the engine's chunks), closed then too, which cancels the request in the engine at once."""
        return _LeasedStream(self, (body, *closing), body, media_type=media_type, **kw)

    def sse(self, events: AsyncIterator[str], closing: tuple = ()) -> StreamingResponse:
        """stream() of server-sent events (OpenAI, Anthropic, Responses, llama.cpp): not to be cached on the way."""
        return self.stream(events, "text/event-stream", closing, headers={"Cache-Control": "no-cache"})


class _LeasedStream(StreamingResponse):
    def __init__(self, lease: Lease, gens: tuple, body: AsyncIterator, **kw):
        super().__init__(body, **kw)
        self._lease, self._gens = lease, gens

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                for g in self._gens:
                    await g.aclose()
            finally:
                self._lease.release()


class ModelHost:
    def __init__(
        self,
        default: str,
        llm_kwargs: dict | None = None,
        max_models: int = 1,
        max_queue: int = 64,
        default_path: str | os.PathLike | None = None,
        fallback: bool = False,
    ):
        """default: the model requests get when they name none; default_path: its file when the caller resolved
        the name already (serve does, to refuse an unknown model before the server starts). fallback: a request
        naming a model that is not in the store (editor plugins send fixed names such as "gpt-3.5-turbo") is served
        by the default model, as llama.cpp's server does, its response naming the default; without it, a 404."""
        self.default = default
        self.fallback = fallback
        self.llm_kwargs = dict(llm_kwargs or {})
        self.max_models = max(1, int(max_models))
        self.max_queue = max_queue  # requests in flight per model beyond which new ones get 503
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()  # least recently used first
        self._lock = asyncio.Lock()
        self._default_path: Path | None = Path(default_path) if default_path is not None else None
        self._closing: set[asyncio.Task] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # the server's: keep-alive timers run on it
        self.state = "loading"  # "loading" until the default model is loaded, then "ok"; "error" if it failed
        self.error: str | None = None

    async def start(self) -> None:
        try:
            await self._load(self.default)
            self.state = "ok"
        except Exception as e:
            self.state, self.error = "error", str(e)
            raise

    def resident(self) -> list[_Loaded]:
        return list(self._loaded.values())

    async def acquire(self, name: str | None) -> Lease:
        self._loop = asyncio.get_running_loop()
        entry = await self._get(name or self.default)
        if entry.in_flight >= self.max_queue:
            raise APIError(
                503,
                f"{entry.name}: {entry.in_flight} requests are in flight; retry shortly",
                headers={"Retry-After": "1"},
            )
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = entry.expires_at = None
        entry.in_flight += 1
        return Lease(entry, self._idle)

    def _idle(self, entry: _Loaded) -> None:
        """The last request on entry ended: it is unloaded after its keep-alive unless one comes first."""
        if entry.pinned or entry.keep_alive is None or self._loaded.get(entry.name) is not entry or not self._loop:
            return
        entry.expires_at = time.time() + entry.keep_alive
        entry.timer = self._loop.call_later(entry.keep_alive, self._expire, entry)

    def _expire(self, entry: _Loaded) -> None:
        entry.timer = None
        if entry.in_flight == 0 and self._loaded.get(entry.name) is entry:
            del self._loaded[entry.name]
            task = self._loop.create_task(asyncio.to_thread(entry.llm.close))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _get(self, name: str) -> _Loaded:
        key = self._key(name)
        entry = self._loaded.get(key)
        if entry is not None:
            self._loaded.move_to_end(key)
            return entry
        async with self._lock:
            entry = self._loaded.get(key)
            return entry if entry is not None else await self._load(name)

    def _key(self, name: str) -> str:
        """Requests may name the default model by its store name, its file name or its path."""
        for key, entry in self._loaded.items():
            if name in (key, entry.path.name, entry.path.stem, str(entry.path)):
                return key
        return name

    async def _load(self, name: str) -> _Loaded:
        if name == self.default and self._default_path is not None:
            return await self._open(name, self._default_path)
        try:
            path = Path(resolve_model(name))
        except DamagedModelError as e:
            raise APIError(400, str(e), param="model", code="model_damaged") from None
        except (ModelNotFoundError, ModelNotPulledError) as e:
            if not self.fallback or name == self.default:
                raise APIError(404, f"model {name!r} not found: {e}", param="model", code="model_not_found") from None
            log.info("model %r is not in the store: %s serves it", name, self.default)
            return self._loaded.get(self._key(self.default)) or await self._load(self.default)
        except (ValueError, OSError) as e:
            raise APIError(404, f"model {name!r} not found: {e}", param="model", code="model_not_found") from None
        if name == self.default:
            self._default_path = path
        return await self._open(name, path)

    async def _open(self, name: str, path: Path) -> _Loaded:
        try:
            llm = await asyncio.to_thread(LLM, path, **self.llm_kwargs)
        except DraftMismatchError as e:
            if path == self._default_path:
                raise  # the model the draft model was named for: the server does not start
            # another model the draft cannot serve (another vocabulary) drafts by n-grams instead
            log.warning("%s; %s drafts by n-grams", e, name)
            llm = await asyncio.to_thread(LLM, path, **{**self.llm_kwargs, "speculative": "ngram"})
        entry = _Loaded(name, path, llm, pinned=path == self._default_path)
        self._loaded[name] = entry
        while len(self._loaded) > self.max_models:
            idle = next((k for k, e in self._loaded.items() if e.in_flight == 0 and k != name), None)
            if idle is None:
                break
            gone = self._loaded.pop(idle)
            if gone.timer is not None:
                gone.timer.cancel()
            await asyncio.to_thread(gone.llm.close)
        return entry

    def models(self) -> list[dict]:
        """Every model in the store (and the resident ones that are files outside it): name, path, size, the
        context the server gives it and the one it was trained for."""
        out, seen = [], set()
        stored = []
        with contextlib.suppress(ValueError, OSError):
            stored = [(m.name, Path(m.path)) for m in Store().models()]
        for name, path in [*((e.name, e.path) for e in self._loaded.values()), *stored]:
            if name in seen:
                continue
            seen.add(name)
            loaded = self._loaded.get(name)
            out.append(
                {
                    "name": name,
                    "path": str(path),
                    "size": _size(path),
                    "context_length": loaded.llm.ctx_size if loaded else self.llm_kwargs.get("ctx_size", 4096),
                    "trained_context_length": _trained_context(path),
                    "created": loaded.created if loaded else int(_mtime(path)),
                    "loaded": loaded is not None,
                    "expires_at": loaded.expires_at if loaded else None,
                }
            )
        return out

    def close(self) -> None:
        for entry in self._loaded.values():
            if entry.timer is not None:
                entry.timer.cancel()
            entry.llm.close()
        self._loaded.clear()


def _size(path: Path) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _mtime(path: Path) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        return 0.0


def _trained_context(path: Path) -> int | None:
    try:
        with GGUFFile(path) as f:
            value = f.arch_value("context_length")
            return int(value) if value is not None else None
    except (ValueError, OSError, KeyError):
        return None
