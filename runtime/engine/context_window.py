"""Whether a request fits the context: the one place that decides, for every way in (LLM.generate and chat, the
engine, the one-sequence path, the server's routes, the scheduler).

    window = ContextWindow(ctx_size=4096, origin="ctx_size")
    window.check_text(n_bytes, max_piece_bytes)   # before tokenizing: ValueError when no tokenization could fit
    window.check(n_prompt, extra=1)                # ContextLengthError (a ValueError) naming the sizes

A request fits when its prompt tokens plus `extra` (the tokens it asks to generate; at least one) are at most
ctx_size, the tokens one sequence may hold. A reply that then fills the context ends with finish reason "length".
"""

from __future__ import annotations

from collections.abc import Callable


class ContextLengthError(ValueError):
    """A prompt (with what it asks to generate) that cannot fit the context."""


class ContextWindow:
    """ctx_size: tokens one sequence may hold (prompt + reply); origin: what set that size, for the error."""

    def __init__(self, ctx_size: int, origin: str = "ctx_size"):
        if ctx_size < 1:
            raise ValueError(f"ctx_size must be positive, got {ctx_size!r}")
        self.ctx_size = ctx_size
        self.origin = origin

    def check(self, n_prompt: int, extra: int = 1) -> None:
        """ContextLengthError when n_prompt tokens and `extra` more exceed the context."""
        if n_prompt + extra > self.ctx_size:
            raise ContextLengthError(
                f"{n_prompt} tokens + {extra} to generate exceed the context size {self.ctx_size} ({self.origin})"
            )

    def check_text(self, n_bytes: int, max_piece_bytes: Callable[[], int]) -> None:
        """ValueError when n_bytes of text cannot fit whatever its tokens: each token stands for at least one byte,
        so up to ctx_size bytes always fit, and the longest piece (max_piece_bytes(): 0.15 s to find over 150k
        tokens) is only asked for longer text. Reading and tokenizing input so stays proportional to the context."""
        if n_bytes > self.ctx_size and n_bytes > self.ctx_size * (longest := max_piece_bytes()):
            raise ValueError(
                f"the prompt is {n_bytes} bytes of text: more than the context of {self.ctx_size} tokens can hold "
                f"(a token stands for at most {longest} bytes here)"
            )
