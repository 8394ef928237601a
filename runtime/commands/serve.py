"""`localllm serve [MODEL]`: the localhost HTTP endpoint (OpenAI /v1, Ollama /api, llama.cpp's /infill) that
editor plugins talk to. Binds 127.0.0.1 unless told otherwise (a warning when another address has no key).
Requests naming another model in the store load it on demand (--max-models keep more than one resident)."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from localllm.commands.device import add_device_arguments, device_kwargs
from localllm.commands.kv import add_kv_arguments, kv_kwargs
from localllm.commands.sampling_options import add_speculative_argument


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve models over HTTP (OpenAI and Ollama APIs)", description=__doc__)
    p.add_argument("model", nargs="?", help="the model served by default (default: the catalog's default)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    p.add_argument("--api-key", default=None, help="require this key (Authorization: Bearer KEY)")
    p.add_argument("--parallel", type=int, default=4, help="sequences decoded together (default 4)")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size in tokens (default 4096)")
    p.add_argument("-t", "--threads", type=int, default=None, help="default: physical cores")
    p.add_argument("--max-models", type=int, default=1, help="models kept loaded at once (default 1)")
    p.add_argument("--max-queue", type=int, default=64, help="requests in flight per model before 503 (default 64)")
    p.add_argument(
        "--cors-origin",
        action="append",
        default=None,
        metavar="ORIGIN",
        help="allow a browser front end at ORIGIN (repeatable; default: CORS off)",
    )
    p.add_argument("--pull", action="store_true", help="pull the model first if it is a catalog model not stored")
    add_speculative_argument(p)
    add_kv_arguments(p)
    add_device_arguments(p)
    p.set_defaults(func=run)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    import uvicorn
    from localllm.hub import catalog, resolve_model
    from localllm.server import ModelHost, create_app

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.parallel < 1 or args.max_models < 1 or args.max_queue < 1:
        raise ValueError("--parallel, --max-models and --max-queue must be positive")
    model = args.model or catalog.load().default
    path = resolve_model(model, pull=args.pull)  # an unknown or unpulled model: one error line before anything starts
    if not _loopback(args.host) and not args.api_key:
        print(f"warning: serving on {args.host} without --api-key: anyone who can reach it can use it", file=sys.stderr)
    llm_kwargs = {
        "n_threads": args.threads,
        "ctx_size": args.ctx_size,
        "parallel": args.parallel,
        **kv_kwargs(args),
        **device_kwargs(args),
    }
    llm_kwargs["speculative"] = args.speculative
    host = ModelHost(
        model,
        llm_kwargs=llm_kwargs,
        max_models=args.max_models,
        max_queue=args.max_queue,
        default_path=path,
        fallback=args.model is not None,
    )
    app = create_app(host, api_key=args.api_key, cors_origins=args.cors_origin)
    print(f"localllm serving {model} on http://{args.host}:{args.port} (OpenAI: /v1, Ollama: /api)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
