"""A reply's reasoning kept out of its content: models that think (Qwen3, DeepSeek-R1 distills, QwQ) write it
between <think> and </think> before the answer, or start inside it when the template opened the tag in the prompt;
gpt-oss writes it in its harmony format's analysis channel (text/harmony.py). The protocols return it apart: OpenAI
chat's `reasoning_content`, Ollama's `thinking`, Anthropic's thinking blocks, Responses' reasoning items (llama.cpp's
server and Ollama do the same), and `chat` shows it folded.

    split = reply_splitter(tok, prompt_ids, mode)   # the model's kind of splitter, or None: nothing to split
    split = ReasoningSplitter(inside=prompt_opens_thinking(tok, ids))
    reasoning, content = split.push(delta)      # streamed: a tag cut across deltas is held back until it is whole
    reasoning, content = split.finish()         # the rest (an unclosed think is all reasoning)

Only a reply that begins with <think> (leading whitespace aside), or a prompt that ends inside one, is split: a
reply that mentions the tag later is content. The whitespace between </think> and the answer is dropped.
"""

from __future__ import annotations

from .harmony import MODES, HarmonySplitter, is_harmony

OPEN, CLOSE = "<think>", "</think>"


def reply_splitter(
    tok, ids: list[int], mode: str = "split", calls: bool = True
) -> ReasoningSplitter | HarmonySplitter | None:
    """The splitter for a reply to the prompt ids. mode "split": reasoning apart from content; "raw": reasoning left
    in content as the model wrote it (OpenAI's reasoning_format none); "hide": reasoning dropped (thinking turned off).
    For a <think> model only "split" splits (None otherwise: the reply is content as it comes); a harmony model's
    reply is always parsed, its tool calls and channels being part of the format (calls: whether the request offered
    tools; a harmony call without them is dropped)."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if is_harmony(tok):
        return HarmonySplitter(mode, calls)
    return ReasoningSplitter(prompt_opens_thinking(tok, ids)) if mode == "split" else None


def prompt_opens_thinking(tok, ids: list[int]) -> bool:
    """Whether the rendered prompt ends inside an open <think> (DeepSeek-R1's template writes it)."""
    return tok.decode(ids[-4:], special=True).rstrip().endswith(OPEN)


class ReasoningSplitter:
    def __init__(self, inside: bool = False):
        self._state = "reasoning" if inside else "start"  # start: not yet known whether the reply thinks
        self._held = ""
        self._strip = inside  # whitespace at the start of reasoning and of the answer is dropped

    def push(self, text: str) -> tuple[str, str]:
        buf = self._held + text
        self._held = ""
        reasoning = content = ""
        if self._state == "start":
            s = buf.lstrip()
            if s.startswith(OPEN):
                self._state, buf, self._strip = "reasoning", s[len(OPEN) :], True
            elif OPEN.startswith(s):  # nothing yet, or a tag still arriving
                self._held = buf
                return "", ""
            else:
                self._state = "content"
        if self._state == "reasoning":
            if self._strip:
                buf = buf.lstrip()
                self._strip = not buf
            i = buf.find(CLOSE)
            if i < 0:
                keep = next((n for n in range(min(len(CLOSE) - 1, len(buf)), 0, -1) if buf.endswith(CLOSE[:n])), 0)
                self._held = buf[len(buf) - keep :]
                return buf[: len(buf) - keep], ""
            reasoning, buf = buf[:i], buf[i + len(CLOSE) :]
            self._state, self._strip = "content", True
        if self._state == "content":
            if self._strip:
                buf = buf.lstrip()
                self._strip = not buf
            content = buf
        return reasoning, content

    def finish(self) -> tuple[str, str]:
        held, self._held = self._held, ""
        if self._state == "reasoning":
            return held, ""
        return "", held
