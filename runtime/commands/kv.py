"""The KV cache options shared by the commands that load a model: --kv-type, --k-type, --v-type, --kv-budget,
--no-kv-rotate, --no-kv-center, --no-kv-equalize."""

from __future__ import annotations

import argparse

from localllm.model.kv_types import KV_TYPES


def add_kv_arguments(p: argparse.ArgumentParser) -> None:
    types = ", ".join(KV_TYPES)
    p.add_argument("--kv-type", default="f16", choices=KV_TYPES, help=f"KV cache K and V type: {types} (default f16)")
    p.add_argument("--k-type", default=None, choices=KV_TYPES, help="K cache type (overrides --kv-type)")
    p.add_argument("--v-type", default=None, choices=KV_TYPES, help="V cache type (overrides --kv-type)")
    p.add_argument(
        "--kv-budget",
        type=float,
        default=None,
        metavar="MIB",
        help="most MiB the KV cache may take; the context shrinks to what fits (default: all of --ctx-size)",
    )
    p.add_argument(
        "--no-kv-rotate",
        dest="kv_rotate",
        action="store_false",
        help="store quantized K and V unrotated (default: Hadamard-rotated per head)",
    )
    p.add_argument(
        "--no-kv-center",
        dest="kv_center",
        action="store_false",
        help="store quantized K and V with their biases (default: minus the model's K / V bias)",
    )
    p.add_argument(
        "--no-kv-equalize",
        dest="kv_equalize",
        action="store_false",
        help="store a quantized K unscaled (default: divided per channel by its expected magnitude)",
    )


def kv_kwargs(args: argparse.Namespace) -> dict:
    """LLM keyword arguments from the parsed options."""
    return {
        "kv_type": args.kv_type,
        "k_type": args.k_type,
        "v_type": args.v_type,
        "kv_rotate": args.kv_rotate,
        "kv_center": args.kv_center,
        "kv_equalize": args.kv_equalize,
        "kv_budget_mib": args.kv_budget,
    }


def kv_label(llm) -> str:
    """'f16', 'q8_0', or 'k q8_0 v q4_0', plus ' centered' / ' rotated' when a quantized part is stored so."""
    label = llm.k_type if llm.k_type == llm.v_type else f"k {llm.k_type} v {llm.v_type}"
    label += " centered" if any(llm.model.kv_centered) else ""
    label += " equalized" if llm.model.kv_equalized else ""
    return label + (" rotated" if any(llm.model.kv_rotated) else "")
