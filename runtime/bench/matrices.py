"""The native kernels on a model's real weight matrices, grouped by weight type.

    rows = bench_matrices(path, thread_counts=[1, 2], ns=[1, 2, 4, 8, 512], seconds=0.4, on_row=print)

Each row: {"model", "type", "threads", "n1_gbs" (weights streamed per second at N = 1), "n{N}_gflops"
(2*M*K*N / time), "n{N}_time_ratio" (t(N) / t(N = 1), N <= 16)}. For N <= 16 the matrices are copied until the
set is `stream_bytes` (past any last-level cache), so they stream from memory as a real decode does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from .. import native
from ..model.gguf import GGUFFile
from .machine import best_seconds

STREAM_BYTES = 512 << 20  # working set for N = 1: far past any last-level cache here


def weight_matrices(f: GGUFFile) -> list:
    """The tensors of an open GGUF file that `bench kernels` times: 2-D matrices of a supported type, quantized or
    float (an F16 model's, an encoder's)."""
    return [t for t in f.tensors.values() if len(t.dims) == 2 and t.type.supported]


def check_tensor_names(paths: list[Path], names: list[str]) -> None:
    """ValueError unless every name is a weight matrix of some model (a misspelt one is not silently
    dropped) and every model holds one of them."""
    found: dict[Path, set[str]] = {}
    for p in paths:
        with GGUFFile(p) as f:
            found[p] = {t.name for t in weight_matrices(f)} & set(names)
    unknown = [n for n in names if not any(n in s for s in found.values())]
    if unknown:
        raise ValueError(f"no weight matrix named {', '.join(unknown)} in {', '.join(p.name for p in paths)}")
    for p, s in found.items():
        if not s:
            raise ValueError(f"{p.name}: none of the matrices {', '.join(names)}")


def _as_path_holds(type_id: int, rows: np.ndarray, k: int) -> tuple[int, np.ndarray, int]:
    """The matrix as a model's CPU stage on the current path holds it: repacked where the path asks (native/repack.h)."""
    if native.wants_repack(native.current_path(), type_id):
        with contextlib.suppress(ValueError):  # rows the layout does not fit: a stage keeps them as they lie too
            type_id, rows = native.repack(type_id, rows, k)
    return type_id, rows, k


def bench_matrices(
    path: Path,
    thread_counts: list[int],
    ns: list[int],
    seconds: float,
    on_row: Callable[[dict], None] = lambda row: None,
    stream_bytes: int = STREAM_BYTES,
    tensors: list[str] | None = None,
) -> list[dict]:
    """One row per weight type and thread count (see the module docstring); on_row(row) as each is measured.
    tensors: only these matrices (by name). Leaves the kernels configured with their default thread count."""
    rows = []
    rng = np.random.default_rng(0)
    with GGUFFile(path) as f:
        by_type: dict[str, list] = {}
        for t in weight_matrices(f):
            if tensors is None or t.name in tensors:
                by_type.setdefault(t.type.name, []).append(t)
        for tname, ts in sorted(by_type.items()):
            if tensors is None:  # the embedding is looked up, not multiplied (unless asked for by name)
                ts = [t for t in ts if t.name != "token_embd.weight"] or ts
            mats = [_as_path_holds(t.type.id, t.rows(), t.row_len) for t in ts]
            stream = list(mats)
            while sum(m[1].nbytes for m in stream) < stream_bytes:
                stream += [(i, np.array(r), k) for i, r, k in mats]
            small = mats[: max(1, min(len(mats), 4))]
            xs = {k: rng.standard_normal((max(ns), k), dtype=np.float32) for k in {m[2] for m in mats}}
            for th in thread_counts:
                native.configure(threads=th)
                row = {"model": path.name, "type": tname, "threads": th}
                t1 = None
                for n in ns:
                    sel = stream if n <= 16 else small
                    dt = best_seconds(
                        lambda sel=sel, n=n, xs=xs: [native.matmul_raw(i, r, k, xs[k][:n]) for i, r, k in sel], seconds
                    )
                    nbytes = sum(r.nbytes for _, r, _ in sel)
                    flops = sum(2.0 * r.shape[0] * k * n for _, r, k in sel)
                    if n == 1:
                        t1 = dt
                        row["n1_gbs"] = nbytes / dt / 1e9
                    row[f"n{n}_gflops"] = flops / dt / 1e9
                    if 1 < n <= 16 and t1:
                        row[f"n{n}_time_ratio"] = dt / t1
                rows.append(row)
                on_row(row)
    native.configure()
    return rows
