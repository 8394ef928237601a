"""A conversation as a protocol sends it -> the messages the chat template renders: the one translation of OpenAI's
and Ollama's message shapes, refusing (a 400 naming the field) what the model could not see instead of dropping it.

    messages = openai_messages(body.messages)     # /v1/chat/completions
    messages = ollama_messages(body.messages)     # /api/chat
    messages = anthropic_messages(body.system, body.messages)   # /v1/messages
    tools = anthropic_tools(body.tools)           # Anthropic's {name, description, input_schema} -> OpenAI's
    messages = responses_input(body.instructions, body.input)   # /v1/responses (its input items)
    tools = responses_tools(body.tools)           # its flat function tools -> OpenAI chat's

The template's shape (what Qwen's, Llama's and Hermes-style templates read): {"role", "content": str}, an
assistant's "tool_calls": [{"type": "function", "function": {"name", "arguments": dict}}] (OpenAI sends arguments
as a JSON string, the template renders them with `tojson`: a string there would be quoted, and the model copies
that form), a tool result's "tool_call_id" / "name". Roles: system (and OpenAI's "developer"), user, assistant,
tool. Content parts other than text (images, audio, files) are refused until a model that reads them runs.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import APIError

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def _role(role: str, where: str) -> str:
    if role not in ROLES:
        raise APIError(
            400, f"{where}.role: unknown role {role!r} (expected one of {', '.join(ROLES)})", param=f"{where}.role"
        )
    return ROLES[role]


def _arguments(value: Any, where: str) -> dict:
    """A call's arguments as the object the template renders: a JSON string (OpenAI) or an object (Ollama)."""
    if isinstance(value, dict):
        return value
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError as e:
            raise APIError(400, f"{where}: arguments are not valid JSON: {e}", param=where) from None
        if isinstance(parsed, dict):
            return parsed
    raise APIError(400, f"{where}: arguments must be a JSON object", param=where)


def _tool_calls(calls: list[dict], where: str) -> list[dict]:
    out = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise APIError(400, f"{at}: a tool call needs function.name", param=at)
        entry = {
            "type": "function",
            "function": {"name": fn["name"], "arguments": _arguments(fn.get("arguments"), f"{at}.function.arguments")},
        }
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        out.append(entry)
    return out


def _text(content: Any, where: str) -> str:
    """OpenAI content: a string, null, or parts of which only text ones are read; other parts are refused."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", None) and isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
            continue
        at = f"{where}.content[{j}]"
        what = f"a {kind!r} part" if kind else "a part without text"
        raise APIError(400, f"{at}: {what}: this model reads text only", param=at)
    return "".join(out)


def _reasoning(d: dict, m) -> dict:
    """An assistant turn's reasoning for the template, under both names templates read: `reasoning_content` (Qwen3,
    DeepSeek) and `thinking` (gpt-oss). Most templates drop it from earlier turns; gpt-oss keeps it before a call."""
    text = m.reasoning_content or m.thinking
    if text and d["role"] == "assistant":
        d["reasoning_content"] = d["thinking"] = text
    return d


def openai_messages(messages: list) -> list[dict]:
    """body.messages (schemas.ChatMessage) of /v1/chat/completions -> the template's messages."""
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        d: dict = {"role": _role(m.role, where), "content": _text(m.content, where)}
        if m.tool_calls:
            d["tool_calls"] = _tool_calls(m.tool_calls, where)
        if m.name:
            d["name"] = m.name
        if m.tool_call_id:
            d["tool_call_id"] = m.tool_call_id
        out.append(_reasoning(d, m))
    return out


def ollama_messages(messages: list) -> list[dict]:
    """body.messages of /api/chat -> the template's messages: content is a string (Ollama's), images refused."""
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if m.images:
            raise APIError(400, f"{where}.images: this model reads text only", param=f"{where}.images")
        if m.content is not None and not isinstance(m.content, str):
            raise APIError(400, f"{where}.content must be a string", param=f"{where}.content")
        d: dict = {"role": _role(m.role, where), "content": m.content or ""}
        if m.tool_calls:
            d["tool_calls"] = _tool_calls(m.tool_calls, where)
        name = m.tool_name or m.name
        if name:
            d["name"] = name
        out.append(_reasoning(d, m))
    return out


def _blocks_text(content: Any, where: str) -> str:
    """Anthropic text content: a string or text blocks (a tool result's content too); others are refused."""
    if isinstance(content, str):
        return content
    out = []
    for j, block in enumerate(content or ()):
        at = f"{where}[{j}]"
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            out.append(block["text"])
        else:
            kind = block.get("type") if isinstance(block, dict) else None
            raise APIError(400, f"{at}: a {kind!r} block: this model reads text only", param=at)
    return "".join(out)


def anthropic_messages(system: Any, messages: list) -> list[dict]:
    """Anthropic's system and messages -> the template's messages: text blocks joined; an assistant's tool_use
    blocks become its tool_calls (input as the arguments object); a user's tool_result blocks become tool messages
    (tool_call_id = tool_use_id) in their order, before the user's own text. Images and documents are refused."""
    out: list[dict] = []
    if system:
        out.append({"role": "system", "content": _blocks_text(system, "system")})
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if m.role not in ("user", "assistant"):
            raise APIError(400, f"{where}.role: unknown role {m.role!r} (user or assistant)", param=f"{where}.role")
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        text, calls, results = [], [], []
        for j, block in enumerate(m.content):
            at = f"{where}.content[{j}]"
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                text.append(block["text"])
            elif kind == "tool_use" and m.role == "assistant" and isinstance(block.get("name"), str):
                call = {
                    "type": "function",
                    "function": {"name": block["name"], "arguments": _arguments(block.get("input"), f"{at}.input")},
                }
                if isinstance(block.get("id"), str):
                    call["id"] = block["id"]
                calls.append(call)
            elif kind == "tool_result" and m.role == "user":
                result = {"role": "tool", "content": _blocks_text(block.get("content") or "", f"{at}.content")}
                if isinstance(block.get("tool_use_id"), str):
                    result["tool_call_id"] = block["tool_use_id"]
                results.append(result)
            else:
                what = f"a {kind!r} block" if kind else "a block without a type"
                raise APIError(400, f"{at}: {what} is not supported here (text, tool_use, tool_result)", param=at)
        out += results
        if m.role == "assistant":
            d: dict = {"role": "assistant", "content": "".join(text)}
            if calls:
                d["tool_calls"] = calls
            out.append(d)
        elif text or not results:
            out.append({"role": "user", "content": "".join(text)})
    return out


def anthropic_tools(tools: list | None) -> list[dict] | None:
    """Anthropic's tools ({name, description, input_schema}) as the template takes OpenAI's."""
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise APIError(400, f"tools[{i}]: a tool needs a name", param=f"tools[{i}]")
        fn = {"name": t["name"], "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out


def _input_text(content: Any, where: str) -> str:
    """Responses content: a string or input_text / output_text parts; images and files are refused."""
    if isinstance(content, str):
        return content
    out = []
    for j, part in enumerate(content or ()):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            out.append(part["text"])
        else:
            raise APIError(400, f"{at}: a {kind!r} part: this model reads text only", param=at)
    return "".join(out)


def responses_input(instructions: str | None, items: Any, history: list[dict] | None = None) -> list[dict]:
    """The Responses API's instructions and input (a string, or items: messages, function_call and
    function_call_output) after an earlier response's conversation (history) -> the template's messages. A
    function_call joins the assistant message before it (or starts one); its output becomes a tool message."""
    out = [dict(m) for m in history or () if m.get("role") != "system"]
    if instructions:
        out.insert(0, {"role": "system", "content": instructions})
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
        return out
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise APIError(400, f"{where}: an input item must be an object", param=where)
        kind = item.get("type", "message")
        if kind == "message":
            role = _role(item.get("role", "user"), where)
            out.append({"role": role, "content": _input_text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise APIError(400, f"{where}: a function_call needs a name", param=where)
            call = {
                "type": "function",
                "function": {
                    "name": item["name"],
                    "arguments": _arguments(item.get("arguments"), f"{where}.arguments"),
                },
            }
            if isinstance(item.get("call_id"), str):
                call["id"] = item["call_id"]
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _input_text(output, f"{where}.output")
            msg = {"role": "tool", "content": text}
            if isinstance(item.get("call_id"), str):
                msg["tool_call_id"] = item["call_id"]
            out.append(msg)
        else:
            raise APIError(400, f"{where}: input items of type {kind!r} are not supported", param=f"{where}.type")
    return out


def responses_tools(tools: list | None) -> list[dict] | None:
    """The Responses API's function tools ({"type": "function", "name", "description", "parameters"}) as the
    template takes OpenAI chat's; hosted tools (web_search, file_search, ...) are refused."""
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind != "function" or not isinstance(t.get("name"), str):
            raise APIError(400, f"tools[{i}]: only function tools run here (got {kind!r})", param=f"tools[{i}]")
        fn = {"name": t["name"], "parameters": t.get("parameters") or {"type": "object", "properties": {}}}
        if isinstance(t.get("description"), str):
            fn["description"] = t["description"]
        out.append({"type": "function", "function": fn})
    return out
