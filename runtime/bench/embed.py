"""`localllm bench embed MODEL [--compare]`: embedding throughput on 512-token chunks of this package's own source
(what a codebase index sends), and with --compare llama-cpp-python's on the same model, texts and threads in the
same run, alternated.

    r = bench_embed(path, threads, n_chunks=8, chunk_tokens=512, reps=3)   # {"chunks_per_s", "tokens_per_s"}
    r = llama_embed(python, path, threads, texts, reps=3, flash_attn=False)
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from .. import __file__ as _package_file
from ..llm import LLM


def chunks(llm: LLM, n_chunks: int, chunk_tokens: int) -> list[str]:
    """n_chunks texts of about chunk_tokens tokens each (their BOS / [CLS] and [SEP] included), cut from this
    package's sources; never more tokens than the model's context (an encoder's, BERT's 512, holds its specials
    too, and WordPiece may cut detokenized text a little differently: such a text is shortened until it fits)."""
    text = "".join(p.read_text() for p in sorted(Path(_package_file).parent.rglob("*.py")))
    ids = llm.tokenize(text, add_special=False)
    limit = min(chunk_tokens, llm.ctx_size)
    special = len(llm.tokenize("", add_special=True))
    out = []
    for i in range(n_chunks):
        piece = ids[i * chunk_tokens : i * chunk_tokens + limit - special]
        t = llm.detokenize(piece)
        while len(llm.tokenize(t)) > limit:
            piece = piece[: len(piece) - (len(llm.tokenize(t)) - limit)]
            t = llm.detokenize(piece)
        out.append(t)
    return out


def bench_embed(llm: LLM, texts: list[str], reps: int) -> dict:
    n_tokens = sum(len(llm.tokenize(t)) for t in texts)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        llm.embed(texts)
        best = min(best, time.perf_counter() - t0)
    return {"chunks_per_s": len(texts) / best, "tokens_per_s": n_tokens / best}


_LLAMA_SIDE = r"""
import json, sys, time
import llama_cpp
from llama_cpp import Llama
path, threads, texts, reps = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
flash = sys.argv[5] == "1"
llm = Llama(model_path=path, n_ctx=2048, n_batch=2048, n_ubatch=2048, n_threads=threads, n_threads_batch=threads,
            embedding=True, pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, flash_attn=flash, verbose=False)
n_tokens = sum(len(llm.tokenize(t.encode())) for t in texts)
llm.embed(texts[0])  # warm-up: graph allocation and the weights paged in, as the other side's earlier reps did
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    for t in texts:
        llm.embed(t)
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"chunks_per_s": len(texts) / best, "tokens_per_s": n_tokens / best}))
"""


def llama_embed(python: str, path: Path, threads: int, texts: list[str], reps: int, flash_attn: bool = False) -> dict:
    """llama-cpp-python's throughput, warmed up by one embedding first; flash_attn: llama.cpp's flash attention
    (off by default in llama-cpp-python; on, an encoder's 512-token attention measured up to 2x faster there)."""
    r = subprocess.run(
        [python, "-c", _LLAMA_SIDE, str(path), str(threads), json.dumps(texts), str(reps), str(int(flash_attn))],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout)
