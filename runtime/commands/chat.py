"""`localllm chat [MODEL]`: the terminal chat (Textual), on a store name or a .gguf path.

With no MODEL it opens the catalog's default model. Conversations are saved in <data dir>/chat.sqlite3
(LOCALLLM_HOME, default ~/.local/share/localllm) unless --no-save. A catalog model that is not in the store yet is
offered for pulling when stdin and stderr are a terminal ([y/N]); otherwise, or when declined, and for a name
that cannot be pulled, it is one line on stderr saying how to get it (`localllm pull NAME`, or `--pull` here),
exit status 1. Inside the chat, F1 lists the keys; Ctrl+O switches to another stored model.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import warnings
from pathlib import Path

from localllm.commands.device import add_device_arguments, device_kwargs
from localllm.commands.kv import add_kv_arguments, kv_kwargs
from localllm.commands.sampling_options import add_sampling_arguments, add_speculative_argument, sampling_params


def register(sub) -> None:
    p = sub.add_parser("chat", help="chat with a model in the terminal", description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", help="a store name or a path to a .gguf file (default: the catalog default)")
    p.add_argument("--system", help="a system message for the conversation")
    add_sampling_arguments(p, max_tokens=None)
    p.add_argument("-t", "--threads", type=int, default=None, help="default: physical cores")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size in tokens (default 4096)")
    add_kv_arguments(p)
    add_device_arguments(p)
    add_speculative_argument(p)
    p.add_argument("--pull", action="store_true", help="pull a catalog model that is not in the store yet")
    p.add_argument("--no-save", action="store_true", help="do not save conversations (no side panel)")
    p.set_defaults(func=run)


def default_model() -> str:
    """The catalog's default model name; CatalogError (a ValueError) when the catalog cannot be read."""
    from localllm.hub import catalog

    return catalog.load().default


def display_name(model: str, path: Path) -> str:
    """What the status bar calls the model: the name the user typed, or the file's stem for a path."""
    if os.path.isfile(os.path.expanduser(model)):
        return path.name.removesuffix(".gguf")
    return model


def interactive() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def locate(model: str, pull: bool) -> Path:
    """The model's file. A catalog model not in the store yet is pulled with pull=True, or when the user says so."""
    from localllm import hub

    try:
        return hub.resolve_model(model, pull=pull)
    except hub.ModelNotPulledError:
        if not interactive():
            raise
        print(f"{model} is not in the store yet. Pull it now? [y/N] ", end="", file=sys.stderr, flush=True)
        try:
            answer = input()
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise
    return hub.resolve_model(model, pull=True)


def run(args: argparse.Namespace) -> int:
    # the same checks the engine makes, before the model loads and the screen switches; the settings screen
    # edits temperature, top-p and max tokens per conversation, the rest holds for every reply
    params = sampling_params(args)
    per_reply = ("top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty", "seed", "stop")
    fixed = {k: getattr(params, k) for k in per_reply}
    model = args.model or default_model()
    path = locate(model, args.pull)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise ValueError(
            "chat is a full-screen terminal app and needs a terminal on stdin and stdout; "
            "for piped input or output use `localllm run MODEL [PROMPT]`"
        )
    try:
        from localllm.tui.app import ChatApp
        from localllm.tui.history import History
        from localllm.tui.reply_worker import ReplyWorker
    except ImportError as e:
        print(f"error: the chat needs Textual ({e.name or e}): pip install textual", file=sys.stderr)
        return 1
    from localllm.engine.drafting.draft_model import DraftMismatchError
    from localllm.hub import default_home
    from localllm.llm import LLM

    def open_llm(p: Path, first: bool = False) -> LLM:
        kw = dict(n_threads=args.threads, ctx_size=args.ctx_size, **kv_kwargs(args), **device_kwargs(args))
        try:
            return LLM(p, speculative=args.speculative, **kw)
        except DraftMismatchError as e:
            if first:  # the model the draft was asked for: the user hears of it
                raise
            # a model picked later that the draft cannot serve drafts by n-grams instead
            warnings.warn(f"{e}; using n-gram drafting for {p.name}", stacklevel=2)
            return LLM(p, speculative="ngram", **kw)

    print(f"loading {model} ...", file=sys.stderr)
    engine = ReplyWorker(open_llm(path, first=True), display_name(model, path), sampling=fixed)
    saved = None
    if not args.no_save:
        try:
            saved = History(default_home() / "chat.sqlite3")
        except (OSError, sqlite3.Error) as e:
            print(f"warning: conversations will not be saved: {e}", file=sys.stderr)
    app = ChatApp(
        engine,
        system=args.system,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        saved=saved,
        load_model=open_llm,
    )
    try:
        app.run()
    finally:
        engine.close(app.reply)  # a reply still streaming at quit is stopped first
        engine.llm.close()  # the model in use at quit (Ctrl+O may have swapped the first one out and closed it)
        if saved is not None:
            saved.close()
    return 0
