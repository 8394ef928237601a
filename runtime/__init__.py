"""localllm: a local LLM runtime. `from localllm import Tokenizer, GGUFFile`.

Heavy modules (the native extension, the tokenizer) are imported on first use.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "GGUFFile": ("localllm.model.gguf", "GGUFFile"),
    "GGUFError": ("localllm.model.gguf", "GGUFError"),
    "Tokenizer": ("localllm.text.tokenizer", "Tokenizer"),
    "LLM": ("localllm.llm", "LLM"),
    "backends": ("localllm.native", "backends"),
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'localllm' has no attribute {name!r}")
