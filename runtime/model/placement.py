"""Where a model's layers run: the policy behind --device and --gpu-layers.

    placement("cuda", gpu_layers=16, n_layers=24)   -> [("cuda", 16), ("cpu", 24)]
    placement("auto", None, 24)                      -> [("cuda", 24)] with a usable GPU, else [("cpu", 24)]

The native Model runs one stage per entry, in order: ("cuda", 16) holds layers 0..15 (and the token embedding),
("cpu", 24) layers 16..23 and the output head (native/stage.h). The first N layers go to the GPU: a card too
small for the model still takes the start of it. Without --gpu-layers, as many layers as fit in the device's
free memory go there (Ollama's rule), given the model's Footprint; with it, a split that does not fit is refused
before anything is uploaded. The default device is "cpu" until the CUDA path has passed its gpu-marked tests on
a card (tests/native/test_cuda*.py, tests/runtime/test_device.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import native

DEVICES = ("cpu", "cuda", "auto")
DEFAULT_DEVICE = "cpu"
# device memory kept free beside the weights and KV pools: the step's activations (a 512-token prefill of a 7B
# takes ~200 MiB), the logits rows, the CUDA context's own allocations
RESERVE_FRACTION = 0.10
RESERVE_BYTES = 512 << 20


@dataclass(frozen=True)
class Footprint:
    """Device bytes of a model's parts: embed (the token embedding), layers (each layer's weights and KV pool),
    head (output norm and output matrix, 0 when the output is the embedding itself)."""

    embed: int
    layers: tuple[int, ...]
    head: int

    def on_gpu(self, n: int) -> int:
        """Bytes of the first n layers on the device, with the embedding, and the head when n is every layer."""
        return self.embed + sum(self.layers[:n]) + (self.head if n == len(self.layers) else 0)


class DeviceUnavailableError(ValueError):
    """--device cuda where this build or this machine cannot run CUDA (the message says which)."""


def cuda_unavailable_reason(cuda: dict) -> str:
    """'' when the CUDA backend (native.backends()["cuda"]) is compiled in and sees a device, else why not."""
    if not cuda["compiled"]:
        return f"the CUDA backend is not in this build ({cuda['error']}); reinstall with LOCALLLM_CUDA=ON"
    if not cuda["devices"]:
        return f"no CUDA device: {cuda['error']}"
    return ""


def placement(
    device: str, gpu_layers: int | None, n_layers: int, footprint: Footprint | None = None
) -> list[tuple[str, int]]:
    """[(device, last layer)] per stage for the native Model. device: cpu | cuda | auto (CUDA when the build and a
    device are there); gpu_layers: the first N layers on the GPU (>= n_layers: all of them, the head too; 0: none;
    None: all, or with a footprint as many as fit in device 0's free memory). ValueError for a bad value or a split
    that does not fit, DeviceUnavailableError for cuda without CUDA."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if gpu_layers is not None and (isinstance(gpu_layers, bool) or not isinstance(gpu_layers, int) or gpu_layers < 0):
        raise ValueError(f"gpu_layers must be a non-negative integer, got {gpu_layers!r}")
    if device == "cpu":
        if gpu_layers:
            raise ValueError(f"gpu_layers {gpu_layers} needs device 'cuda' or 'auto', not 'cpu'")
        return [("cpu", n_layers)]
    cuda = native.backends()["cuda"]  # asked once: it opens a context on device 0
    reason = cuda_unavailable_reason(cuda)
    if reason:
        if device == "cuda":
            raise DeviceUnavailableError(f"device 'cuda' asked for, but {reason}")
        return [("cpu", n_layers)]
    on_gpu = n_layers if gpu_layers is None else min(gpu_layers, n_layers)
    if footprint is not None:
        on_gpu = _fit(footprint, on_gpu, gpu_layers is None, cuda["devices"][0].get("free_memory", 0))
    if on_gpu == 0:
        return [("cpu", n_layers)]
    return [("cuda", n_layers)] if on_gpu == n_layers else [("cuda", on_gpu), ("cpu", n_layers)]


def _fit(fp: Footprint, asked: int, choose: bool, free: int) -> int:
    """The layers to put on device 0: `asked` when they fit its `free` bytes less the reserve; when they do not,
    the most that fit if `choose` (no --gpu-layers), else ValueError naming the sizes."""
    room = free * (1 - RESERVE_FRACTION) - RESERVE_BYTES
    if not free or fp.on_gpu(asked) <= room:  # free unknown: leave it to the device
        return asked
    if not choose:
        gib = 2**30
        raise ValueError(
            f"the first {asked} layers need {fp.on_gpu(asked) / gib:.2f} GiB on the GPU and it has {free / gib:.2f} "
            f"GiB free ({room / gib:.2f} GiB after the reserve for activations): ask for fewer --gpu-layers"
        )
    n = asked
    while n > 0 and fp.on_gpu(n) > room:
        n -= 1
    return n
