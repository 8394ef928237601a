"""gpt-oss's harmony format: a reply is a run of messages, each a header, `<|message|>`, a body and an end marker,
and what a message is for is its channel. Parsed out of a reply's text (the header markers are rendered tokens,
text/tokenizer.py), as llama.cpp's server and Ollama do:

    <|channel|>analysis<|message|>Let me think.<|end|>             -> reasoning
    <|start|>assistant<|channel|>final<|message|>Paris.             -> content (the reply ends at <|return|>)
    <|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>   -> content (a preamble the user sees)
    <|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}
                                                                    -> a tool call (the reply ends at <|call|>)

The recipient (` to=functions.NAME`) may sit in the role header or after the channel. The prompt ends with the first
message's `<|start|>assistant`, so the reply begins at its channel. A tool call comes out of the splitter as the
`<tool_call>{"name": ..., "arguments": ...}</tool_call>` block server/tool_calls.py reads for every model; a call to a
recipient outside `functions` (the built-in browser and python tools, which serve does not run), or any call when the
request offered no tools (calls=False), is dropped, as llama.cpp drops such unsolicited calls. A reply with no
harmony header at all (a model ignoring its format) is content as it stands.

    split = HarmonySplitter(mode="split")       # "raw": analysis stays in content with its markers (reasoning_format
    reasoning, content = split.push(delta)      # none); "hide": analysis is dropped (thinking turned off: gpt-oss
    reasoning, content = split.finish()         # always thinks, so the switch hides it)
"""

from __future__ import annotations

import json
import re

START, CHANNEL, MESSAGE, CONSTRAIN, END = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"
MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, END)
_RECIPIENT = re.compile(r"\bto=(\S+?)(?=<\||\s|$)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]+)")
MODES = ("split", "raw", "hide")


def is_harmony(tok) -> bool:
    """Whether tok's model speaks harmony: its vocabulary has the header markers and its template writes them."""
    source = getattr(tok.chat_template, "source", None) or ""
    return all(tok.token_to_id(m) is not None for m in (CHANNEL, MESSAGE, START)) and CHANNEL in source


class HarmonySplitter:
    """push(text) -> (reasoning, content) as the reply streams; finish() -> the rest. Text that may still be the
    start of a marker is held back until it is whole, so every cut of a reply into deltas splits the same."""

    def __init__(self, mode: str = "split", calls: bool = True):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self._mode, self._calls = mode, calls
        self._state = "first"  # first: not yet known whether the reply is harmony; header; body; plain
        self._buf = ""  # text not yet given out: a header being read, or a body's tail that may start a marker
        self._header = ""
        self._args = ""  # a tool call's arguments, given out whole when its message ends

    def push(self, text: str) -> tuple[str, str]:
        self._buf += text
        return self._run(final=False)

    def finish(self) -> tuple[str, str]:
        return self._run(final=True)

    def _run(self, final: bool) -> tuple[str, str]:
        reasoning, content = [], []
        while True:
            if self._state == "first":
                s = self._buf.lstrip()
                if s.startswith((CHANNEL, START)) or _RECIPIENT.match(s):
                    self._state = "header"
                elif not final and (not s or any(m.startswith(s) for m in (CHANNEL, START, " to=", "to="))):
                    break  # nothing yet, or a header still arriving
                else:
                    self._state = "plain"
            if self._state == "plain":
                content.append(self._buf)
                self._buf = ""
                break
            if self._state == "header":
                i = self._buf.find(MESSAGE)
                if i < 0:
                    if final and self._buf.strip():  # a header that never opened its message: show it as it came
                        content.append(self._buf)
                    self._buf = "" if final else self._buf
                    break
                self._header, self._buf, self._state = self._buf[:i], self._buf[i + len(MESSAGE) :], "body"
                if self._kind() == "reasoning" and self._mode == "raw":
                    content.append(self._header + MESSAGE)
            if self._state == "body":
                ends = [j for j in (self._buf.find(END), self._buf.find(START)) if j >= 0]
                cut = min(ends) if ends else len(self._buf) if final else _safe_end(self._buf)
                self._emit(self._buf[:cut], reasoning, content)
                if not ends:
                    self._buf = self._buf[cut:]
                    if final:
                        self._close(reasoning, content, "")
                    break
                marker = END if self._buf.startswith(END, cut) else ""
                self._buf = self._buf[cut + len(marker) :]
                self._close(reasoning, content, marker)
                self._state = "header"
        return "".join(reasoning), "".join(content)

    def _kind(self) -> str:
        """What the current message is: reasoning, content, call (to functions.*) or other (another recipient)."""
        m = _RECIPIENT.search(self._header)
        if m:
            return "call" if self._calls and m.group(1).startswith("functions.") else "other"
        ch = _CHANNEL.search(self._header)
        return "reasoning" if ch and ch.group(1) == "analysis" else "content"

    def _emit(self, text: str, reasoning: list[str], content: list[str]) -> None:
        kind = self._kind()
        if kind == "reasoning":
            if self._mode == "split":
                reasoning.append(text)
            elif self._mode == "raw":
                content.append(text)
        elif kind == "content":
            content.append(text)
        elif kind == "call":
            self._args += text

    def _close(self, reasoning: list[str], content: list[str], marker: str) -> None:
        kind = self._kind()
        if kind == "reasoning" and self._mode == "raw":
            content.append(marker)
        elif kind == "call":
            name = _RECIPIENT.search(self._header).group(1).removeprefix("functions.")
            try:
                args = json.loads(self._args)
            except json.JSONDecodeError:
                args = self._args
            content.append(f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>")
        self._header, self._args = "", ""


def _safe_end(text: str) -> int:
    """How much of a body's text can be given out: all but a tail that may be the start of a marker."""
    i = text.rfind("<")
    if i >= 0 and any(m.startswith(text[i:]) for m in (END, START)):
        return i
    return len(text)
