"""localllm: a local LLM runtime.

    from localllm import LLM, SamplingParams, Chunk       # the model handle, a request's sampling, a reply's pieces
    from localllm import Grammar                          # structured output: Grammar.json_schema(schema), ...
    from localllm import Tokenizer, GGUFFile, backends    # a GGUF's tokenizer, the file itself, where it can run

Heavy modules (the native extension, the tokenizer) are imported on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "LLM": ("localllm.llm", "LLM"),
    "SamplingParams": ("localllm.sampling", "SamplingParams"),
    "Grammar": ("localllm.engine.constraint", "Grammar"),
    "Chunk": ("localllm.engine.output", "Chunk"),
    "GGUFFile": ("localllm.model.gguf", "GGUFFile"),
    "GGUFError": ("localllm.model.gguf", "GGUFError"),
    "Tokenizer": ("localllm.text.tokenizer", "Tokenizer"),
    "backends": ("localllm.native", "backends"),
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'localllm' has no attribute {name!r}")
