"""The native model over one GGUF file: the spec's decoder block, weights viewing the mmap, a paged KV cache.

    m = Model(GGUFFile(path), n_blocks=256, threads=2)       # spec from spec_from_gguf unless given
    logits = m.forward(batch)                                # batch: a StepBatch (step_batch.py)

One forward call is one engine step over a flat batch of tokens from any number of sequences (step_batch.py says
what its arrays hold); the logits of the rows it names come back as float32 [len(logits_rows), n_vocab]. Positions
of a sequence not in the batch must have been written by earlier steps. Bad input raises ValueError naming the
array; the GIL is released while the step runs. Block allocation is the caller's (the engine's) job.
"""

from __future__ import annotations

import numpy as np

from .. import native
from . import quant_types
from .architectures import ModelSpec, spec_from_gguf
from .architectures.spec import split_ref
from .candidates import Candidates
from .cpu_path import choose as choose_cpu_path
from .gguf import GGUFFile
from .kv_types import KV_TYPES, kv_types  # noqa: F401 (KV_TYPES re-exported)
from .placement import DEFAULT_DEVICE, Footprint
from .placement import placement as plan_placement
from .step_batch import StepBatch

BLOCK_SIZE = 16  # tokens per KV block
TOP_K_MAX = 256  # the most candidates a step returns per row (native/top_k.h)

_FIELDS = native.model_fields()  # the native Model's keys (native/model_config.h): spec attribute names


def _spec_value(spec: ModelSpec, name: str):
    """The spec's attribute `name`, or its RopeSpec's (n_rot, neox, freq_factors)."""
    return getattr(spec, name) if hasattr(spec, name) else getattr(spec.rope, name)


def kv_block_bytes(spec: ModelSpec, k_type: str, v_type: str, block_size: int = BLOCK_SIZE) -> int:
    """Bytes one KV block takes over all layers: block_size tokens of K and V rows (Model.kv_bytes / n_blocks)."""
    k_type, v_type = kv_types("f16", k_type, v_type)
    row = spec.n_kv_head * spec.head_dim
    types = [quant_types.get(t) for t in (k_type, v_type)]  # the KV types are GGML types
    per_token = sum(row // t.block_size * t.type_size for t in types)
    return spec.n_layers * block_size * per_token


def footprint(f: GGUFFile, spec: ModelSpec, n_blocks: int, block_size: int, k_type: str, v_type: str) -> Footprint:
    """The device bytes of the model's parts (localllm.model.placement.Footprint): tensors as stored, KV pools per layer."""

    def size(name: str | None) -> int:
        return f.tensor(name).nbytes if name is not None else 0

    kv_layer = n_blocks * kv_block_bytes(spec, k_type, v_type, block_size) // spec.n_layers
    layers = tuple(sum(size(name) for name in layer.tensor_names()) + kv_layer for layer in spec.layers)
    output = 0 if spec.output == spec.token_embd else size(spec.output)
    return Footprint(embed=size(spec.token_embd), layers=layers, head=output + size(spec.output_norm))


def _view(f: GGUFFile, ref: str) -> tuple[int, np.ndarray, int]:
    """(type_id, rows uint8 [n_rows, row_bytes] viewing the map, row_len) of a tensor reference (a tensor, or rows
    of a fused one: architectures/spec.py's rows_ref): what the native Model takes."""
    name, rows = split_ref(ref)
    t = f.tensor(name)
    native.check_supported(t.type, f"{f.path}: {t.name}")
    view = t.rows()
    return t.type.id, (view if rows is None else view[rows]), t.row_len


def _tensor_refs(spec: ModelSpec) -> list[str]:
    """The tensor references (_view's) of the spec's weights, in load order."""
    refs = [_spec_value(spec, name) for name in _FIELDS["weights"]]
    refs += [getattr(layer, name) for layer in spec.layers for name in _FIELDS["layer_weights"]]
    return [r for r in refs if r is not None]


def _type_name(f: GGUFFile, ref: str) -> str:
    return f.tensor(split_ref(ref)[0]).type.name


class Model:
    def __init__(
        self,
        f: GGUFFile,
        n_blocks: int,
        threads: int | None = None,
        spec: ModelSpec | None = None,
        block_size: int = BLOCK_SIZE,
        k_type: str = "f16",
        v_type: str = "f16",
        kv_rotate: bool = True,
        kv_center: bool = True,
        kv_equalize: bool = True,
        device: str = DEFAULT_DEVICE,
        gpu_layers: int | None = None,
        placement: list[tuple[str, int]] | None = None,
        cpu_path: str | None = None,
    ):
        """f stays open as long as this model (its tensors are views into f's map). k_type, v_type: KV_TYPES.
        device (cpu | cuda | auto) and gpu_layers: where the layers run (localllm.model.placement); placement, when
        given, is that plan spelt out ([(device, last layer)] per stage) and overrides both. cpu_path: the kernel path
        of its CPU stages (default: the forced one, else the one measured fastest for it here: cpu_path.py).
        A quantized K (V) is stored minus the K (V) bias when kv_center and the model has one, K divided per
        channel by the square root of its expected magnitude when kv_equalize, then Hadamard-rotated per head
        when kv_rotate; none changes the attention output beyond rounding (native/kv_transforms.h)."""
        k_type, v_type = kv_types("f16", k_type, v_type)
        for name, flag in (("kv_rotate", kv_rotate), ("kv_center", kv_center), ("kv_equalize", kv_equalize)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        if not isinstance(n_blocks, int) or n_blocks < 1:
            raise ValueError(f"n_blocks must be a positive integer, got {n_blocks!r}")
        if threads is not None and (not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        self.file = f
        self.spec = s = spec or spec_from_gguf(f)
        config = {name: _spec_value(s, name) for name in _FIELDS["config"]}
        weights = {}
        for name in _FIELDS["weights"]:
            tensor_name = _spec_value(s, name)
            if tensor_name is not None:
                weights[name] = _view(f, tensor_name)
        layers = []
        for layer in s.layers:
            d = {name: getattr(layer, name) for name in _FIELDS["layer"]}
            for name in _FIELDS["layer_weights"]:
                tensor_name = getattr(layer, name)
                if tensor_name is not None:
                    d[name] = _view(f, tensor_name)
            layers.append(d)
        cpu_only = next((ref for ref in _tensor_refs(s) if _type_name(f, ref) in quant_types.CPU_ONLY), None)
        if cpu_only is not None and device != "cpu" and placement is None:
            if device == "cuda":
                raise ValueError(
                    f"{f.path}: {split_ref(cpu_only)[0]}: tensor type {_type_name(f, cpu_only)} is not supported by "
                    "the CUDA backend (it runs on the CPU only); use device='cpu'"
                )
            device = "cpu"  # auto: where every tensor's type runs
        if s.cpu_only and device != "cpu" and placement is None:
            if device == "cuda":
                raise ValueError(f"{f.path}: {s.cpu_only} ({s.arch}) run on the CPU only; use device='cpu'")
            device = "cpu"  # auto: the model's layers run where they can
        if placement is None:
            fp = None if device == "cpu" else footprint(f, s, n_blocks, block_size, k_type, v_type)
            placement = plan_placement(device, gpu_layers, s.n_layers, fp)
        kv = {
            "n_blocks": n_blocks,
            "block_size": block_size,
            "k_type": k_type,
            "v_type": v_type,
            "rotate": kv_rotate,
            "center": kv_center,
            "equalize": kv_equalize,
        }
        threads = threads or native.physical_cores()
        if cpu_path is None:
            on_cpu = any(device == "cpu" for device, _ in placement)
            cpu_path = choose_cpu_path(f, s, threads) if on_cpu else (native.forced_path() or "")
        self._impl = native.new_model(config, weights, layers, kv, threads, placement, cpu_path)
        # whether the engine asks forward(..., top_k=K) for candidates: where the head runs on a GPU, so K numbers
        # cross the bus instead of the vocabulary; on the CPU the C++ selection over the row measured slower than
        # sampling's own (python -m localllm.bench.host: 40.5 vs 42.5 tok/s greedy on the 0.5B), so whole rows stay
        self.supports_candidates = self.stages[-1][0] != "cpu"
        # launch() returns before the step is computed (the whole model on one GPU): the engine then prepares the
        # next step while this one runs (engine.py, "Pipelining"); on the CPU a launch computes the step there and then
        self.launches_async = len(self.stages) == 1 and self.stages[0][0] != "cpu"

    @property
    def n_vocab(self) -> int:
        return self.spec.n_vocab

    @property
    def n_blocks(self) -> int:
        return self._impl.n_blocks

    @property
    def block_size(self) -> int:
        return self._impl.block_size

    @property
    def kv_bytes(self) -> int:
        return self._impl.kv_bytes

    @property
    def k_type(self) -> str:
        return self._impl.k_type

    @property
    def v_type(self) -> str:
        return self._impl.v_type

    @property
    def kv_rotated(self) -> tuple[bool, bool]:
        """(K rotated, V rotated): kv_rotate and the type quantized."""
        return self._impl.rotate_k, self._impl.rotate_v

    @property
    def kv_centered(self) -> tuple[bool, bool]:
        """(K stored minus its bias, V likewise): kv_center, the type quantized and the bias present."""
        return self._impl.center_k, self._impl.center_v

    @property
    def kv_equalized(self) -> bool:
        """K stored divided per channel by its expected magnitude: kv_equalize and K quantized."""
        return self._impl.equalize_k

    @property
    def k_scales(self) -> np.ndarray | None:
        """float32 [n_layers, n_kv_head * head_dim]: K is stored divided by these (q multiplied), or None."""
        return self._impl.k_scales

    @property
    def threads(self) -> int:
        return self._impl.threads

    @property
    def cpu_path(self) -> str:
        """The kernel path of its CPU stages ("avx2", ...)."""
        return self._impl.cpu_path

    @property
    def stages(self) -> list[tuple[str, int, int]]:
        """[(device, first layer, last layer)] in step order, e.g. [("cuda:0", 0, 16), ("cpu", 16, 24)]."""
        return [tuple(s) for s in self._impl.stages]

    @property
    def graph_nodes(self) -> list[int]:
        """Per stage, the kernels of the CUDA graph it captured last (a decode step's launches); -1: none (a CPU
        stage, or no decode-sized step run twice yet)."""
        return list(self._impl.graph_nodes)

    @property
    def device(self) -> str:
        """Where the layers run: "cpu", "cuda:0", or "cuda:0 0-15 + cpu 16-23" for a split."""
        st = self.stages
        if len(st) == 1:
            return st[0][0]
        return " + ".join(f"{d} {a}-{b - 1}" for d, a, b in st)

    def forward(
        self, batch: StepBatch, top_k: int = 0, n_valid: int | None = None, hidden: bool = False
    ) -> np.ndarray | Candidates:
        """One engine step (step_batch.py) -> float32 [len(batch.logits_rows), n_vocab]; with top_k (1..TOP_K_MAX)
        each row's top_k candidates among its first n_valid (default all) columns instead (model/candidates.py);
        with hidden, each row's final hidden state (after output_norm) [len(batch.logits_rows), d_model]
        (embeddings; the last stage on the CPU)."""
        if not isinstance(batch, StepBatch):
            raise TypeError(f"forward takes a StepBatch (localllm.model.step_batch), got {type(batch).__name__}")
        if hidden:
            return self._impl.forward(batch, hidden=True)
        if not top_k:
            return self._impl.forward(batch)
        if not 1 <= top_k <= TOP_K_MAX:
            raise ValueError(f"top_k must be in [1, {TOP_K_MAX}], got {top_k!r}")
        ids, vals = self._impl.forward(batch, top_k, n_valid or 0)
        return Candidates(ids, vals)

    def launch(self, batch: StepBatch, top_k: int = 0, n_valid: int | None = None, feed: bool = False) -> None:
        """forward(batch, top_k, n_valid)'s step, without waiting for it where the device runs it apart from the host
        (launches_async); collect() returns its result. At most two steps launched and not collected; a StepBatch's
        arrays may change once launch returns. feed: token ids -1 - j stand for the top candidate of row j of the
        step run before this one (which asked for candidates), put there by the device."""
        if not isinstance(batch, StepBatch):
            raise TypeError(f"launch takes a StepBatch (localllm.model.step_batch), got {type(batch).__name__}")
        if top_k and not 1 <= top_k <= TOP_K_MAX:
            raise ValueError(f"top_k must be in [1, {TOP_K_MAX}], got {top_k!r}")
        self._impl.launch(batch, top_k, n_valid or 0, feed)

    def collect(self) -> np.ndarray | Candidates:
        """The oldest launched step's result, as forward would have returned it; waits for it (GIL released)."""
        out = self._impl.collect()
        return Candidates(*out) if isinstance(out, tuple) else out
