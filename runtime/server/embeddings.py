"""Embeddings for the protocols' routes (openai_api's /v1/embeddings, ollama_api's /api/embed and /api/embeddings):
inputs (texts or token id lists) to vectors off the event loop, the context checked per input.

    vectors, n_tokens = await embed(lease.llm, items, truncate=False, param="input")
"""

from __future__ import annotations

import asyncio

import numpy as np

from ..engine import ContextLengthError
from ..llm import LLM
from .errors import APIError


def _ids(llm: LLM, items: list, truncate: bool, param: str) -> list[list[int]]:
    out = []
    for i, item in enumerate(items):
        at = f"{param}[{i}]" if len(items) > 1 else param
        if isinstance(item, str):
            if not item:
                raise APIError(400, f"{at}: an empty text has no embedding", param=at)
            ids = llm.tokenize(item)
        elif isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            ids = list(item)
        else:
            raise APIError(400, f"{at}: a text or a non-empty list of token ids", param=at)
        if len(ids) > llm.ctx_size:
            if not truncate:
                raise APIError(
                    400,
                    f"{at}: {len(ids)} tokens do not fit the context of {llm.ctx_size}",
                    param=at,
                    code="context_length_exceeded",
                )
            ids = ids[: llm.ctx_size]
            if llm.tokenizer.add_sep and isinstance(item, str):  # WordPiece: the text cut, its [SEP] kept
                ids[-1] = llm.tokenizer.sep_id
        out.append(ids)
    return out


async def embed(llm: LLM, items: list, truncate: bool, param: str) -> tuple[np.ndarray, int]:
    """(float32 [len(items), d_model] L2-normalised, the tokens read); APIError 400 naming the input at fault."""
    if not items:
        raise APIError(400, f"{param} must hold at least one text", param=param)
    ids = _ids(llm, items, truncate, param)
    try:
        vectors = await asyncio.to_thread(llm.embed, ids)
    except ContextLengthError as e:
        raise APIError(400, str(e), param=param, code="context_length_exceeded") from None
    except ValueError as e:
        raise APIError(400, str(e), param=param) from None
    return vectors, sum(len(a) for a in ids)
