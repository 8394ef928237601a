"""Typed facade over the native extension: the only module that imports localllm._native.

    from localllm import native
    y = native.matmul(tensor, x)          # tensor: gguf.TensorInfo [m, k]; x: float32 [n, k] -> [n, m]
    w = native.dequantize(tensor)         # float32 [n_rows, row_len]
    native.configure(path="avx2", threads=2)

The CPU path comes from LOCALLLM_CPU (scalar, avx2, avx512s8, avx512) or the best this CPU runs; the kernel entry
points' threads default to the number of physical cores. One set of worker threads serves the whole process:
these entry points and every model, each with its own thread count. Besides the kernels the extension holds
the native model (new_model: localllm.model.model wraps it), the loader's and tokenizer's byte helpers
(scan_strings, decode_strings, merges_valid), and `testing`: entry points only the tests call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from . import _native
from .model import quant_types

if TYPE_CHECKING:
    from .model.gguf import TensorInfo

# entry points the product never calls (the tests check the forward step's pieces with them): kv_quantize,
# kv_dequantize, hadamard, silu_mul, quantize_x, matmul_multi, type_table
# (native/bind_testing.cpp)
testing = _native.testing


class UnsupportedTypeError(ValueError):
    """A tensor type the kernels do not compute."""


def physical_cores() -> int:
    """Physical cores of this machine (SMT siblings counted once); falls back to os.cpu_count()."""
    try:
        cores = set()
        base = "/sys/devices/system/cpu"
        for name in os.listdir(base):
            if name.startswith("cpu") and name[3:].isdigit():
                p = f"{base}/{name}/topology"
                with open(f"{p}/physical_package_id") as a, open(f"{p}/core_id") as b:
                    cores.add((a.read().strip(), b.read().strip()))
        n = len(cores)
    except OSError:
        n = 0
    avail = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n or avail, avail))


def available_paths() -> list[str]:
    """CPU paths this machine can run, best last."""
    return list(_native.available_paths())


# a test build (LOCALLLM_EMULATE_AVX512, CMakeLists.txt): the avx512 paths run over SIMDe on any AVX2 CPU, slowly,
# and have no int8 peak loop
EMULATED_AVX512: bool = bool(getattr(_native, "EMULATED_AVX512", False))


def known_paths() -> list[str]:
    """Every CPU path a build can have (scalar, avx2, avx512s8, avx512), whatever this machine runs."""
    return list(_native.known_paths())


_forced_path: str | None = None  # the path configure() was given (or LOCALLLM_CPU names), else None


def configure(path: str | None = None, threads: int | None = None) -> None:
    """Selects the CPU path (None: LOCALLLM_CPU, else the best by instructions) that the kernel entry points and
    models made afterwards use, and the kernel entry points' thread count (None: physical cores); a model keeps the
    path and count it was made with. A path given here or by LOCALLLM_CPU is forced: models then take it instead of
    the one measured fastest for them (model/cpu_path.py)."""
    global _forced_path
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    name = path if path is not None else os.environ.get("LOCALLLM_CPU", "")
    _native.configure(name, threads or physical_cores())
    _forced_path = name or None


def build_id() -> str:
    """This build of the extension: its compiled module's size and modification time ("" where unknown)."""
    try:
        st = os.stat(_native.__file__)
    except (OSError, AttributeError, TypeError):
        return ""
    return f"{st.st_size} bytes, {int(st.st_mtime)}"


def forced_path() -> str | None:
    """The CPU path configure() or LOCALLLM_CPU forces, or None (each model takes the path measured fastest)."""
    return _forced_path


def time_products(path: str, mats: list[tuple[int, np.ndarray, int]], n: int, reps: int, threads: int) -> float:
    """Best of `reps` seconds to run one product per matrix (type_id, rows uint8 [m, row_bytes], k) with n activation
    rows on CPU path `path` with `threads` threads (after one untimed pass); the process's settings are untouched."""
    return _native.time_products(path, mats, n, reps, threads)


def backends() -> dict:
    """What this build can run on: {"cpu": {"paths": [...], "current": name}, "cuda": {"compiled": bool, "devices":
    [{"index", "name", "total_memory", "free_memory" (device 0's only: asking opens a context on a device; 0 for the
    others), "compute_capability"}], "error": why none is usable ("" when one is),
    "runtime_version", "driver_version" (when compiled)}}."""
    cuda = dict(_native.cuda_info())
    if cuda.get("compiled") and not cuda["devices"] and not cuda.get("driver_version"):
        cuda["error"] = f"no NVIDIA driver found: {cuda['error']}"
    return {"cpu": {"paths": available_paths(), "current": current_path()}, "cuda": cuda}


def current_path() -> str:
    return _native.current_path()


def threads() -> int:
    return _native.threads()


def check_supported(t: quant_types.QuantType, what: str) -> None:
    """Raises UnsupportedTypeError naming `what` (a tensor) when the kernels do not compute type t."""
    if not t.supported:
        raise UnsupportedTypeError(
            f"{what}: tensor type {t.name} is not supported by the localllm kernels "
            f"(supported: {', '.join(q.name for q in quant_types.SUPPORTED)})"
        )


# the kernels' internal weight layouts (native/quant_formats.h, never in a file): id -> name
INTERNAL_TYPES = {48: "Q5_0x8", 49: "Q4_0x8", 50: "Q4_1x8", 51: "Q5_1x8", 52: "Q4_Kx"}


def _check_type_id(type_id: int, what: str) -> None:
    if type_id not in INTERNAL_TYPES:
        check_supported(quant_types.get(type_id), what)


def repack(type_id: int, rows: np.ndarray, k: int) -> tuple[int, np.ndarray]:
    """(internal type id, rows) of native/repack.h's layout for rows of type_id (ValueError where none applies):
    what a CPU stage holds where its path's kernels ask for it (wants_repack)."""
    return _native.repack(type_id, rows, k)


def wants_repack(path: str, type_id: int) -> bool:
    """Whether `path`'s kernels read rows of type_id repacked (a model's CPU stage repacks them at load)."""
    return _native.wants_repack(path, type_id)


def matmul_raw(type_id: int, rows: np.ndarray, k: int, x: np.ndarray, name: str = "weights") -> np.ndarray:
    """rows: uint8 [m, row_bytes] of GGML type type_id (or an INTERNAL_TYPES id); x: float32 [n, k] -> [n, m]."""
    _check_type_id(type_id, name)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim == 1:
        return _native.matmul(type_id, rows, k, x[None, :])[0]
    return _native.matmul(type_id, rows, k, x)


def matmul(t: TensorInfo, x: np.ndarray) -> np.ndarray:
    """y = x @ W^T for a 2-D weight tensor W [n_rows, row_len]; x: [n, row_len] or [row_len]."""
    if len(t.dims) != 2:
        raise ValueError(f"{t.name}: matmul needs a 2-D tensor, got dims {t.dims}")
    return matmul_raw(t.type.id, t.rows(), t.row_len, x, t.name)


def dequantize_raw(type_id: int, rows: np.ndarray, k: int, name: str = "tensor") -> np.ndarray:
    _check_type_id(type_id, name)
    return _native.dequantize(type_id, rows, k)


def dequantize(t: TensorInfo, rows: slice | None = None) -> np.ndarray:
    """float32 [n_rows, row_len] (or the selected rows): embedding lookup and debugging."""
    r = t.rows() if rows is None else t.rows()[rows]
    return dequantize_raw(t.type.id, r, t.row_len, t.name)


def stream_read(buf: np.ndarray, streams: int = 1) -> int:
    """Reads every byte of a contiguous uint8 buffer once with all threads, each reading its part as `streams`
    interleaved streams (1 to 16); returns a checksum: the sum mod 2**64 of the little-endian uint64 words of the
    buffer's whole 64-byte chunks plus its remaining bytes."""
    if not 1 <= streams <= 16:
        raise ValueError(f"streams must be between 1 and 16, got {streams}")
    return _native.stream_read(buf, streams)


def int8_peak(iters: int) -> tuple[int, int] | None:
    """The current path's int8 multiply-add peak loop (native/kernels.h) on every thread, `iters` steps each:
    (multiply-adds done in all, checksum of one thread's chains), or None on a path without one (scalar)."""
    return _native.int8_peak(iters)


def model_fields() -> dict[str, list[str]]:
    """The names the native Model's dicts are keyed by, each spelt once in native/model_config.h: "config" and
    "weights" (attributes of a ModelSpec or its RopeSpec), "layer" and "layer_weights" (of a LayerSpec)."""
    return {k: list(v) for k, v in _native.model_fields().items()}


def new_model(
    config: dict,
    weights: dict,
    layers: list[dict],
    kv: dict,
    threads: int,
    placement: list[tuple[str, int]],
    cpu_path: str = "",
):
    """The native Model (native/model.h): config and layers keyed by model_fields(),
    weights as (type_id, rows uint8 [n_rows, row_bytes], row_len), kv {n_blocks, block_size, k_type, v_type,
    rotate, center, equalize} (its KV pool and the transforms of what it stores: native/kv_transforms.h),
    placement [(device, last layer)] per stage (model/placement.py), cpu_path the kernel path of its CPU stages ("":
    the process's); localllm.model.Model is its only caller. Its forward(batch[, top_k, n_valid]) takes a StepBatch
    (model/step_batch.py)."""
    return _native.Model(config, weights, layers, kv, threads, placement, cpu_path)


def scan_strings(buf: np.ndarray, pos: int, count: int) -> tuple[np.ndarray, np.ndarray, int]:
    """A GGUF string array of count strings at byte pos of buf (uint8) -> (starts int64, ends int64, end pos);
    ValueError("index N: problem") names the first bad element."""
    return _native.scan_strings(buf, pos, count)


def decode_strings(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str]:
    """[buf[s:e].decode("utf-8", "replace")] for the ranges of scan_strings, without a Python loop."""
    return _native.decode_strings(buf, starts, ends)


def merges_valid(tok_buf, t_starts, t_ends, m_buf, m_starts, m_ends) -> bool:
    """True when every BPE merge (a string array) splits at its first space into two token texts (another) whose
    join is a token text too; False leaves it to the Python check, which names the bad merge."""
    return _native.merges_valid(tok_buf, t_starts, t_ends, m_buf, m_starts, m_ends)


configure()
