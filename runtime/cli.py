"""`localllm` command line: one subcommand per module in localllm.commands, imported only when used.

Each command module has `register(subparsers)` (adds its parser, sets `func`) and returns an exit status
from that func. User errors (ValueError, OSError, KeyError, LookupError) become one line on stderr and
exit status 1; any other exception too, named as internal (LOCALLLM_DEBUG=1 shows its traceback); Ctrl-C
exits 130; warnings are one `warning:` line. A command with a `prompt` positional takes it after options too
(`run MODEL -n 5 "Hello"`; several words are joined with spaces).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import warnings

# name -> (module, one-line help); modules are imported lazily so `localllm --help` stays fast
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("localllm.commands.run", "generate text from a prompt (argument or stdin)"),
    "chat": ("localllm.commands.chat", "chat with a model in the terminal"),
    "serve": ("localllm.commands.serve", "serve models over HTTP (OpenAI and Ollama APIs) for editors and apps"),
    "show": ("localllm.commands.show", "summarise a GGUF model (store name or path)"),
    "pull": ("localllm.commands.pull", "download a model into the store"),
    "list": ("localllm.commands.list", "list the models in the store"),
    "rm": ("localllm.commands.rm", "remove a model from the store"),
    "perplexity": ("localllm.commands.perplexity", "perplexity of a model over a text file"),
    "bench": ("localllm.commands.bench", "benchmarks: `bench kernels` measures the native kernels"),
}


def _available() -> dict[str, tuple[str, str]]:
    return {n: v for n, v in COMMANDS.items() if importlib.util.find_spec(v[0]) is not None}


class Parser(argparse.ArgumentParser):
    """argparse, except that a single-dash option of several letters (`-ngl`, llama.cpp's spelling) is matched only
    whole. argparse matches single-dash prefixes even with allow_abbrev=False, so in a command without a `-n` of its
    own (`serve`, `perplexity`) `-n 512`, llama-server's token limit, was read as `-ngl 512` without a word."""

    def _get_option_tuples(self, option_string):
        return [
            t
            for t in super()._get_option_tuples(option_string)
            # t[1]: the option string matched (argparse's tuples are 3 or 4 long by version, that one is second)
            if t[1].startswith("--") or len(t[1]) <= 2 or t[1] == option_string
        ]


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="localllm", description="Run LLMs locally from GGUF files.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
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
    warnings.formatwarning = _one_line
    parser = build_parser()
    args = _parse(parser)
    func = getattr(args, "func", None)
    if func is None:  # the command's module was not imported (argv came in an unusual order)
        importlib.import_module(COMMANDS[args.command][0]).register(argparse.ArgumentParser().add_subparsers())
        parser = build_parser()
        args = _parse(parser)
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
        print(f"error: {_short(str(msg))}", file=sys.stderr)
        return 1
    except MemoryError:
        print("error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:
        if os.environ.get("LOCALLLM_DEBUG"):
            raise
        print(
            f"error: internal error ({type(e).__name__}): {_short(str(e))} (LOCALLLM_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return 1


def _parse(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """parse_args, except that words left over after the options become the prompt of a command that takes one and
    was not given it (argparse binds an optional positional before the options that follow it)."""
    args, extra = parser.parse_known_args()
    if extra:
        if getattr(args, "prompt", "") is None and not any(a.startswith("-") for a in extra):
            args.prompt = " ".join(extra)
        else:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _short(msg: str, limit: int = 400) -> str:
    """One line of at most about `limit` characters (an exception may carry whole arrays in its text)."""
    msg = " ".join(msg.split())
    return msg if len(msg) <= limit else msg[:limit] + " ..."


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"warning: {message}\n"


if __name__ == "__main__":
    sys.exit(main())
