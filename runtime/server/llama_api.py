"""llama.cpp server's routes that editor plugins use: POST /infill (llama.vscode, llama.vim: the text around the
cursor and chunks of other files), POST /tokenize, POST /detokenize, GET /health, GET /metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from .completion import begin, run, sampling_params
from .errors import APIError
from .fim import fim_prompt
from .schemas import DetokenizeRequest, InfillRequest, TokenizeRequest

router = APIRouter()


def _result(text: str, chunk, name: str) -> dict:
    stats = chunk.stats if chunk is not None else None
    out = {"content": text, "model": name, "stop": chunk is not None and chunk.finish_reason is not None}
    if stats is not None:
        out.update(
            tokens_predicted=stats.completion_tokens,
            tokens_evaluated=stats.prompt_tokens,
            tokens_cached=stats.cached_tokens,
            stop_type="limit" if chunk.finish_reason == "length" else "eos",
            timings={
                "prompt_n": stats.prompt_tokens - stats.cached_tokens,
                "prompt_per_second": stats.prompt_tps,
                "predicted_n": stats.completion_tokens,
                "predicted_per_second": stats.decode_tps,
                "draft_n": stats.draft_proposed,
                "draft_n_accepted": stats.draft_accepted,
            },
        )
    return out


@router.post("/infill")
async def infill(body: InfillRequest, request: Request):
    app = request.app.state
    for i, item in enumerate(body.input_extra):
        if not (isinstance(item, dict) and isinstance(item.get("filename"), str) and isinstance(item.get("text"), str)):
            raise APIError(400, f'input_extra[{i}] must be {{"filename": str, "text": str}}', param=f"input_extra[{i}]")
    n = body.n_predict if body.n_predict is not None and body.n_predict >= 0 else body.max_tokens
    if body.n != 1:
        raise APIError(400, "n must be 1 on /infill", param="n")
    params = sampling_params(body.model_dump(), n)
    lease = await app.host.acquire(body.model)
    streaming = False
    try:
        llm = lease.llm
        try:
            ids = fim_prompt(
                llm.tokenizer,
                body.input_prefix + body.prompt,
                body.input_suffix,
                extra=body.input_extra,
                budget=llm.ctx_size - (params.max_tokens or llm.ctx_size // 4),
            )
        except ValueError as e:
            raise APIError(400, str(e), param="input_prefix") from None
        if not body.stream:
            text, last = [], None
            async for chunk in run(llm, ids, params, app.metrics, None, request, body.speculative):
                text.append(chunk.text)
                last = chunk
            return JSONResponse(_result("".join(text), last, lease.name))
        chunks = await begin(run(llm, ids, params, app.metrics, speculative=body.speculative))

        async def events() -> AsyncIterator[str]:
            async for chunk in chunks:
                yield f"data: {json.dumps(_result(chunk.text, chunk, lease.name))}\n\n"

        streaming = True
        return lease.sse(events(), closing=(chunks,))
    finally:
        if not streaming:
            lease.release()


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request):
    lease = await request.app.state.host.acquire(body.model)
    try:
        llm = lease.llm
        try:
            llm.check_text_fits(len(body.content.encode()))
        except ValueError as e:
            raise APIError(400, str(e), param="content") from None
        return {"tokens": llm.tokenizer.encode(body.content, add_special=body.add_special)}
    finally:
        lease.release()


@router.post("/detokenize")
async def detokenize(body: DetokenizeRequest, request: Request):
    lease = await request.app.state.host.acquire(body.model)
    try:
        try:
            return {"content": lease.llm.tokenizer.decode(body.tokens)}
        except (TypeError, ValueError) as e:
            raise APIError(400, str(e), param="tokens") from None
    finally:
        lease.release()


@router.get("/health")
async def health(request: Request):
    host = request.app.state.host
    if host.state == "ok":
        return {"status": "ok"}
    if host.state == "loading":
        return JSONResponse({"status": "loading model"}, status_code=503)
    return JSONResponse({"status": "error", "error": host.error}, status_code=500)


@router.get("/metrics")
async def metrics(request: Request):
    app = request.app.state
    pools = {}
    for entry in app.host.resident():
        pools[entry.name] = await _inspect(entry.llm)
    return PlainTextResponse(app.metrics.render(pools), media_type="text/plain; version=0.0.4")


async def _inspect(llm) -> dict:
    return await asyncio.to_thread(llm.pool_stats)
