"""What this machine can do, measured: streaming read bandwidth (the decode roofline), the kernel path's int8
multiply-add peak (the N = 512 roofline), this process's peak RSS, and best-of timing of a callable."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import numpy as np

from .. import native


def best_seconds(fn: Callable[[], object], seconds: float) -> float:
    """The fastest of repeated calls of fn over about `seconds`, after one warm-up call."""
    fn()
    best = float("inf")
    t_end = time.perf_counter() + seconds
    while True:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() > t_end:
            return best


def read_bandwidth(seconds: float = 1.0, mib: int = 1024) -> float:
    """Best GB/s of a multi-threaded streaming read over a buffer of `mib` MiB: one stream per thread, or four
    interleaved and prefetched, whichever reads faster here (the kernels prefetch several rows ahead, so one
    plain stream alone understated the roofline where a core's single stream is latency-bound: 16.8 GB/s
    with two threads on a 16-core Xeon whose Q8_0 product streamed 27 GB/s). About `seconds` in all, half to
    each method (each adds a warm-up read)."""
    buf = np.ones(mib << 20, dtype=np.uint8)
    dt = min(best_seconds(lambda s=s: native.stream_read(buf, s), seconds / 2) for s in (1, 4))
    return buf.nbytes / dt / 1e9


def int8_peak(seconds: float = 0.5) -> float | None:
    """Best GOP/s (two operations per multiply-add) of the kernel path's int8 multiply-add instruction and its
    accumulation (vpmaddubsw + vpaddw on AVX2, vpdpbusd on AVX-512 VNNI) in independent chains on every thread,
    over about `seconds`: the compute roofline of the N = 512 products, which also spend instructions on
    decoding weights and widening sums. None on the scalar path."""
    iters = 1 << 20  # a few ms a call
    first = native.int8_peak(iters)  # also the warm-up
    if first is None:
        return None
    return 2 * first[0] / best_seconds(lambda: native.int8_peak(iters), seconds) / 1e9


def peak_rss_mb() -> float:
    """This process's peak RSS: VmHWM where there is /proc, else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
