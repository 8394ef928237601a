"""`localllm perplexity MODEL FILE`: perplexity of a model over a text file, computed as llama.cpp does
(see localllm/perplexity.py), so the figure can be put next to llama.cpp's."""

from __future__ import annotations

import argparse
import json
import os
import stat

from localllm.commands.device import add_device_arguments, device_kwargs
from localllm.commands.kv import add_kv_arguments, kv_kwargs, kv_label


def register(sub) -> None:
    p = sub.add_parser("perplexity", help="perplexity of a model over a text file", description=__doc__)
    p.add_argument("model", help="a store name or a path to a .gguf file")
    p.add_argument("file", help="a UTF-8 text file")
    p.add_argument("-c", "--ctx", type=int, default=512, help="tokens per chunk (default 512)")
    p.add_argument("--chunks", type=int, default=4, help="chunks to evaluate, 0 = all (default 4)")
    p.add_argument("-t", "--threads", type=int, default=None, help="default: physical cores")
    add_kv_arguments(p)
    add_device_arguments(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--pull", action="store_true", help="pull a catalog model that is not in the store yet")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.hub import resolve_model
    from localllm.llm import LLM
    from localllm.perplexity import perplexity

    if args.chunks < 0:
        raise ValueError("--chunks must be 0 (all) or positive")
    path = resolve_model(args.model, pull=args.pull)
    kv = kv_kwargs(args)
    with LLM(path, n_threads=args.threads, ctx_size=args.ctx, **kv, **device_kwargs(args)) as llm:
        # --chunks N needs N * ctx tokens: at most that many times the longest token's bytes of text
        text = read_text(args.file, args.chunks * args.ctx * llm.tokenizer.max_piece_bytes if args.chunks else None)
        r = perplexity(llm, text, ctx=args.ctx, max_chunks=args.chunks or None)
        label = kv_label(llm)
    if args.json:
        print(
            json.dumps(
                {
                    "model": str(path),
                    "kv": label,
                    "k_type": llm.k_type,
                    "v_type": llm.v_type,
                    "kv_rotate": kv["kv_rotate"],
                    "kv_center": kv["kv_center"],
                    **r.__dict__,
                }
            )
        )
    else:
        print(f"perplexity {r.ppl:.4f} over {r.chunks} chunks of {args.ctx} ({r.scored} predictions, kv {label})")
    return 0


def read_text(name: str, limit: int | None) -> str:
    """The file's text, at most `limit` bytes of it (None: all of a regular file; a device or a FIFO could be
    endless, so it needs --chunks). Invalid UTF-8 is an error naming the file."""
    with open(name, "rb") as fh:
        if limit is None and not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError(f"{name} is not a regular file: --chunks 0 reads all of it; give --chunks N")
        data = fh.read() if limit is None else fh.read(limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if limit is not None and len(data) == limit and e.start >= len(data) - 4:
            return data[: e.start].decode("utf-8")  # the bounded read cut a character in two
        raise ValueError(f"{name}: not UTF-8 text (byte {e.start})") from None
