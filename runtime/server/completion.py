"""One request from its fields to the engine's chunks: sampling fields mapped and checked (a 400 naming the
field), the prompt checked against the context (a 400 `context_length_exceeded`), the stream read without
blocking the event loop, cancelled when the client goes away, and the metrics kept.

    params = sampling_params(body, max_tokens=body.max_tokens)      # APIError 400 on a bad value
    async for chunk in run(llm, ids, params, metrics, logprobs=None, request=request, speculative=None): ...
    chunks = await begin(run(...))      # for a stream: the first chunk read, so a bad request is still a 400
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import Request

from ..engine import Chunk, ContextLengthError
from ..engine.constraint import Grammar
from ..llm import LLM
from ..sampling import SamplingParams
from .errors import APIError, param_of
from .metrics import Metrics

# OpenAI field -> SamplingParams field
_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "repeat_penalty": "repetition_penalty",
    "repeat_last_n": "penalty_last_n",
    "seed": "seed",
    "stop": "stop",
    "ignore_eos": "ignore_eos",
}


def sampling_params(fields: dict, max_tokens: int | None) -> SamplingParams:
    """fields: request fields by their API names (None: the default). max_tokens: None = up to the context."""
    kw = {ours: fields[theirs] for theirs, ours in _FIELDS.items() if fields.get(theirs) is not None}
    if kw.get("seed") == -1:  # llama.cpp's and Ollama's "random"
        del kw["seed"]
    if max_tokens is not None:
        kw["max_tokens"] = max_tokens
    if fields.get("logit_bias"):
        try:
            kw["logit_bias"] = {int(k): v for k, v in fields["logit_bias"].items()}
        except (TypeError, ValueError):
            raise APIError(400, "logit_bias keys must be token ids", param="logit_bias") from None
    try:
        return SamplingParams(**kw)
    except ValueError as e:
        name = param_of(str(e))
        back = {v: k for k, v in _FIELDS.items()}
        raise APIError(400, str(e), param=back.get(name, name)) from None


def check_fits(llm: LLM, ids: list[int], params: SamplingParams) -> None:
    """A 400 (context_length_exceeded) when the prompt and the tokens it asks for exceed the context: OpenAI's rule,
    max_tokens counted whole (the engine's ContextWindow decides)."""
    try:
        llm.window.check(len(ids), params.max_tokens or 1)
    except ContextLengthError as e:
        param = "messages" if params.max_tokens is None else "max_tokens"
        raise APIError(400, str(e), param=param, code="context_length_exceeded") from None


async def run(
    llm: LLM,
    ids: list[int],
    params: SamplingParams,
    metrics: Metrics,
    logprobs: int | None = None,
    request: Request | None = None,
    speculative: str | None = None,
    grammar: Grammar | None = None,
) -> AsyncIterator[Chunk]:
    """The request's chunks, the last with finish_reason and stats. Leaving early (the client disconnected, a
    consumer stopped) cancels it in the engine: its blocks are freed at the next step. request: checked for a
    disconnect after each chunk (non-streaming responses; a streaming response is cancelled by the server).
    speculative: the request's "ngram" | "off" | "draft" (None: the server's); the engine checks it (a 400 naming
    it: "draft" needs a server started with a draft model). grammar: structured output (structured.py)."""
    check_fits(llm, ids, params)
    try:
        stream = llm.submit(ids, params, logprobs=logprobs, speculative=speculative, grammar=grammar)
    except ContextLengthError as e:
        raise APIError(400, str(e), code="context_length_exceeded") from None
    except (TypeError, ValueError) as e:
        raise APIError(400, str(e), param=param_of(str(e))) from None
    metrics.started()
    stats, cancelled, last = None, True, None
    try:
        async for chunk in stream:
            now = time.perf_counter()
            if chunk.token_ids:
                if last is not None:
                    metrics.token(now - last)
                last = now
            if chunk.stats is not None:
                stats = chunk.stats
                cancelled = chunk.finish_reason == "abort"
                if stats.completion_tokens:
                    metrics.first_token(stats.ttft_s)
            yield chunk
            if request is not None and chunk.stats is None and await request.is_disconnected():
                return
    finally:
        stream.close()
        metrics.finished(stats, cancelled)


async def begin(chunks: AsyncIterator[Chunk]) -> AsyncIterator[Chunk]:
    """chunks with the first one already read: what fails before the request starts (a bad field, a prompt that
    does not fit) raises here, while the response can still be an error status rather than a broken stream.
    Its aclose() closes chunks (cancelling the request) even when it was never iterated."""
    try:
        first = await chunks.__anext__()
    except StopAsyncIteration:
        return _Begun(None, chunks, done=True)
    return _Begun(first, chunks)


class _Begun:
    def __init__(self, first: Chunk | None, rest: AsyncIterator[Chunk], done: bool = False):
        self._first, self._rest, self._done = first, rest, done

    def __aiter__(self) -> _Begun:
        return self

    async def __anext__(self) -> Chunk:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        if self._done:
            raise StopAsyncIteration
        return await self._rest.__anext__()

    async def aclose(self) -> None:
        self._done, self._first = True, None
        await self._rest.aclose()
