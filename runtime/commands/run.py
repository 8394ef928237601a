"""`localllm run MODEL [PROMPT]`: generate from a prompt (argument or stdin), streamed to stdout.

Instruction models get their chat template (the prompt is the user's message; `--system` adds a system
message); `--raw` sends the text as is. Only generated text goes to stdout: a thinking model's reasoning
(<think>, gpt-oss's analysis channel) goes to stderr, dimmed on a terminal, or nowhere with `--hide-thinking`;
`--verbose` prints speeds to stderr. Ctrl-C stops at once and exits 130.
"""

from __future__ import annotations

import argparse
import sys

from localllm.commands.device import add_device_arguments, device_kwargs
from localllm.commands.kv import add_kv_arguments, kv_kwargs
from localllm.commands.sampling_options import add_sampling_arguments, add_speculative_argument, sampling_params


def register(sub) -> None:
    p = sub.add_parser("run", help="generate text from a prompt", description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a store name or a path to a .gguf file")
    p.add_argument("prompt", nargs="?", help="the prompt (default: read stdin)")
    p.add_argument("--raw", action="store_true", help="no chat template: plain completion of the prompt")
    p.add_argument("--system", help="a system message (chat models)")
    p.add_argument("--hide-thinking", action="store_true", help="drop a thinking model's reasoning (default: stderr)")
    add_sampling_arguments(p, max_tokens=512)
    p.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-generation tokens")
    p.add_argument("-t", "--threads", type=int, default=None, help="default: physical cores")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size in tokens (default 4096)")
    add_speculative_argument(p)
    add_kv_arguments(p)
    add_device_arguments(p)
    p.add_argument("--pull", action="store_true", help="pull a catalog model that is not in the store yet")
    p.add_argument("-v", "--verbose", action="store_true", help="print prompt and decode tokens/s to stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from localllm.hub import resolve_model
    from localllm.llm import LLM

    params = sampling_params(args, ignore_eos=args.ignore_eos)
    path = resolve_model(args.model, pull=args.pull)
    if args.prompt is not None and not args.prompt:
        raise ValueError("empty prompt: give one as an argument or on stdin")
    llm_kwargs = {"n_threads": args.threads, "ctx_size": args.ctx_size, "speculative": args.speculative}
    with LLM(path, **llm_kwargs, **kv_kwargs(args), **device_kwargs(args)) as llm:
        prompt = args.prompt if args.prompt is not None else read_stdin(llm)
        if not prompt:
            raise ValueError("empty prompt: give one as an argument or on stdin")
        if args.raw or llm.tokenizer.chat_template.is_fallback:
            stream = llm.generate(prompt, params=params)
        else:
            messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
                {"role": "user", "content": prompt}
            ]
            stream = llm.chat(messages, params=params, reasoning="hide" if args.hide_thinking else "split")
        last = None
        dim, undim = ("\x1b[2m", "\x1b[0m") if sys.stderr.isatty() else ("", "")
        thought = False  # reasoning was written: a line break on stderr before the answer
        try:
            for chunk in stream:
                if chunk.reasoning:
                    sys.stderr.write(dim + chunk.reasoning + undim)
                    sys.stderr.flush()
                    thought = True
                if chunk.text and thought:
                    sys.stderr.write("\n")
                    thought = False
                if chunk.text:
                    sys.stdout.write(chunk.text)
                    sys.stdout.flush()
                last = chunk
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            sys.stdout.flush()
            return 130
        sys.stdout.write("\n")
        if last is not None and last.stats is not None and last.stats.context_full:
            print(
                f"localllm: context full ({llm.ctx_size} tokens): generation stopped; "
                f"raise --ctx-size for longer replies",
                file=sys.stderr,
            )
        if args.verbose and last is not None and last.stats is not None:
            s = last.stats
            print(
                f"prompt: {s.prompt_tokens} tokens, {s.prompt_tps:.1f} tok/s; "
                f"generated: {s.completion_tokens} tokens, {s.decode_tps:.1f} tok/s; "
                f"drafts: {s.draft_accepted}/{s.draft_proposed} accepted"
                f"{f' ({s.draft_accepted / s.draft_steps:.1f} a step)' if s.draft_steps else ''}; "
                f"finish: {last.finish_reason}",
                file=sys.stderr,
            )
    return 0


def read_stdin(llm) -> str:
    """stdin as text, reading at most llm.max_prompt_bytes + 1 bytes: more cannot fit the context, so `run M <
    /dev/zero` or a huge file is refused after reading a bounded amount. Invalid UTF-8 becomes U+FFFD."""
    data = sys.stdin.buffer.read(llm.ctx_size + 1)  # always fits (a token is at least a byte): no bound to look up
    if len(data) <= llm.ctx_size:
        return data.decode("utf-8", "replace")
    limit = llm.max_prompt_bytes
    data += sys.stdin.buffer.read(limit + 1 - len(data))
    if len(data) > limit:
        raise ValueError(
            f"the prompt on stdin is longer than {limit} bytes, more than the context can hold: "
            "give a shorter prompt or raise --ctx-size"
        )
    return data.decode("utf-8", "replace")
