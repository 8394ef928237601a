"""A request's output as its client sees it: chunks arrive through a queue from the engine thread, read by a
blocking iterator or an async one; closing it cancels the request.

    stream = engine.submit(ids, params)      # a RequestStream
    for chunk in stream: ...                 # blocks for each chunk; ends after the chunk with finish_reason
    async for chunk in stream: ...           # the same chunks, awaiting instead of blocking (one loop at a time)
    stream.close()                           # cancels the request if it is still going (its blocks are freed at
                                             # the engine's next step); also done when the stream is collected

Contract: the engine thread calls _deliver() with each Chunk in order, then nothing after a chunk carrying a
finish_reason; or once with an Exception, which the consumer's next read raises. A stream is read by one
consumer.

An asyncio reader waiting for a chunk is woken through its loop (call_soon_threadsafe: about 10 us of the engine
thread each, Zen 3, a write to the loop's wake-up pipe and a fight for the GIL with the woken loop). The engine
delivers a step's chunks inside `with wakes:` (Wakes), which sends the wake-ups after the last chunk, one per loop:
serve's 16 streams on one loop cost one wake-up a step, not 16.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from .output import Chunk

if TYPE_CHECKING:
    import asyncio


class Wakes:
    """Wake-ups of asyncio readers held while the engine thread delivers a step's chunks (`with wakes:`), then sent
    one per event loop. Outside the block, or from another thread, a wake-up goes at once."""

    def __init__(self):
        self._held: dict | None = None  # loop -> the futures to wake there, while the owner holds them
        self._owner: int | None = None

    def __enter__(self) -> Wakes:
        if self._held is not None:  # a nested block would lose the outer one's wake-ups
            raise RuntimeError("Wakes is not re-entrant")
        self._held, self._owner = {}, threading.get_ident()
        return self

    def __exit__(self, *exc) -> None:
        held, self._held, self._owner = self._held, None, None
        failed = None
        for loop, futs in held.items():  # every loop is sent its wake-ups, whatever another's raised
            try:
                _send(loop, futs)
            except Exception as e:
                failed = failed or e
        if failed is not None:
            raise failed

    def wake(self, loop: asyncio.AbstractEventLoop, fut: asyncio.Future) -> None:
        if self._held is not None and threading.get_ident() == self._owner:
            self._held.setdefault(loop, []).append(fut)
        else:
            _send(loop, [fut])


class RequestStream:
    def __init__(self, request_id: Hashable, cancel: Callable[[Hashable], None], wakes: Wakes | None = None):
        """wakes: the engine's (its wake-ups are then sent once per step and loop), or None: each at once."""
        self.request_id = request_id
        self._cancel = cancel
        self._wakes = wakes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future] | None = None
        self._finished = False  # the last chunk (or an error) was read
        self._ended = False  # the engine delivered the last chunk (or an error)
        self._closed = False

    # -- engine side ----------------------------------------------------------------------------------
    def _deliver(self, item: Chunk | BaseException) -> None:
        if isinstance(item, BaseException) or item.finish_reason is not None:
            self._ended = True
        self._queue.put(item)
        with self._lock:
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            loop, fut = waiter
            if self._wakes is not None:
                self._wakes.wake(loop, fut)
            else:
                _send(loop, [fut])

    # -- client side ----------------------------------------------------------------------------------
    def _take(self, item: Chunk | BaseException) -> Chunk:
        if isinstance(item, BaseException):
            self._finished = True
            raise item
        if item.finish_reason is not None:
            self._finished = True
        return item

    def __iter__(self) -> RequestStream:
        return self

    def __next__(self) -> Chunk:
        if self._finished:
            raise StopIteration
        return self._take(self._queue.get())

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> Chunk:
        while not self._finished:
            try:
                return self._take(self._queue.get_nowait())
            except queue.Empty:
                pass
            import asyncio  # here, in a running loop, already loaded (17 ms a synchronous caller does not pay)

            loop = asyncio.get_running_loop()
            fut = loop.create_future()
            with self._lock:
                if not self._queue.empty():
                    continue
                self._waiter = (loop, fut)
            await fut
        raise StopAsyncIteration

    def close(self) -> None:
        """Cancels the request unless it already ended; idempotent, and cheap when nothing is left to do."""
        if self._closed:
            return
        self._closed = True
        if not self._ended:
            self._cancel(self.request_id)

    async def aclose(self) -> None:
        self.close()

    def __enter__(self) -> RequestStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _send(loop: asyncio.AbstractEventLoop, futs: list) -> None:
    with contextlib.suppress(RuntimeError):  # the consumer's loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_wake, futs)


def _wake(futs: list) -> None:
    for fut in futs:
        if not fut.done():
            fut.set_result(None)
