"""Where a model's layers run: the policy behind --device and --gpu-layers.

    placement("cuda", gpu_layers=16, n_layers=24)   -> [("cuda", 16), ("cpu", 24)]
    placement("auto", None, 24)                      -> [("cuda", 24)] with a usable GPU, else [("cpu", 24)]

The native Model runs one stage per entry, in order: ("cuda", 16) holds layers 0..15 (and the token embedding),
("cpu", 24) layers 16..23 and the output head (native/stage.h). The first N layers go to the GPU, as the issue
asks: a card too small for the model still takes the start of it. The default device is "cpu" until the CUDA
path has passed its gpu-marked tests on a card (tests/native/test_cuda*.py, tests/runtime/test_device.py).
"""

from __future__ import annotations

from . import kernels

DEVICES = ("cpu", "cuda", "auto")
DEFAULT_DEVICE = "cpu"


class DeviceUnavailableError(ValueError):
    """--device cuda where this build or this machine cannot run CUDA (the message says which)."""


def cuda_unavailable_reason() -> str:
    """'' when the CUDA backend is compiled in and sees a device, else why not."""
    cuda = kernels.backends()["cuda"]
    if not cuda["compiled"]:
        return f"the CUDA backend is not in this build ({cuda['error']}); reinstall with LOCALLLM_CUDA=ON"
    if not cuda["devices"]:
        return f"no CUDA device: {cuda['error']}"
    return ""


def placement(device: str, gpu_layers: int | None, n_layers: int) -> list[tuple[str, int]]:
    """[(device, last layer)] per stage for the native Model. device: cpu | cuda | auto (CUDA when the build and a
    device are there); gpu_layers: the first N layers on the GPU (None or >= n_layers: all of them, the head too;
    0: none). ValueError for a bad value, DeviceUnavailableError for cuda without CUDA."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if gpu_layers is not None and (isinstance(gpu_layers, bool) or not isinstance(gpu_layers, int) or gpu_layers < 0):
        raise ValueError(f"gpu_layers must be a non-negative integer, got {gpu_layers!r}")
    if device == "cpu":
        if gpu_layers:
            raise ValueError(f"gpu_layers {gpu_layers} needs device 'cuda' or 'auto', not 'cpu'")
        return [("cpu", n_layers)]
    reason = cuda_unavailable_reason()
    if reason:
        if device == "cuda":
            raise DeviceUnavailableError(f"device 'cuda' asked for, but {reason}")
        return [("cpu", n_layers)]
    on_gpu = n_layers if gpu_layers is None else min(gpu_layers, n_layers)
    if on_gpu == 0:
        return [("cpu", n_layers)]
    return [("cuda", n_layers)] if on_gpu == n_layers else [("cuda", on_gpu), ("cpu", n_layers)]
