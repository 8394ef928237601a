"""Ollama's API over the same engine: GET /api/tags, /api/version, /api/ps, POST /api/show, /api/chat and
/api/generate (NDJSON streaming by default, `options` mapped to sampling, `suffix` for fill-in-the-middle, `raw`,
`keep_alive`: how long the model stays loaded once idle, host.py). Errors are {"error": "..."} (errors.py)."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from .. import __version__
from ..model.gguf import GGUFFile
from ..text.chat_template import ChatTemplateError
from ..text.reasoning import reply_splitter
from .completion import begin, run, sampling_params
from .embeddings import embed
from .errors import APIError
from .fim import fim_prompt
from .host import DEFAULT_KEEP_ALIVE
from .messages import ollama_messages
from .schemas import OllamaChatRequest, OllamaEmbedRequest, OllamaGenerateRequest, OllamaOptions, OllamaShowRequest
from .structured import ollama_grammar
from .tool_calls import ToolCallBuffer, parse_tool_calls

router = APIRouter(prefix="/api")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc).isoformat().replace("+00:00", "Z")


_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
FOREVER_S = 1e9  # a keep_alive longer than this (31 years) is for ever
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def keep_alive_seconds(value) -> float | None:
    """Ollama's keep_alive -> seconds a model stays loaded once idle; None: for ever. A number is seconds, a
    string a Go duration ("5m", "1h30m", "300ms") or a number; negative means for ever; unset, 5 minutes."""
    if value is None or value == "":
        return DEFAULT_KEEP_ALIVE
    seconds = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            body = text[1:] if text[:1] in ("+", "-") else text
            parts = list(_PART.finditer(body))
            if body and parts and "".join(m.group(0) for m in parts) == body:
                seconds = sum(float(m.group(1)) * _UNITS[m.group(2)] for m in parts)
                seconds = -seconds if text.startswith("-") else seconds
    if seconds is None or math.isnan(seconds):
        raise APIError(
            400, f'keep_alive must be a duration ("5m", "30s", "1h") or seconds, got {value!r}', "keep_alive"
        )
    return None if seconds < 0 or seconds > FOREVER_S else seconds


def _params(options: OllamaOptions | None):
    o = options.model_dump() if options else {}
    n = o.get("num_predict")
    return sampling_params(o, None if n is None or n < 0 else n)


def _final(stats, reason: str | None, started: float) -> dict:
    return {
        "done": True,
        "done_reason": "length" if reason == "length" else "stop",
        "total_duration": int((time.perf_counter() - started) * 1e9),
        "prompt_eval_count": stats.prompt_tokens if stats else 0,
        "eval_count": stats.completion_tokens if stats else 0,
        "eval_duration": int(stats.completion_tokens / stats.decode_tps * 1e9) if stats and stats.decode_tps else 0,
    }


def _model_info(m: dict) -> dict:
    return {
        "name": m["name"],
        "model": m["name"],
        "modified_at": _iso(m["created"]),
        "size": m["size"],
        "digest": "",
        "details": {"format": "gguf"},
    }


@router.get("/version")
async def version():
    return {"version": __version__}


@router.get("/tags")
async def tags(request: Request):
    return {"models": [_model_info(m) for m in request.app.state.host.models()]}


@router.get("/ps")
async def ps(request: Request):
    models = [m for m in request.app.state.host.models() if m["loaded"]]
    return {
        "models": [
            {**_model_info(m), "context_length": m["context_length"], "expires_at": _iso(m["expires_at"])}
            for m in models
        ]
    }


@router.post("/show")
async def show(body: OllamaShowRequest, request: Request):
    name = body.model or body.name
    if not name:
        raise APIError(400, "model is required", param="model")
    lease = await request.app.state.host.acquire(name)
    try:
        with GGUFFile(lease.llm.path) as f:
            info = {k: v for k, v in f.metadata.items() if isinstance(v, (int, float, str, bool))}
        return {
            "modelfile": "",
            "parameters": "",
            "template": lease.llm.tokenizer.chat_template.source or "",
            "details": {"format": "gguf", "family": info.get("general.architecture", "")},
            "model_info": info,
            "capabilities": _capabilities(lease.llm.tokenizer),
        }
    finally:
        lease.release()


def _tool_calls(calls: list[dict]) -> list[dict]:
    """Ollama's tool_calls: arguments as an object, not OpenAI's JSON string."""
    return [{"function": {"name": c["name"], "arguments": json.loads(c["arguments"])}} for c in calls]


def _capabilities(tok) -> list[str]:
    """What /api/show says a model can do, as Ollama's clients check it: "tools" when its chat template renders
    tools (Zed's Ollama provider, for one, switches tools off without it), "insert" with FIM tokens."""
    caps = ["completion"]
    if tok.chat_template.takes_tools:
        caps.append("tools")
    if tok.fim.get("fim_mid") is not None:
        caps.append("insert")
    return caps


def _lines(name: str, chunks: AsyncIterator, shape, started: float, held=None) -> AsyncIterator[str]:
    """The NDJSON stream: shape(text) -> a chunk's fields (done: False), then the final line with the counts. held: a
    ToolCallBuffer when the request has tools: text streams until a tool call may begin; the calls it finds come in
    one line of their own (content "", tool_calls) before the final one, as Ollama streams them."""

    def line(fields: dict) -> str:
        return json.dumps({"model": name, "created_at": _now(), **fields, "done": False}) + "\n"

    async def lines() -> AsyncIterator[str]:
        async for chunk in chunks:
            text = held.push(chunk.text) if held is not None else chunk.text
            if text or (chunk.finish_reason is None and held is None):
                yield line(shape(text))
            if chunk.finish_reason is not None:
                if held is not None:
                    rest, calls = held.finish()
                    if rest:
                        yield line(shape(rest))
                    if calls:
                        yield line({"message": {"role": "assistant", "content": "", "tool_calls": _tool_calls(calls)}})
                final = {
                    "model": name,
                    "created_at": _now(),
                    **shape("", flush=True),
                    **_final(chunk.stats, chunk.finish_reason, started),
                }
                yield json.dumps(final) + "\n"

    return lines()


@router.post("/chat")
async def chat(body: OllamaChatRequest, request: Request):
    messages = ollama_messages(body.messages)
    tools = body.tools or None
    names = frozenset(t.get("function", {}).get("name") for t in tools or () if isinstance(t.get("function"), dict))

    def prepare(lease, params):
        if not messages:  # Ollama's documented load request: the model is loaded, nothing generated
            return {
                "model": lease.name,
                "created_at": _now(),
                "message": {"role": "assistant", "content": ""},
                "done": True,
                "done_reason": "load",
            }
        tok = lease.llm.tokenizer
        # think: the template's own switch (Qwen3's enable_thinking), or gpt-oss's reasoning effort, where given
        think = body.think
        kwargs = (
            {}
            if think is None
            else {"reasoning_effort": think}
            if isinstance(think, str)
            else {"enable_thinking": think}
        )
        try:
            ids = tok.encode_chat(messages, tools=tools, **kwargs)
        except ChatTemplateError as e:
            raise APIError(400, f"the chat template failed: {e}") from None
        # a thinking model's reasoning as message.thinking (text/reasoning.py), hidden if the client said think: false
        split = reply_splitter(tok, ids, "hide" if think is False else "split", calls=bool(tools))

        def shape(text: str, final: bool = False, flush: bool = False) -> dict:
            thinking = ""
            if split is not None:
                (thinking, text), (t2, c2) = split.push(text), split.finish() if final or flush else ("", "")
                thinking, text = thinking + t2, text + c2
            message = {"role": "assistant", "content": text}
            if final and tools:
                rest, calls = parse_tool_calls(text, names)
                if calls:
                    message = {"role": "assistant", "content": rest, "tool_calls": _tool_calls(calls)}
            if thinking:
                message["thinking"] = thinking
            return {"message": message}

        return ids, shape, ToolCallBuffer(names) if tools else None

    return await _serve(request, body, prepare)


@router.post("/generate")
async def generate(body: OllamaGenerateRequest, request: Request):
    def prepare(lease, params):
        llm = lease.llm
        if not body.prompt and body.suffix is None:
            return {"model": lease.name, "created_at": _now(), "response": "", "done": True, "done_reason": "load"}
        try:
            if body.suffix is not None:
                ids = fim_prompt(
                    llm.tokenizer,
                    body.prompt,
                    body.suffix,
                    budget=llm.ctx_size - (params.max_tokens or llm.ctx_size // 4),
                )
            elif body.raw or llm.tokenizer.chat_template.is_fallback:
                llm.check_text_fits(len(body.prompt.encode()))
                ids = llm.tokenize(body.prompt)
            else:
                messages = ([{"role": "system", "content": body.system}] if body.system else []) + [
                    {"role": "user", "content": body.prompt}
                ]
                ids = llm.tokenizer.encode_chat(messages)
        except ChatTemplateError as e:
            raise APIError(400, f"the chat template failed: {e}") from None
        except ValueError as e:
            raise APIError(400, str(e)) from None
        return ids, (lambda text, final=False, flush=False: {"response": text}), None

    return await _serve(request, body, prepare)


async def _serve(request: Request, body, prepare) -> object:
    """The scaffolding chat and generate share: the options, the model's lease (held until the reply is done, by
    the stream when it streams), keep_alive, the reply whole or as NDJSON lines. prepare(lease, params) ->
    (ids, shape, held), or the answer to a request that only loads the model (a dict); shape(text, final=False) ->
    the reply's fields for that text; held: a ToolCallBuffer for a request with tools, else None."""
    app = request.app.state
    params = _params(body.options)
    speculative = body.options.speculative if body.options else None
    grammar = ollama_grammar(body.format)
    keep_alive = keep_alive_seconds(body.keep_alive)
    lease = await app.host.acquire(body.model)
    lease.keep_alive = keep_alive
    streaming = False
    try:
        got = prepare(lease, params)
        if isinstance(got, dict):
            return got
        ids, shape, held = got
        started = time.perf_counter()
        if body.stream:
            chunks = await begin(run(lease.llm, ids, params, app.metrics, speculative=speculative, grammar=grammar))
            lines = _lines(lease.name, chunks, shape, started, held)
            response = lease.stream(lines, media_type="application/x-ndjson", closing=(chunks,))
            streaming = True
            return response
        text, last = [], None
        async for chunk in run(lease.llm, ids, params, app.metrics, None, request, speculative, grammar):
            text.append(chunk.text)
            last = chunk
        return JSONResponse(
            {
                "model": lease.name,
                "created_at": _now(),
                **shape("".join(text), final=True),
                **_final(last.stats if last else None, last.finish_reason if last else None, started),
            }
        )
    finally:
        if not streaming:
            lease.release()


async def _embed(body: OllamaEmbedRequest, request: Request, items: list) -> tuple[np.ndarray, int, str, float]:
    started = time.perf_counter()
    keep_alive = keep_alive_seconds(body.keep_alive)  # a bad value is a 400 before the model is leased
    lease = await request.app.state.host.acquire(body.model)
    lease.keep_alive = keep_alive
    try:
        vectors, n = await embed(lease.llm, items, truncate=body.truncate, param="input")
        return vectors, n, lease.name, started
    finally:
        lease.release()


@router.post("/embed")
async def embed_route(body: OllamaEmbedRequest, request: Request):
    items = [body.input] if isinstance(body.input, str) else body.input
    if items is None:
        raise APIError(400, "input: a text or a list of texts", param="input")
    vectors, n, name, started = await _embed(body, request, items)
    took = int((time.perf_counter() - started) * 1e9)
    return JSONResponse(
        {
            "model": name,
            "embeddings": vectors.tolist(),
            "total_duration": took,
            "load_duration": 0,
            "prompt_eval_count": n,
        }
    )


@router.post("/embeddings")
async def embeddings_route(body: OllamaEmbedRequest, request: Request):
    """The older route: one prompt, one embedding."""
    if not isinstance(body.prompt, str) or not body.prompt:
        raise APIError(400, "prompt: a text", param="prompt")
    vectors, _, _, _ = await _embed(body, request, [body.prompt])
    return JSONResponse({"embedding": vectors[0].tolist()})
