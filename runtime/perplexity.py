"""Perplexity over a text, computed as tests/reference/perplexity.json describes llama.cpp's:

The whole text is tokenized without BOS and cut into consecutive chunks of `ctx` ids: ctx - 1 text
tokens after a BOS for models whose metadata adds BOS, ctx text tokens otherwise. Each chunk is
evaluated from an empty context; for a chunk x[0..L-1] the predictions of x[i+1] given x[0..i] are
scored for i = s..L-2, s = 1 when x[0] is BOS, else 0. ppl = exp(mean negative log-likelihood).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Perplexity:
    ppl: float
    chunks: int
    scored: int  # predictions scored
    nll: float  # mean negative log-likelihood (nats)


def perplexity(llm, text: str, ctx: int = 512, max_chunks: int | None = 4) -> Perplexity:
    """llm: a localllm.LLM whose ctx_size is at least ctx."""
    if ctx < 2:
        raise ValueError(f"ctx must be at least 2, got {ctx}")
    tok = llm.tokenizer
    ids = tok.encode(text, add_special=False)
    bos = tok.add_bos and tok.bos_id is not None
    n_text = ctx - 1 if bos else ctx
    n_chunks = len(ids) // n_text
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise ValueError(f"the text has {len(ids)} tokens: fewer than one chunk of {n_text}")
    total, count = 0.0, 0
    for c in range(n_chunks):
        x = ids[c * n_text : (c + 1) * n_text]
        if bos:
            x = [tok.bos_id] + x
        logits = llm.logits(x)  # [L, n_vocab] float32
        s = 1 if bos else 0
        # log-softmax 64 rows at a time, as llama.cpp's: float32 exponentials (of logit - max), summed in float64
        # (3x faster than float64 throughout, which gave the same nll to 1e-12 relative)
        for r0 in range(s, len(x) - 1, 64):
            rows = logits[r0 : min(r0 + 64, len(x) - 1)]
            targets = np.asarray(x[r0 + 1 : r0 + 1 + len(rows)], dtype=np.int64)
            m = rows.max(axis=1)
            logz = m.astype(np.float64) + np.log(np.exp(rows - m[:, None]).sum(axis=1, dtype=np.float64))
            total += float((logz - rows[np.arange(len(targets)), targets].astype(np.float64)).sum())
            count += len(targets)
        del logits
    nll = total / count
    return Perplexity(ppl=math.exp(nll), chunks=n_chunks, scored=count, nll=nll)
