"""The OpenAI-compatible API: GET /v1/models, POST /v1/chat/completions and /v1/completions (streamed as
server-sent events ending in `data: [DONE]`, or whole), with usage (prompt_tokens_details.cached_tokens),
logprobs, stop strings, seeds, fill-in-the-middle (`suffix`) and tool calls."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..engine import Chunk, Stats
from ..text.chat_template import ChatTemplateError
from ..text.reasoning import reply_splitter
from .completion import begin, run, sampling_params
from .embeddings import embed
from .errors import APIError
from .fim import fim_prompt
from .messages import openai_messages
from .schemas import ChatCompletionRequest, CompletionRequest, EmbeddingsRequest
from .structured import openai_grammar
from .tool_calls import ToolCallBuffer, parse_tool_calls

MAX_N = 16  # choices one request may ask for (n)
router = APIRouter()  # mounted at /v1 and at the root (app.py): clients given a bare base URL send /chat/completions


def _usage(stats: Stats | None) -> dict:
    """OpenAI's usage; speculative drafts as its predicted-output counts (draft tokens kept, and thrown away)."""
    s = stats or Stats()
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": s.cached_tokens},
        "completion_tokens_details": {
            "accepted_prediction_tokens": s.draft_accepted,
            "rejected_prediction_tokens": s.draft_proposed - s.draft_accepted,
        },
    }


def _finish(reason: str | None) -> str | None:
    return "length" if reason == "length" else "stop" if reason else None


# one compact encoder for every event: json.dumps(obj, separators=...) builds a new one per call
_dumps = json.JSONEncoder(separators=(",", ":")).encode


def _sse(obj) -> str:
    return f"data: {_dumps(obj)}\n\n"


def _chat_logprobs(tok, chunk: Chunk) -> list[dict]:
    out = []
    for lp in chunk.logprobs or ():
        piece = tok.decode([lp.token_id], special=True)
        out.append(
            {
                "token": piece,
                "logprob": lp.logprob,
                "bytes": list(piece.encode()),
                "top_logprobs": [
                    {"token": (t := tok.decode([i], special=True)), "logprob": v, "bytes": list(t.encode())}
                    for i, v in lp.top
                ],
            }
        )
    return out


@router.get("/models")
async def models(request: Request):
    host = request.app.state.host
    data = [
        {
            "id": m["name"],
            "object": "model",
            "created": m["created"],
            "owned_by": "localllm",
            "context_length": m["context_length"],
            "max_model_len": m["context_length"],
            "trained_context_length": m["trained_context_length"],
        }
        for m in host.models()
    ]
    return {"object": "list", "data": data}


@router.post("/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request):
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    params = sampling_params(body.model_dump(), max_tokens)
    n_top = (body.top_logprobs or 0) if body.logprobs else None
    if n_top is not None and not 0 <= n_top <= 20:
        raise APIError(400, "top_logprobs must be in [0, 20]", param="top_logprobs")
    messages = openai_messages(body.messages)
    if body.tool_choice not in (None, "auto", "none"):
        choice = body.tool_choice if isinstance(body.tool_choice, str) else "a named function"
        raise APIError(
            400,
            f'tool_choice {choice!r} is not supported yet: localllm cannot force a tool call (use "auto" or "none")',
            param="tool_choice",
        )
    tools = body.tools if body.tools and body.tool_choice != "none" else None
    names = frozenset(t.get("function", {}).get("name") for t in tools or () if isinstance(t.get("function"), dict))
    if body.reasoning_format not in (None, "none", "auto", "deepseek"):
        raise APIError(400, "reasoning_format must be none, auto or deepseek", param="reasoning_format")
    mode = "raw" if body.reasoning_format == "none" else "split"
    template_kwargs = body.chat_template_kwargs or {}
    if body.reasoning_effort is not None:  # gpt-oss's template reads it
        template_kwargs = {"reasoning_effort": body.reasoning_effort, **template_kwargs}
    tok = None
    prompt: list[int] = []

    def prepare(llm) -> list[int]:
        nonlocal tok, prompt
        tok = llm.tokenizer
        try:
            prompt = tok.encode_chat(messages, tools=tools, **template_kwargs)
            return prompt
        except ChatTemplateError as e:
            raise APIError(400, f"the chat template failed: {e}", param="messages") from None
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="messages") from None

    async def whole(chunks: AsyncIterator[Chunk]) -> tuple[dict, Stats | None]:
        text, finish, stats, lps = [], None, None, []
        async for chunk in chunks:
            text.append(chunk.text)
            if n_top is not None:
                lps += _chat_logprobs(tok, chunk)
            finish, stats = chunk.finish_reason or finish, chunk.stats or stats
        content, reasoning = "".join(text), ""
        split = reply_splitter(tok, prompt, mode, calls=bool(tools))
        if split is not None:
            (r1, c1), (r2, c2) = split.push(content), split.finish()
            content, reasoning = c1 + c2, r1 + r2
        message: dict = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = reasoning
        reason = _finish(finish)
        if tools:
            rest, calls = parse_tool_calls(content, names)
            if calls:
                message = {**message, "content": rest or None, "tool_calls": _calls(calls)}
                reason = "tool_calls"
        choice = {"index": 0, "message": message, "finish_reason": reason, "logprobs": None}
        if n_top is not None:
            choice["logprobs"] = {"content": lps}
        return choice, stats

    async def streamed(chunks: AsyncIterator[Chunk]) -> AsyncIterator[dict]:
        def choice(delta: dict, reason=None, logprobs=None) -> dict:
            return {"index": 0, "delta": delta, "finish_reason": reason, "logprobs": logprobs}

        yield choice({"role": "assistant", "content": ""})
        held = ToolCallBuffer(names) if tools else None
        split = reply_splitter(tok, prompt, mode, calls=bool(tools))
        reason = None
        async for chunk in chunks:
            thought, text = split.push(chunk.text) if split else ("", chunk.text)
            if thought:
                yield choice({"reasoning_content": thought})
            text = held.push(text) if held else text
            lp = {"content": _chat_logprobs(tok, chunk)} if n_top is not None and chunk.logprobs else None
            if text or lp:
                yield choice({"content": text}, logprobs=lp)
            if chunk.finish_reason is not None:
                reason = _finish(chunk.finish_reason)
        if split is not None:
            thought, text = split.finish()
            if thought:
                yield choice({"reasoning_content": thought})
            text = held.push(text) if held else text
            if text:
                yield choice({"content": text})
        if held is not None:
            rest, calls = held.finish()
            if rest:
                yield choice({"content": rest})
            if calls:
                yield choice({"tool_calls": [{"index": i, **c} for i, c in enumerate(_calls(calls))]})
                reason = "tool_calls"
        yield choice({}, reason)

    return await _respond(
        request, body, params, n_top, ("chatcmpl", "chat.completion", "chat.completion.chunk"), prepare, whole, streamed
    )


@router.post("/completions")
async def completions(body: CompletionRequest, request: Request):
    max_tokens = body.max_tokens if body.max_tokens is not None else 16  # OpenAI's default for completions
    params = sampling_params(body.model_dump(), max_tokens)
    n_top = body.logprobs
    if n_top is not None and not 0 <= n_top <= 20:
        raise APIError(400, "logprobs must be in [0, 20]", param="logprobs")
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        if len(prompt) != 1:
            raise APIError(400, "one prompt per request: localllm returns one choice", param="prompt")
        prompt = prompt[0]
    echo = prompt if body.echo and isinstance(prompt, str) else ""
    tok = None

    def prepare(llm) -> list[int]:
        nonlocal tok
        tok = llm.tokenizer
        try:
            if body.suffix is not None:
                if not isinstance(prompt, str):
                    raise APIError(400, "suffix needs a text prompt", param="suffix")
                return fim_prompt(tok, prompt, body.suffix, budget=llm.ctx_size - max_tokens)
            if isinstance(prompt, str):
                if not prompt:
                    raise APIError(400, "prompt must not be empty", param="prompt")
                llm.check_text_fits(len(prompt.encode()))
                return llm.tokenize(prompt)
            return list(prompt)
        except ValueError as e:
            raise APIError(400, str(e), param="suffix" if body.suffix is not None else "prompt") from None

    def legacy_logprobs(chunk: Chunk, offset: int) -> dict | None:
        if n_top is None or not chunk.logprobs:
            return None
        pieces = [tok.decode([lp.token_id], special=True) for lp in chunk.logprobs]
        return {
            "tokens": pieces,
            "token_logprobs": [lp.logprob for lp in chunk.logprobs],
            "top_logprobs": [{tok.decode([i], special=True): v for i, v in lp.top} for lp in chunk.logprobs],
            "text_offset": [offset],
        }

    async def whole(chunks: AsyncIterator[Chunk]) -> tuple[dict, Stats | None]:
        text, finish, stats, offset = [echo], None, None, len(echo)
        merged: dict | None = (
            {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []} if n_top is not None else None
        )
        async for chunk in chunks:
            if merged is not None and (lp := legacy_logprobs(chunk, offset)):
                for k in merged:
                    merged[k] += lp[k]
            text.append(chunk.text)
            offset += len(chunk.text)
            finish, stats = chunk.finish_reason or finish, chunk.stats or stats
        return {"text": "".join(text), "index": 0, "finish_reason": _finish(finish), "logprobs": merged}, stats

    async def streamed(chunks: AsyncIterator[Chunk]) -> AsyncIterator[dict]:
        def choice(text: str, reason=None, logprobs=None) -> dict:
            return {"text": text, "index": 0, "finish_reason": reason, "logprobs": logprobs}

        if echo:
            yield choice(echo)
        offset = len(echo)
        async for chunk in chunks:
            reason = _finish(chunk.finish_reason)
            if chunk.text or reason or chunk.logprobs:
                yield choice(chunk.text, reason, legacy_logprobs(chunk, offset))
            offset += len(chunk.text)

    return await _respond(
        request, body, params, n_top, ("cmpl", "text_completion", "text_completion"), prepare, whole, streamed
    )


async def _respond(request: Request, body, params, n_top, kinds, prepare, whole, streamed):
    """The scaffolding chat and completions share: the model's lease (released when the response is done, or
    held by the stream), the envelope (id, object, created, model), usage, and the stream's framing (SSE, the
    usage frame with include_usage, [DONE]). kinds: (id prefix, object, object of a stream chunk).
    prepare(llm) -> the prompt's ids (APIError on bad input); whole(chunks) -> (choice, stats) of a whole
    response; streamed(chunks) -> the stream's choices. n > 1: n requests of the same prompt decode together in
    the engine's steps (the prefix cache computes the prompt once), seeds seed, seed + 1, ... where one is given."""
    app = request.app.state
    rid, created = f"{kinds[0]}-{uuid.uuid4().hex[:24]}", int(time.time())
    grammar = openai_grammar(body)
    n = body.n
    if not 1 <= n <= MAX_N:
        raise APIError(400, f"n must be in [1, {MAX_N}]", param="n")
    each = [params if params.seed is None or i == 0 else replace(params, seed=params.seed + i) for i in range(n)]
    lease = await app.host.acquire(body.model)
    try:
        llm = lease.llm
        ids = prepare(llm)
        if not body.stream:
            tasks = [
                asyncio.ensure_future(whole(run(llm, ids, p, app.metrics, n_top, request, body.speculative, grammar)))
                for p in each
            ]
            try:
                done = await asyncio.gather(*tasks)
            except BaseException:  # one failed (a 400): the others are cancelled, their engine requests with them
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
            head = {"id": rid, "object": kinds[1], "created": created, "model": lease.name}
            choices = [{**choice, "index": i} for i, (choice, _) in enumerate(done)]
            return JSONResponse({**head, "choices": choices, "usage": _usage_of([st for _, st in done])})
        streams = []
        try:
            for p in each:
                streams.append(
                    await begin(run(llm, ids, p, app.metrics, n_top, speculative=body.speculative, grammar=grammar))
                )
        except BaseException:
            for c in streams:
                await c.aclose()
            raise
        head = {"id": rid, "object": kinds[2], "created": created, "model": lease.name}
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        response = lease.sse(
            _events(head, streamed, streams, include_usage),
            tuple(streams),
        )
        lease = None  # the stream holds it now
        return response
    finally:
        if lease is not None:
            lease.release()


def _usage_of(stats: list[Stats | None]) -> dict:
    """The usage of n choices of one prompt: the prompt once, every choice's completion tokens."""
    u = _usage(stats[0])
    if len(stats) > 1:
        extra = sum((s.completion_tokens if s else 0) for s in stats[1:])
        u["completion_tokens"] += extra
        u["total_tokens"] += extra
    return u


async def _events(head: dict, streamed, streams: list, include_usage: bool) -> AsyncIterator[str]:
    last: dict[int, Stats] = {}
    pre = f'data: {_dumps(head)[:-1]},"choices":['  # the envelope, encoded once: each event adds its choice

    async def tapped(i: int, chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
        async for chunk in chunks:
            if chunk.stats is not None:
                last[i] = chunk.stats
            yield chunk

    if len(streams) == 1:
        async for choice in streamed(tapped(0, streams[0])):
            yield f"{pre}{_dumps(choice)}]}}\n\n"
    else:  # the n choices' events as they come, each with its index
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int) -> None:
            try:
                async for choice in streamed(tapped(i, streams[i])):
                    await queue.put((i, choice))
            finally:
                await queue.put((i, None))

        tasks = [asyncio.create_task(pump(i)) for i in range(len(streams))]
        try:
            left = len(tasks)
            while left:
                i, choice = await queue.get()
                if choice is None:
                    left -= 1
                    continue
                yield f"{pre}{_dumps({**choice, 'index': i})}]}}\n\n"
        finally:
            for t in tasks:
                t.cancel()
    if include_usage:
        yield _sse({**head, "choices": [], "usage": _usage_of([last.get(i) for i in range(len(streams))])})
    yield "data: [DONE]\n\n"


def _calls(calls: list[dict]) -> list[dict]:
    return [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]


@router.post("/embeddings")
async def embeddings(body: EmbeddingsRequest, request: Request):
    """The inputs' embeddings (engine/embedding.py: the model's pooling, or mean; L2-normalised), as floats or, as
    the openai SDK asks by default, base64 of little-endian float32."""
    items = body.input
    if isinstance(items, str) or (isinstance(items, list) and items and isinstance(items[0], int)):
        items = [items]
    lease = await request.app.state.host.acquire(body.model)
    try:
        d = lease.llm.model.spec.d_model
        if body.dimensions is not None and body.dimensions != d:
            raise APIError(400, f"dimensions: this model's embeddings have {d}", param="dimensions")
        vectors, n_tokens = await embed(lease.llm, items, truncate=False, param="input")
        name = lease.name
    finally:
        lease.release()
    data = []
    for i, v in enumerate(vectors):
        e = base64.b64encode(v.astype("<f4").tobytes()).decode() if body.encoding_format == "base64" else v.tolist()
        data.append({"object": "embedding", "index": i, "embedding": e})
    return JSONResponse(
        {"object": "list", "data": data, "model": name, "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}
    )
