"""The sampling options shared by `run` and `chat`, with one set of defaults (llama.cpp's):
--temperature, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty, --frequency-penalty, --seed,
--stop, -n/--max-tokens.

    add_sampling_arguments(p, max_tokens=512)     # run: 512 tokens at most; chat: None (the context bounds it)
    params = sampling_params(args)                # SamplingParams; ValueError naming the first bad field
"""

from __future__ import annotations

import argparse

from localllm.sampling import SamplingParams

DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}


def add_sampling_arguments(p: argparse.ArgumentParser, max_tokens: int | None) -> None:
    d = DEFAULTS
    limit = f"default {max_tokens}" if max_tokens else "default: the context"
    p.add_argument("-n", "--max-tokens", type=int, default=max_tokens, help=f"tokens to generate at most ({limit})")
    p.add_argument("--temperature", "--temp", type=float, default=d["temperature"], help="0 = greedy (default 0.8)")
    p.add_argument("--top-k", type=int, default=d["top_k"], help=f"0 = off (default {d['top_k']})")
    p.add_argument("--top-p", type=float, default=d["top_p"], help=f"1 = off (default {d['top_p']})")
    p.add_argument("--min-p", type=float, default=d["min_p"], help=f"0 = off (default {d['min_p']})")
    p.add_argument("--repeat-penalty", type=float, default=1.0, help="1 = off (default)")
    p.add_argument("--presence-penalty", type=float, default=0.0)
    p.add_argument("--frequency-penalty", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None, help="same seed, same output")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def sampling_params(args: argparse.Namespace, **overrides) -> SamplingParams:
    return SamplingParams(
        **{
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "min_p": args.min_p,
            "repetition_penalty": args.repeat_penalty,
            "presence_penalty": args.presence_penalty,
            "frequency_penalty": args.frequency_penalty,
            "seed": args.seed,
            "max_tokens": args.max_tokens,
            "stop": tuple(args.stop),
            **overrides,
        }
    )


def add_speculative_argument(p: argparse.ArgumentParser) -> None:
    """--speculative ngram|off|MODEL and --draft-model MODEL (the same setting), shared by run, chat and serve
    (LLM's `speculative`)."""
    p.add_argument(
        "--speculative",
        default="ngram",
        metavar="ngram|off|MODEL",
        help="ngram (default): draft tokens from the text so far and verify them in one step (the same output, "
        "faster when text repeats); off: one token per step; MODEL: a small draft model of the same vocabulary "
        "(a store name or .gguf path) proposes the tokens",
    )
    p.add_argument(
        "--draft-model",
        dest="speculative",
        metavar="MODEL",
        help="the same as --speculative MODEL: e.g. qwen2.5-coder:0.5b drafting for qwen2.5-coder:1.5b",
    )
