"""Anthropic's Messages API: POST /v1/messages (whole, or streamed as its server-sent events: message_start,
content_block_start / _delta / _stop, message_delta with the stop reason and usage, message_stop) with tools
(tool_use blocks out, tool_result blocks in), and POST /v1/messages/count_tokens. The same internal request as the
other protocols: messages.py translates the conversation, completion.run generates. Errors in Anthropic's shape
(errors.py).

stop_reason: "end_turn" (the model ended), "stop_sequence" (with the one that matched), "max_tokens", "tool_use".
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..engine import Chunk, Stats
from ..text.chat_template import ChatTemplateError
from ..text.reasoning import reply_splitter
from .completion import begin, run, sampling_params
from .errors import APIError
from .messages import anthropic_messages, anthropic_tools
from .schemas import AnthropicCountTokensRequest, AnthropicMessagesRequest
from .structured import anthropic_grammar
from .tool_calls import ToolCallBuffer, parse_tool_calls

router = APIRouter()  # mounted at /v1 (app.py)

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {_dumps({'type': kind, **data})}\n\n"


def _usage(stats: Stats | None, output: bool = True) -> dict:
    s = stats or Stats()
    u = {
        "input_tokens": s.prompt_tokens - s.cached_tokens,
        "cache_read_input_tokens": s.cached_tokens,
        "cache_creation_input_tokens": 0,
    }
    return {**u, "output_tokens": s.completion_tokens} if output else u


def _stop_reason(finish: str | None, stats: Stats | None, calls: list) -> tuple[str, str | None]:
    if calls:
        return "tool_use", None
    if finish == "length":
        return "max_tokens", None
    if stats is not None and stats.stop_string is not None:
        return "stop_sequence", stats.stop_string
    return "end_turn", None


def _thinking(text: str) -> dict:
    return {"type": "thinking", "thinking": text, "signature": ""}


def _tool_use(call: dict) -> dict:
    try:
        args = json.loads(call["arguments"])
    except json.JSONDecodeError:
        args = {}
    return {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}", "name": call["name"], "input": args}


_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}


def _thinking_off(body) -> bool:
    return ((getattr(body, "thinking", None) or {}).get("type")) == "disabled"


def _prompt(llm, body) -> tuple[list[int], list[dict] | None]:
    """The prompt's ids and the tools offered (None: none, or tool_choice none). thinking {"type": "disabled"}
    reaches the template's own switch (Qwen3's enable_thinking)."""
    messages = anthropic_messages(body.system, body.messages)
    tools = anthropic_tools(body.tools)
    choice = (getattr(body, "tool_choice", None) or {}).get("type", "auto")
    if choice == "none":
        tools = None
    elif choice != "auto":
        raise APIError(
            400,
            f"tool_choice {choice!r} is not supported yet: localllm cannot force a tool call (use auto or none)",
            param="tool_choice",
        )
    try:
        extra = {"enable_thinking": False} if _thinking_off(body) else {}
        effort = (getattr(body, "output_config", None) or {}).get("effort")
        if effort in _EFFORT:  # gpt-oss's template reads it; Anthropic's two levels above high are its high
            extra["reasoning_effort"] = _EFFORT[effort]
        return llm.tokenizer.encode_chat(messages, tools=tools, **extra), tools
    except ChatTemplateError as e:
        raise APIError(400, f"the chat template failed: {e}", param="messages") from None
    except (TypeError, ValueError) as e:
        raise APIError(400, str(e), param="messages") from None


@router.post("/messages")
async def messages(body: AnthropicMessagesRequest, request: Request):
    if body.max_tokens < 1:
        raise APIError(400, "max_tokens must be at least 1", param="max_tokens")
    fields = {"temperature": body.temperature, "top_p": body.top_p, "top_k": body.top_k, "stop": body.stop_sequences}
    params = sampling_params(fields, body.max_tokens)
    app = request.app.state
    grammar = anthropic_grammar(body)  # output_config.format, or llama.cpp's json_schema and grammar fields
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    lease = await app.host.acquire(body.model)
    try:
        ids, tools = _prompt(lease.llm, body)
        names = frozenset(t["function"]["name"] for t in tools or ())
        # a thinking model's reasoning as thinking blocks (text/reasoning.py), unless the request disabled thinking
        mode = "hide" if _thinking_off(body) else "split"
        split = reply_splitter(lease.llm.tokenizer, ids, mode, calls=bool(tools))
        head = {"id": mid, "type": "message", "role": "assistant", "model": lease.name}
        if not body.stream:
            text, last = [], None
            async for chunk in run(lease.llm, ids, params, app.metrics, None, request, body.speculative, grammar):
                text.append(chunk.text)
                last = chunk
            content, calls, thought = "".join(text), [], ""
            if split is not None:
                (r1, c1), (r2, c2) = split.push(content), split.finish()
                thought, content = r1 + r2, c1 + c2
            if tools:
                content, calls = parse_tool_calls(content, names)
            stats = last.stats if last else None
            reason, sequence = _stop_reason(last.finish_reason if last else None, stats, calls)
            blocks = [_thinking(thought)] if thought else []
            blocks += [{"type": "text", "text": content}] if content or not calls else []
            blocks += [_tool_use(c) for c in calls]
            return JSONResponse(
                {**head, "content": blocks, "stop_reason": reason, "stop_sequence": sequence, "usage": _usage(stats)}
            )
        chunks = await begin(run(lease.llm, ids, params, app.metrics, speculative=body.speculative, grammar=grammar))
        response = lease.sse(
            _events(head, len(ids), chunks, ToolCallBuffer(names) if tools else None, split),
            (chunks,),
        )
        lease = None  # the stream holds it now
        return response
    finally:
        if lease is not None:
            lease.release()


async def _events(head: dict, n_prompt: int, chunks: AsyncIterator[Chunk], held: ToolCallBuffer | None, split):
    start = {**head, "content": [], "stop_reason": None, "stop_sequence": None}
    start["usage"] = {"input_tokens": n_prompt, "output_tokens": 0}
    yield _event("message_start", {"message": start})
    index, text_open, think_open, finish, stats = 0, False, False, None, None

    def think(delta: str):  # the thinking block comes first, closed before any text
        nonlocal think_open
        out = ""
        if not think_open:
            block = {"type": "thinking", "thinking": "", "signature": ""}
            out += _event("content_block_start", {"index": index, "content_block": block})
            think_open = True
        return out + _event(
            "content_block_delta", {"index": index, "delta": {"type": "thinking_delta", "thinking": delta}}
        )

    def close_think():
        nonlocal think_open, index
        think_open = False
        index += 1
        return _event("content_block_stop", {"index": index - 1})

    def text(delta: str):
        nonlocal text_open
        out = ""
        if not text_open:
            out += _event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
            text_open = True
        return out + _event("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": delta}})

    async def pieces():
        nonlocal finish, stats
        async for chunk in chunks:
            finish, stats = chunk.finish_reason or finish, chunk.stats or stats
            yield split.push(chunk.text) if split else ("", chunk.text)
        if split:
            yield split.finish()

    async for thought, piece in pieces():
        if thought:
            yield think(thought)
        piece = held.push(piece) if held else piece
        if piece:
            if think_open:
                yield close_think()
            yield text(piece)
    if think_open:
        yield close_think()
    calls: list = []
    if held is not None:
        rest, calls = held.finish()
        if rest:
            yield text(rest)
    if text_open or not calls:
        if not text_open:  # an empty reply still has its (empty) text block
            yield _event("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}})
        yield _event("content_block_stop", {"index": index})
        index += 1
    for call in calls:
        block = _tool_use(call)
        yield _event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
        partial = _dumps(block["input"])
        yield _event(
            "content_block_delta", {"index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}
        )
        yield _event("content_block_stop", {"index": index})
        index += 1
    reason, sequence = _stop_reason(finish, stats, calls)
    usage = {"output_tokens": stats.completion_tokens if stats else 0}
    yield _event("message_delta", {"delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage})
    yield _event("message_stop", {})


@router.post("/messages/count_tokens")
async def count_tokens(body: AnthropicCountTokensRequest, request: Request):
    lease = await request.app.state.host.acquire(body.model)
    try:
        ids, _ = _prompt(lease.llm, body)
        return JSONResponse({"input_tokens": len(ids)})
    finally:
        lease.release()
