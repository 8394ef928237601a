"""The model's tool calls out of its text: Qwen / Hermes style `<tool_call>{"name": ..., "arguments": {...}}
</tool_call>` blocks, as the chat templates of those models ask for them. Malformed output stays text.

    content, calls = parse_tool_calls(text, names)  # calls: [{"name", "arguments" (a JSON string)}], or []
                                                # with content = text unchanged when there is no well-formed call;
                                                # names: the request's tool names, which also let a reply that is
                                                # only such a JSON object (small models drop the tags) be a call
    held = ToolCallBuffer(); out = held.push(delta)   # streaming: text safe to show now (it holds back anything
    rest = held.finish()                               # from the first "<tool_call>" on); finish(): the rest
"""

from __future__ import annotations

import json
import re

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def _call(obj) -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    return {"name": obj["name"], "arguments": args if isinstance(args, str) else json.dumps(args)}


def parse_tool_calls(text: str, names: frozenset[str] | set[str] = frozenset()) -> tuple[str, list[dict]]:
    start = text.find(OPEN)
    if start < 0:
        bare = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        if names and bare.startswith("{"):
            try:
                call = _call(json.loads(bare))
            except json.JSONDecodeError:
                call = None
            if call is not None and call["name"] in names:
                return "", [call]
        return text, []
    calls = []
    for body in _BLOCK.findall(text[start:]):
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return text, []
        call = _call(obj)
        if call is None:
            return text, []
        calls.append(call)
    leftover = _BLOCK.sub("", text[start:]).strip()
    if not calls or leftover:
        return text, []
    return text[:start].rstrip(), calls


_FENCE = re.compile(r"\s*(`{1,3})([A-Za-z]*)(\s*)")


def _bare_call_start(text: str, names: frozenset[str] | set[str]) -> tuple[str, int]:
    """Whether a reply that starts as `text` is a bare JSON tool call (what small models write instead of the
    tags: `{"name": "weather", ...}`, maybe after a ```json fence): ("call" | "maybe" | "no", at), where text[:at]
    may be shown at once: a fence opener is streamed as it comes (nothing is retracted: a fenced call leaves its
    fence in the content), so a code reply's first token is not held. "maybe": too short to tell from text[at:];
    "no": it cannot become a call (a code block in another language, prose, JSON about something else)."""
    at = 0
    m = _FENCE.match(text)
    if m:
        ticks, lang, space = m.groups()
        at = m.end()
        if len(ticks) < 3:
            return ("maybe", 0) if at == len(text) and not lang else ("no", 0)
        if lang and not "json".startswith(lang.lower()):
            return "no", 0
        if not space:  # "```" or "```js": the language word may go on
            return "maybe", at
    rest = text[at:].lstrip()
    at = len(text) - len(rest)
    if not rest:
        return "maybe", at if m else 0
    if rest[0] != "{":
        return "no", 0
    compact = "".join(rest[:200].split())  # whitespace between JSON tokens (and inside the name: rare) dropped
    for name in names:
        head = '{"name":"' + "".join(name.split()) + '"'
        if compact.startswith(head):
            return "call", at
        if head.startswith(compact):
            return "maybe", at
    return "no", 0


class ToolCallBuffer:
    """Streams text until a tool call may begin; from there holds everything for parse_tool_calls at the end.
    A reply that opens with `{` is held only while it may still be a bare JSON call naming one of the tools
    (_bare_call_start); a code fence streams at once, what follows it is held only on the same terms."""

    def __init__(self, names: frozenset[str] | set[str] = frozenset()):
        self._names = names
        self._text = ""
        self._shown = 0
        self.holding = False
        self._watching = True  # the reply may still open as a bare JSON call

    def push(self, delta: str) -> str:
        self._text += delta
        if self.holding:
            return ""
        if self._names and self._watching:
            verdict, at = _bare_call_start(self._text, self._names)
            if verdict != "no":
                out, self._shown = self._text[self._shown : max(at, self._shown)], max(at, self._shown)
                self.holding = verdict == "call"  # then held to the end: parse_tool_calls decides there
                return out
            self._watching = False
        i = self._text.find(OPEN, self._shown)
        if i >= 0:
            self.holding = True
            out, self._shown = self._text[self._shown : i], i
            return out
        keep = next((n for n in range(min(len(OPEN) - 1, len(self._text)), 0, -1) if self._text.endswith(OPEN[:n])), 0)
        end = len(self._text) - keep
        out, self._shown = self._text[self._shown : end], max(self._shown, end)
        return out

    def finish(self) -> tuple[str, list[dict]]:
        """(text still to show, the tool calls): held text that is not a well-formed call is shown as text."""
        held = self._text[self._shown :]
        if not self.holding:
            return held, []
        content, calls = parse_tool_calls(held, self._names)
        return ("", calls) if calls and not content else (held, []) if not calls else (content, calls)
