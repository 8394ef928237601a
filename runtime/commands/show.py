"""`localllm show MODEL [--json]`: what a user wants to know about a GGUF model."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser(
        "show",
        help="summarise a GGUF model (store name or path)",
        description="Print a model's architecture, size, quantization mix, shape and tokenizer.",
    )
    p.add_argument("model", help="a store name (see `localllm list`) or a path to a .gguf file")
    p.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    p.add_argument("--pull", action="store_true", help="pull a catalog model that is not in the store yet")
    p.set_defaults(func=run)


def summary(path: Path) -> dict:
    from localllm.model.gguf import GGUFFile

    t0 = time.perf_counter()
    with GGUFFile(path) as f:
        load_s = time.perf_counter() - t0
        md = f.metadata
        arch = f.architecture or "unknown"
        quant: dict[str, dict] = {}
        n_params = 0
        for t in f.tensors.values():
            q = quant.setdefault(t.type.name, {"tensors": 0, "parameters": 0, "bytes": 0})
            q["tensors"] += 1
            q["parameters"] += t.n_elements
            q["bytes"] += t.nbytes
            n_params += t.n_elements
        n_tensor_bytes = sum(q["bytes"] for q in quant.values())
        tokens = md.get("tokenizer.ggml.tokens")

        def a(key):
            v = f.arch_value(key)
            return v.tolist() if hasattr(v, "tolist") else v

        from localllm.engine.embedding import pooling_of
        from localllm.model.architectures import ARCHITECTURES, UnsupportedModelError, spec_from_gguf

        encoder = None
        try:
            encoder = spec_from_gguf(f).encoder
            runs = None
        except UnsupportedModelError as e:
            runs = e.problem if e.field != "general.architecture" else f"unsupported architecture {arch!r}"
        return {
            "path": str(path),
            "name": md.get("general.name"),
            "architecture": arch,
            "supported": runs is None,
            "unsupported_because": runs,
            "architectures_supported": sorted(ARCHITECTURES),
            "parameters": n_params,
            "file_size": f.file_size,
            "bits_per_weight": round(8 * n_tensor_bytes / n_params, 3) if n_params else None,
            "quantization": dict(sorted(quant.items(), key=lambda kv: -kv[1]["bytes"])),
            "context_length": a("context_length"),
            "embedding_length": a("embedding_length"),
            "feed_forward_length": a("feed_forward_length"),
            "experts": a("expert_count"),  # a mixture of experts: how many, used per token, each one's ffn width
            "experts_used": a("expert_used_count"),
            "expert_feed_forward_length": a("expert_feed_forward_length"),
            "layers": a("block_count"),
            "heads": a("attention.head_count"),
            "kv_heads": a("attention.head_count_kv") or a("attention.head_count"),
            # an encoder (bert, nomic-bert) embeds only: its pooling, or None for a decoder
            "encoder_pooling": _pooling(pooling_of, md) if encoder else None,
            "rope_freq_base": a("rope.freq_base"),
            "vocab_size": len(tokens) if tokens is not None else None,
            "tokenizer": md.get("tokenizer.ggml.model"),
            "pre_tokenizer": md.get("tokenizer.ggml.pre"),
            "chat_template": "tokenizer.chat_template" in md,
            "gguf_version": f.version,
            "tensors": len(f.tensors),
            "open_seconds": round(load_s, 4),
        }


def _pooling(pooling_of, md) -> str:
    try:
        return pooling_of(md)
    except ValueError as e:
        return str(e)


def backends_line() -> str:
    """Where this build runs models: the CPU kernel path, and CUDA's devices or why there are none."""
    from localllm import backends

    b = backends()
    cuda = b["cuda"]
    if cuda["devices"]:
        gpus = ", ".join(f"{d['name']} ({d['total_memory'] / 2**30:.0f} GiB)" for d in cuda["devices"])
        cuda_text = f"cuda: {gpus}"
    else:
        cuda_text = f"cuda: none ({cuda['error']})"
    return f"cpu ({b['cpu']['current']}); {cuda_text}"


def run(args: argparse.Namespace) -> int:
    from localllm.hub import resolve_model
    from localllm.hub.units import format_params, format_size

    s = summary(resolve_model(args.model, pull=args.pull))
    if args.json:
        from localllm import backends

        print(json.dumps({**s, "backends": backends()}, indent=1))
        return 0
    rows = [
        ("model", s["name"] or Path(s["path"]).name),
        (
            "file",
            f"{s['path']} ({format_size(s['file_size'])}, GGUF v{s['gguf_version']}, opened in {s['open_seconds'] * 1000:.1f} ms)",
        ),
        ("architecture", s["architecture"]),
        (
            "runs here",
            "yes"
            if s["supported"]
            else f"no: {s['unsupported_because']} (localllm runs {', '.join(s['architectures_supported'])})",
        ),
        (
            "parameters",
            f"{format_params(s['parameters'])} ({s['parameters']:,}), {s['bits_per_weight']} bits per weight",
        ),
        ("context length", s["context_length"]),
        ("layers", s["layers"]),
        ("heads / kv heads", f"{s['heads']} / {s['kv_heads']}"),
        ("embedding / ffn", f"{s['embedding_length']} / {s['feed_forward_length']}"),
        *(
            [("experts", f"{s['experts']}, {s['experts_used']} per token, ffn {s['expert_feed_forward_length']} each")]
            if s["experts"]
            else []
        ),
        *(
            [("embeddings", f"encoder only (no generation), pooling {s['encoder_pooling']}")]
            if s["encoder_pooling"]
            else []
        ),
        ("tokenizer", f"{s['tokenizer']} ({s['pre_tokenizer'] or 'no pre-tokenizer'}), {s['vocab_size']} tokens"),
        ("chat template", "yes" if s["chat_template"] else "no"),
        ("backends", backends_line()),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    print("quantization")
    for name, q in s["quantization"].items():
        print(
            f"  {name:<7} {q['tensors']:>4} tensors  {format_params(q['parameters']):>7} params  {format_size(q['bytes']):>10}"
        )
    return 0
