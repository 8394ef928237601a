"""`localllm` command line: one subcommand per module in localllm.commands, imported only when used.

Each command module has `register(subparsers)` (adds its parser, sets `func`) and returns an exit status
from that func. User errors (ValueError, OSError, KeyError, LookupError) become one line on stderr and
exit status 1; Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

# name -> (module, one-line help); modules are imported lazily so `localllm --help` stays fast
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("localllm.commands.run", "generate text from a prompt (argument or stdin)"),
    "chat": ("localllm.commands.chat", "chat with a model in the terminal"),
    "show": ("localllm.commands.show", "summarise a GGUF model (store name or path)"),
    "pull": ("localllm.commands.pull", "download a model into the store"),
    "list": ("localllm.commands.list", "list the models in the store"),
    "rm": ("localllm.commands.rm", "remove a model from the store"),
    "perplexity": ("localllm.commands.perplexity", "perplexity of a model over a text file"),
    "bench": ("localllm.commands.bench", "benchmarks: `bench kernels` measures the native kernels"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {n: v for n, v in COMMANDS.items() if importlib.util.find_spec(v[0]) is not None}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="localllm", description="Run LLMs locally from GGUF files.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    argv = sys.argv[1:]
    wanted = next((a for a in argv if not a.startswith("-")), None)
    for name, (mod, help_) in _available().items():
        if name == wanted:
            importlib.import_module(mod).register(sub)
        else:
            sub.add_parser(name, help=help_, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    # localllm computes with its own thread pool; OpenBLAS worker threads (numpy's) would only spin
    # against it. Must be set before numpy is first imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    parser = build_parser()
    args = parser.parse_args()
    func = getattr(args, "func", None)
    if func is None:  # the command's module was not imported (argv came in an unusual order)
        importlib.import_module(COMMANDS[args.command][0]).register(argparse.ArgumentParser().add_subparsers())
        parser = build_parser()
        args = parser.parse_args()
        func = args.func
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except (ValueError, OSError, LookupError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
