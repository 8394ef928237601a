"""Which CPU kernel path a model runs on: the one measured fastest for it on this CPU, not the one with the widest
instructions (on an AMD Zen 4 the AVX-512 path decodes at half the AVX2 path's speed: docs/performance.md).

    path = choose(f, spec, threads)        # "avx2", "avx512", ...: a forced path (LOCALLLM_CPU, native.configure)
                                           # wins; otherwise measured once per CPU model and remembered
    report = measure(f, spec, threads)     # {path: Timing} for every SIMD path this CPU runs (bench kernels)

The measurement: on the model's own weights, each SIMD path runs the products of one layer (the middle one) at
N = 1 and N = 64 activation rows and the output head at N = 1, with the model's thread count (native.time_products:
best of a few passes, after an untimed one). A decoded token costs about n_layers * layer(1) + head(1), a prompt
token n_layers * layer(64) / 64. The choice is the path that serves llama-bench's request (a 512-token prompt, then
128 tokens) soonest among those that decode within DECODE_SLACK of the fastest: what a user feels most is decode.
Each path keeps rows bit-identical for every N (native/kernels.h), so a model never mixes paths.

Remembered in $XDG_CACHE_HOME/localllm/cpu_paths.json (default ~/.cache/localllm), keyed by the CPU's model name,
the build, the paths it can run, the thread count and the timed weights' types; and in the process, so every model
of a process with those keys runs the same path. About 0.2 s per path on a 0.5B model, once.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .. import __version__, native
from . import quant_types
from .architectures import ModelSpec
from .architectures.spec import split_ref
from .gguf import GGUFFile

DECODE_SLACK = 1.25  # a path decoding slower than this times the fastest is never chosen
PROMPT_TOKENS, DECODE_TOKENS = 512, 128  # the request the choice is made for (llama-bench's pp512 + tg128)
PREFILL_ROWS = 64
_memo: dict[str, str] = {}


@dataclass(frozen=True)
class Timing:
    """Seconds, on one path: a decoded token, and a prompt token (amortised over a chunk of PREFILL_ROWS)."""

    decode_s: float
    prompt_s: float
    decode_bytes: int  # weight bytes a decoded token reads (what decode_s streams)

    @property
    def request_s(self) -> float:
        return DECODE_TOKENS * self.decode_s + PROMPT_TOKENS * self.prompt_s

    @property
    def decode_gbps(self) -> float:
        return self.decode_bytes / self.decode_s / 1e9


def pick(timings: dict[str, Timing]) -> str:
    """The path that serves the request soonest among those decoding within DECODE_SLACK of the fastest."""
    fastest = min(t.decode_s for t in timings.values())
    ok = {p: t for p, t in timings.items() if t.decode_s <= DECODE_SLACK * fastest}
    return min(ok, key=lambda p: (ok[p].request_s, p))


def candidates() -> list[str]:
    """The paths worth timing: every SIMD path this CPU runs (scalar only where there is none)."""
    paths = native.available_paths()
    simd = [p for p in paths if p != "scalar"]
    return simd or paths


def _matrices(f: GGUFFile, spec: ModelSpec) -> tuple[list, list]:
    """(one layer's 2-D weights, the head) as (type_id, rows, k) for native.time_products."""
    fields = native.model_fields()["layer_weights"]
    layer = spec.layers[len(spec.layers) // 2]
    mats = []
    for name in fields:
        ref = getattr(layer, name)
        if ref is None:
            continue
        tname, rows = split_ref(ref)
        t = f.tensor(tname)
        if len(t.dims) == 2 and t.type.supported:
            mats.append((t.type.id, t.rows() if rows is None else t.rows()[rows], t.row_len))
    head = f.tensor(spec.output)
    return mats, [(head.type.id, head.rows(), head.row_len)]


def measure(f: GGUFFile, spec: ModelSpec, threads: int, paths: list[str] | None = None) -> dict[str, Timing]:
    """{path: Timing} on this model's weights (module docstring), for `paths` (default: candidates())."""
    layer, head = _matrices(f, spec)
    n_layers = len(spec.layers)
    decode_bytes = n_layers * sum(m[1].nbytes for m in layer) + head[0][1].nbytes
    out = {}
    for p in paths or candidates():
        l1 = native.time_products(p, layer, 1, 5, threads)
        h1 = native.time_products(p, head, 1, 3, threads)
        l64 = native.time_products(p, layer, PREFILL_ROWS, 2, threads)
        out[p] = Timing(n_layers * l1 + h1, n_layers * l64 / PREFILL_ROWS, decode_bytes)
    return out


def cpu_model() -> str:
    """This CPU's model name (/proc/cpuinfo's "model name" and family / model), or what platform says."""
    with contextlib.suppress(OSError):
        info = {}
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model", "vendor_id") and key not in info:
                info[key] = value.strip()
            if not line.strip() and info:
                break
        if info:
            return " / ".join(info.get(k, "?") for k in ("vendor_id", "model name", "cpu family", "model"))
    return platform.processor() or platform.machine()


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "localllm" / "cpu_paths.json"


def _key(f: GGUFFile, spec: ModelSpec, threads: int, paths: list[str]) -> str:
    layer, head = _matrices(f, spec)
    types = sorted({quant_types.get(m[0]).name for m in layer + head})
    return " | ".join([cpu_model(), _build(), ",".join(paths), f"{threads} threads", ",".join(types)])


def _build() -> str:
    """The version and the extension's build (a rebuild with other kernels measures again)."""
    return f"localllm {__version__} ({native.build_id()})"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # absent or damaged: measured again and rewritten


def choose(f: GGUFFile, spec: ModelSpec, threads: int) -> str:
    """The forced path if there is one, else the one measured fastest for this model on this CPU (remembered)."""
    forced = native.forced_path()
    if forced:
        return forced
    paths = candidates()
    if len(paths) == 1:
        return paths[0]
    key = _key(f, spec, threads, paths)
    if key in _memo:
        return _memo[key]
    path = cache_file()
    entry = _read(path).get(key)
    if isinstance(entry, dict) and entry.get("path") in paths:
        _memo[key] = entry["path"]
        return entry["path"]
    timings = measure(f, spec, threads, paths)
    choice = _memo[key] = pick(timings)
    data = _read(path)
    data[key] = {
        "path": choice,
        "measured": time.strftime("%Y-%m-%d"),
        "timings": {p: asdict(t) for p, t in timings.items()},
    }
    with contextlib.suppress(OSError):  # a read-only home measures again next time, nothing else
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    return choice
