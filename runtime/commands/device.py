"""The device options shared by the commands that load a model: --device and --gpu-layers (localllm.model.placement)."""

from __future__ import annotations

import argparse

from localllm.model.placement import DEFAULT_DEVICE, DEVICES


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        default=DEFAULT_DEVICE,
        choices=DEVICES,
        help=f"where the model runs: cpu, cuda, or auto (CUDA when built in and a GPU is found; default {DEFAULT_DEVICE})",
    )
    p.add_argument(
        "--gpu-layers",
        "-ngl",
        type=int,
        default=None,
        metavar="N",
        help="with --device cuda/auto: the first N layers on the GPU, the rest on the CPU (default: all)",
    )


def device_kwargs(args: argparse.Namespace) -> dict:
    """LLM keyword arguments from the parsed options."""
    return {"device": args.device, "gpu_layers": args.gpu_layers}
