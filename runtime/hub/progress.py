"""Progress of a pull, on stderr: a redrawn bar (size, speed, ETA) on a TTY; plain lines otherwise.

    p = Progress()                 # quiet=True: nothing but warn()
    p.message("pulling qwen2.5-coder:0.5b")
    p.begin("model.gguf", total=491_400_064, done=0)   # total None when unknown; verb= "downloading"
    p.advance(n_bytes) ...
    p.end()                        # p.close() after an error: ends a bar left drawn

Not a TTY: one line when a transfer begins (or resumes) and one when it ends, so logs stay readable.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from typing import TextIO

from .units import format_size

_REDRAW_S = 0.1


def format_duration(s: float) -> str:
    s = int(max(0, s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", lambda: False)())
        self.quiet = quiet
        self._clock = clock
        self._label = ""
        self._total: int | None = None
        self._done = self._start_done = 0
        self._t0 = self._last_draw = 0.0
        self._drawn = False

    # -- lines ---------------------------------------------------------------------------------------
    def _line(self, text: str) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        if not self.quiet:
            self._line(text)

    def warn(self, text: str) -> None:
        """Shown even when quiet: a source that failed, a file that was deleted."""
        self._line(text)

    # -- a transfer ----------------------------------------------------------------------------------
    def begin(self, label: str, total: int | None, done: int = 0, verb: str = "downloading") -> None:
        self._label, self._total, self._done, self._start_done = label, total, done, done
        self._t0 = self._last_draw = self._clock()
        if self.quiet:
            return
        if self.tty:
            self._draw()
        elif done and total:
            self._line(f"resuming {label} at {format_size(done)} of {format_size(total)}")
        else:
            self._line(f"{verb} {label}" + (f" ({format_size(total)})" if total else ""))

    def advance(self, n: int) -> None:
        self._done += n
        if self.tty and not self.quiet:
            now = self._clock()
            if now - self._last_draw >= _REDRAW_S:
                self._last_draw = now
                self._draw()

    def end(self) -> None:
        if self.quiet:
            return
        elapsed = max(self._clock() - self._t0, 1e-9)
        moved = self._done - self._start_done
        self._line(
            f"{self._label}: {format_size(self._done)}"
            + (f" in {elapsed:.1f} s ({format_size(moved / elapsed)}/s)" if moved else " (already here)")
        )

    def close(self) -> None:
        """Ends a bar left drawn (by an error or Ctrl-C) with a newline, so what follows starts clean."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    def speed(self) -> float:
        """Bytes per second since begin()."""
        return (self._done - self._start_done) / max(self._clock() - self._t0, 1e-9)

    def _draw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        speed = self.speed()
        done, total = self._done, self._total
        if total:
            frac = min(done / total, 1.0)
            eta = format_duration((total - done) / speed) if speed > 0 else "--:--"
            tail = (
                f" {frac * 100:3.0f}% {{bar}} {format_size(done)}/{format_size(total)}  "
                f"{format_size(speed)}/s  ETA {eta}"
            )
        else:
            frac, tail = 0.0, f" {format_size(done)}  {format_size(speed)}/s"
        label = self._label if len(self._label) <= 32 else self._label[:31] + "…"
        bar_w = max(0, min(30, width - len(label) - len(tail) + 5 - 1))
        bar = ("█" * int(frac * bar_w)).ljust(bar_w, "░") if total else ""
        self.stream.write("\r\x1b[K" + (label + tail.format(bar=bar))[: width - 1])
        self.stream.flush()
        self._drawn = True
