"""Progress of a pull, on stderr: rich's progress bar (size, speed, time left) on a TTY; plain lines otherwise.

    p = Progress()                 # quiet=True: nothing but warn()
    p.message("pulling qwen2.5-coder:0.5b")
    p.begin("model.gguf", total=491_400_064, done=0)   # total None when unknown; verb= "downloading"
    p.advance(n_bytes) ...
    p.end()                        # p.close() after an error: takes down a bar left drawn

Not a TTY: one line when a transfer begins (or resumes) and one when it ends, so logs stay readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as Bar

from .units import format_size

_REDRAW_S = 0.1


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
        self._done = self._start_done = 0
        self._t0 = self._last_draw = 0.0
        self._bar: Bar | None = None

    # -- lines ---------------------------------------------------------------------------------------
    def _line(self, text: str) -> None:
        if self._bar is not None:  # above the bar, which is drawn again below it
            self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
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
        self.close()
        self._label, self._done, self._start_done = label, done, done
        self._t0 = self._last_draw = self._clock()
        if self.quiet:
            return
        if self.tty:
            self._bar = Bar(
                TextColumn(label if len(label) <= 32 else label[:31] + "…", markup=False),
                TaskProgressColumn(),
                BarColumn(bar_width=30),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream, force_terminal=True),
                auto_refresh=False,  # drawn from advance(), on this thread and this clock
                transient=True,  # end() replaces the bar with one line
                redirect_stdout=False,
                redirect_stderr=False,
                get_time=self._clock,
            )
            task = self._bar.add_task(label, total=total, completed=done)
            self._bar.advance(task, 0)  # the first speed sample: speed counts from here
            self._bar.start()
        elif done and total:
            self._line(f"resuming {label} at {format_size(done)} of {format_size(total)}")
        else:
            self._line(f"{verb} {label}" + (f" ({format_size(total)})" if total else ""))

    def advance(self, n: int) -> None:
        self._done += n
        if self._bar is not None:
            self._bar.advance(self._bar.task_ids[0], n)
            now = self._clock()
            if now - self._last_draw >= _REDRAW_S:
                self._last_draw = now
                self._bar.refresh()

    def end(self) -> None:
        self.close()
        if self.quiet:
            return
        elapsed = max(self._clock() - self._t0, 1e-9)
        moved = self._done - self._start_done
        self._line(
            f"{self._label}: {format_size(self._done)}"
            + (f" in {elapsed:.1f} s ({format_size(moved / elapsed)}/s)" if moved else " (already here)")
        )

    def close(self) -> None:
        """Takes down a bar left drawn (by an error or Ctrl-C), so what follows starts on a clean line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
