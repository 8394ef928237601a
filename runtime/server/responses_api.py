"""OpenAI's Responses API: POST /v1/responses (whole, or streamed as its typed events: response.created,
response.in_progress, response.output_item.added, response.content_part.added, response.output_text.delta / .done,
response.function_call_arguments.delta / .done, response.output_item.done, response.completed), function tools,
text.format (structured output), a thinking model's reasoning as a reasoning item before the message
(text/reasoning.py), previous_response_id over the in-memory store (response_store.py), and
GET / DELETE /v1/responses/{id}. One internal request under it, as under the other protocols.

status: "completed", or "incomplete" with incomplete_details.reason "max_output_tokens".
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..engine import Chunk, Stats
from ..text.chat_template import ChatTemplateError
from ..text.reasoning import reply_splitter
from .completion import begin, run, sampling_params
from .errors import APIError
from .messages import responses_input, responses_tools
from .schemas import ResponsesRequest
from .structured import openai_grammar, responses_grammar
from .tool_calls import ToolCallBuffer, parse_tool_calls

router = APIRouter()  # mounted at /v1 (app.py)

_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _usage(stats: Stats | None) -> dict:
    s = stats or Stats()
    return {
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": s.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": s.prompt_tokens + s.completion_tokens,
    }


def _message(text: str, status: str = "completed", mid: str | None = None) -> dict:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": mid or _id("msg"), "status": status, "role": "assistant", "content": [part]}


def _reasoning(text: str, rsid: str | None = None) -> dict:
    """A thinking model's reasoning (text/reasoning.py) as the API's reasoning item."""
    return {
        "type": "reasoning",
        "id": rsid or _id("rs"),
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": "completed",
    }


def _function_call(call: dict) -> dict:
    return {
        "type": "function_call",
        "id": _id("fc"),
        "call_id": _id("call"),
        "name": call["name"],
        "arguments": call["arguments"],
        "status": "completed",
    }


@router.post("/responses")
async def create(body: ResponsesRequest, request: Request):
    app = request.app.state
    store = app.responses
    history: list[dict] = []
    if body.previous_response_id is not None:
        got = store.get(body.previous_response_id)
        if got is None:
            raise APIError(
                404, f"previous response {body.previous_response_id!r} not found", param="previous_response_id"
            )
        history = got[1]
    messages = responses_input(body.instructions, body.input, history)
    if not any(m["role"] in ("user", "tool") for m in messages):
        raise APIError(400, "input must hold at least one message", param="input")
    tools = responses_tools(body.tools) if body.tool_choice != "none" else None
    if body.tool_choice not in (None, "auto", "none"):
        raise APIError(400, "tool_choice other than auto or none is not supported yet", param="tool_choice")
    names = frozenset(t["function"]["name"] for t in tools or ())
    grammar = responses_grammar(body.text)
    if body.grammar is not None:  # llama.cpp's GBNF field
        if grammar is not None:
            raise APIError(400, "text.format and grammar both constrain the reply: send one", param="grammar")
        grammar = openai_grammar(body)
    fields = {"temperature": body.temperature, "top_p": body.top_p}
    params = sampling_params(fields, body.max_output_tokens)
    rid, created = _id("resp"), int(time.time())
    lease = await app.host.acquire(body.model)
    try:
        try:
            effort = (body.reasoning or {}).get("effort")  # gpt-oss's template reads it
            kwargs = {"reasoning_effort": effort} if effort in ("low", "medium", "high") else {}
            ids = lease.llm.tokenizer.encode_chat(messages, tools=tools, **kwargs)
        except ChatTemplateError as e:
            raise APIError(400, f"the chat template failed: {e}", param="input") from None
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="input") from None
        base = {
            "id": rid,
            "object": "response",
            "created_at": created,
            "model": lease.name,
            "instructions": body.instructions,
            "previous_response_id": body.previous_response_id,
            "tools": body.tools or [],
            "tool_choice": body.tool_choice or "auto",
            "parallel_tool_calls": body.parallel_tool_calls,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "max_output_tokens": body.max_output_tokens,
            "text": body.text or {"format": {"type": "text"}},
            "metadata": body.metadata or {},
            "store": body.store,
            "error": None,
        }

        tok = lease.llm.tokenizer

        def splitter():  # reasoning apart, as a reasoning item (mode "split" always gives a splitter)
            return reply_splitter(tok, ids, calls=bool(tools))

        def finished(text: str, finish: str | None, stats: Stats | None, mid: str | None = None, rsid=None) -> dict:
            (r1, c1), (r2, c2) = (split := splitter()).push(text), split.finish()
            thought, text = r1 + r2, c1 + c2
            calls = []
            if tools:
                text, calls = parse_tool_calls(text, names)
            output = [_reasoning(thought, rsid)] if thought else []
            output += ([_message(text, mid=mid)] if text or not calls else []) + [_function_call(c) for c in calls]
            incomplete = finish == "length"
            response = {
                **base,
                "status": "incomplete" if incomplete else "completed",
                "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
                "output": output,
                "usage": _usage(stats),
            }
            if body.store:
                reply: dict = {"role": "assistant", "content": text}
                if thought:  # templates that keep reasoning before a call (gpt-oss) read it back
                    reply["reasoning_content"] = reply["thinking"] = thought
                if calls:
                    reply["tool_calls"] = [
                        {
                            "type": "function",
                            "id": o["call_id"],
                            "function": {"name": o["name"], "arguments": json.loads(o["arguments"] or "{}")},
                        }
                        for o in output
                        if o["type"] == "function_call"
                    ]
                store.put(rid, response, messages + [reply])
            return response

        if not body.stream:
            text, last = [], None
            async for chunk in run(lease.llm, ids, params, app.metrics, None, request, body.speculative, grammar):
                text.append(chunk.text)
                last = chunk
            stats = last.stats if last else None
            return JSONResponse(finished("".join(text), last.finish_reason if last else None, stats))
        chunks = await begin(run(lease.llm, ids, params, app.metrics, speculative=body.speculative, grammar=grammar))
        held = ToolCallBuffer(names) if tools else None
        response = lease.sse(
            _events(base, chunks, held, finished, splitter()),
            (chunks,),
        )
        lease = None  # the stream holds it now
        return response
    finally:
        if lease is not None:
            lease.release()


async def _events(base: dict, chunks: AsyncIterator[Chunk], held: ToolCallBuffer | None, finished, split):
    seq = 0

    def event(kind: str, data: dict) -> str:
        nonlocal seq
        seq += 1
        return f"event: {kind}\ndata: {_dumps({'type': kind, 'sequence_number': seq - 1, **data})}\n\n"

    pending = {**base, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    yield event("response.created", {"response": pending})
    yield event("response.in_progress", {"response": pending})
    mid, rsid = _id("msg"), _id("rs")
    opened, thinking, thought, text, finish, stats = False, False, [], [], None, None
    msg_index = 0  # 1 when a reasoning item comes first

    def think(piece: str):
        nonlocal thinking, msg_index
        out = ""
        if not thinking:
            item = {**_reasoning("", rsid), "content": [], "status": "in_progress"}
            out += event("response.output_item.added", {"output_index": 0, "item": item})
            part = {"type": "reasoning_text", "text": ""}
            out += event(
                "response.content_part.added", {"item_id": rsid, "output_index": 0, "content_index": 0, "part": part}
            )
            thinking, msg_index = True, 1
        thought.append(piece)
        loc = {"item_id": rsid, "output_index": 0, "content_index": 0}
        return out + event("response.reasoning_text.delta", {**loc, "delta": piece})

    def end_thinking():
        nonlocal thinking
        thinking = False
        full = "".join(thought)
        loc = {"item_id": rsid, "output_index": 0, "content_index": 0}
        out = event("response.reasoning_text.done", {**loc, "text": full})
        out += event("response.content_part.done", {**loc, "part": {"type": "reasoning_text", "text": full}})
        return out + event("response.output_item.done", {"output_index": 0, "item": _reasoning(full, rsid)})

    def delta(piece: str):
        nonlocal opened
        out = end_thinking() if thinking else ""
        if not opened:
            item = {**_message("", "in_progress", mid), "content": []}
            out += event("response.output_item.added", {"output_index": msg_index, "item": item})
            part = {"type": "output_text", "text": "", "annotations": []}
            loc = {"item_id": mid, "output_index": msg_index, "content_index": 0}
            out += event("response.content_part.added", {**loc, "part": part})
            opened = True
        loc = {"item_id": mid, "output_index": msg_index, "content_index": 0}
        return out + event("response.output_text.delta", {**loc, "delta": piece, "logprobs": []})

    def pieces_of(raw: str, last: bool = False):
        r, c = split.push(raw)
        if last:
            r2, c2 = split.finish()
            r, c = r + r2, c + c2
        return r, c

    async for chunk in chunks:
        text.append(chunk.text)
        finish, stats = chunk.finish_reason or finish, chunk.stats or stats
        r, c = pieces_of(chunk.text)
        if r:
            yield think(r)
        piece = held.push(c) if held else c
        if piece:
            yield delta(piece)
    r, c = pieces_of("", last=True)
    if r:
        yield think(r)
    piece = held.push(c) if held else c
    if piece:
        yield delta(piece)
    if held is not None:
        rest, _ = held.finish()
        if rest:
            yield delta(rest)
    if thinking:
        yield end_thinking()
    response = finished("".join(text), finish, stats, mid, rsid)
    for index, item in enumerate(response["output"]):
        if item["type"] == "reasoning":
            continue  # its events went out as it streamed
        if item["type"] == "message":
            if not opened:  # an empty reply: its message still opens
                yield delta("")
            full = item["content"][0]["text"]
            loc = {"item_id": mid, "output_index": index, "content_index": 0}
            yield event("response.output_text.done", {**loc, "text": full, "logprobs": []})
            yield event("response.content_part.done", {**loc, "part": item["content"][0]})
        else:
            added = {**item, "arguments": "", "status": "in_progress"}
            yield event("response.output_item.added", {"output_index": index, "item": added})
            loc = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", {**loc, "delta": item["arguments"]})
            yield event("response.function_call_arguments.done", {**loc, "arguments": item["arguments"]})
        yield event("response.output_item.done", {"output_index": index, "item": item})
    kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
    yield event(kind, {"response": response})


@router.get("/responses/{response_id}")
async def retrieve(response_id: str, request: Request):
    got = request.app.state.responses.get(response_id)
    if got is None:
        raise APIError(404, f"response {response_id!r} not found")
    return JSONResponse(got[0])


@router.delete("/responses/{response_id}")
async def delete(response_id: str, request: Request):
    if not request.app.state.responses.delete(response_id):
        raise APIError(404, f"response {response_id!r} not found")
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})
