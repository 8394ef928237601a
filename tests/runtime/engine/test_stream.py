"""A request's stream (engine/stream.py): the wake-ups of asyncio readers held inside `with wakes:` go after the
block, one per event loop, in delivery order; outside it, or from another thread, at once."""

from __future__ import annotations

import threading

import pytest
from localllm.engine.output import Chunk
from localllm.engine.stream import RequestStream, Wakes


class Loop:
    """An event loop's call_soon_threadsafe, recorded."""

    def __init__(self):
        self.calls: list = []

    def call_soon_threadsafe(self, fn, arg):
        self.calls.append(arg)
        fn(arg)


class Future:
    def __init__(self):
        self.result = None

    def done(self) -> bool:
        return self.result is not None

    def set_result(self, value) -> None:
        assert self.result is None
        self.result = "woken"


def waiting(loop: Loop, wakes: Wakes | None) -> tuple[RequestStream, Future]:
    """A stream whose reader on `loop` waits for a chunk (as __anext__ leaves it)."""
    stream, fut = RequestStream(0, lambda _: None, wakes), Future()
    stream._waiter = (loop, fut)
    return stream, fut


def test_a_steps_wake_ups_go_after_it_one_per_loop():
    a, b, wakes = Loop(), Loop(), Wakes()
    (s1, f1), (s2, f2), (s3, f3) = waiting(a, wakes), waiting(b, wakes), waiting(a, wakes)
    with wakes:
        for s in (s1, s2, s3):
            s._deliver(Chunk("x", [1]))
        assert not a.calls and not b.calls and not f1.done()  # held
    assert a.calls == [[f1, f3]] and b.calls == [[f2]]
    assert f1.done() and f2.done() and f3.done()
    assert [next(s).text for s in (s1, s2, s3)] == ["x"] * 3
    s4, f4 = waiting(a, wakes)
    s4._deliver(Chunk("y", [2]))  # outside the block: at once
    assert a.calls[-1] == [f4] and f4.done()


def test_a_wake_up_from_another_thread_or_without_wakes_goes_at_once():
    a, wakes = Loop(), Wakes()
    s1, f1 = waiting(a, wakes)
    s2, f2 = waiting(a, None)
    with wakes:
        t = threading.Thread(target=s1._deliver, args=(Chunk("x", [1]),))
        t.start()
        t.join()
        s2._deliver(Chunk("y", [2]))
        assert a.calls == [[f1], [f2]]
    assert a.calls == [[f1], [f2]]  # nothing was held


def test_a_nested_block_is_refused_and_every_loop_is_sent_its_wake_ups():
    a, wakes = Loop(), Wakes()

    class Closing(Loop):
        def call_soon_threadsafe(self, fn, arg):
            raise OSError("the loop's wake-up pipe is gone")

    (s1, _), (s2, f2) = waiting(Closing(), wakes), waiting(a, wakes)
    with pytest.raises(OSError), wakes:
        with pytest.raises(RuntimeError, match="re-entrant"), wakes:
            pass
        s1._deliver(Chunk("x", [1]))
        s2._deliver(Chunk("y", [2]))
    assert f2.done()  # the loop after the one that failed still got its wake-up


def test_wake_ups_held_by_a_block_that_raised_still_go():
    a, wakes = Loop(), Wakes()
    s, f = waiting(a, wakes)
    try:
        with wakes:
            s._deliver(Chunk("x", [1]))
            raise KeyError("the step failed")
    except KeyError:
        pass
    assert f.done()
