"""Records llama.cpp's embeddings of a few texts on a test model into tests/reference/embeddings/<model>.json, the
reference tests/runtime/server/test_embeddings.py holds localllm to (cosine >= 0.999). llama.cpp runs from
llama-cpp-python's own interpreter (runtime/bench/compare.py's llama_python: --llama-python,
$LOCALLLM_LLAMA_PYTHON or ~/.cache/localllm/llama-venv), with mean pooling and L2 normalisation, each text
tokenized by llama.cpp (the record keeps localllm's ids of it too, which the test checks are the same).

    python models/record_embeddings.py qwen2.5-coder-0.5b-instruct-q4_k_m [--llama-python PYTHON]
    python models/record_embeddings.py --synthetic bert [--type F32|Q8_0]   # an encoder of models/synthetic_arch.py
    python models/record_embeddings.py all-minilm-l6-v2-f16   # a real encoder test model: as the synthetic ones

A synthetic encoder (bert, bert-cls, nomic-bert) is written from models/synthetic_arch.py (its sha256 recorded, as
record_synthetic.py does) into tests/reference/embeddings/synthetic-<name>-<type>.json, with the file's own pooling,
and llama.cpp's token ids of TOKENIZER_TEXTS besides (its WordPiece tokenization: accents, punctuation, CJK, digits,
long and unknown words), which tests/runtime/test_encoders.py holds localllm's tokenizer to.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "reference" / "embeddings"
TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "The weather in Paris is sunny today.",
    "import numpy as np\nx = np.zeros((3, 3))\n",
]
ENCODER_TEXTS = [
    *TEXTS,
    "Hello, World! The résumé of a naïve café owner in São Paulo.",
    "class Stack:\n    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n"
    "        return self.items.pop()\n" * 6,
    "中国的人说日本语? Ελληνικά and русский text, 42 apples & 3.14159 pies.",
]
TOKENIZER_TEXTS = [
    "Hello world",
    "HELLO, World!!! (parenthesised) [bracketed] {braced} <angled>",
    "résumé naïve café São Paulo Ångström Øresund straße ŒUVRE",
    "中国人大 日本语的是 不了在有我他这个们",
    "\u00c9t\u00e9 \u0301accent combining e\u0301 n\u0303",
    "digits 0123456789 3.14159 1,000,000 2024-11-27 12:30",
    "supercalifragilisticexpialidocious antidisestablishmentarianism unbelievably",
    "xyzzy qwfp zxcv unknownword ŋ ɐ ʃ",
    "tabs\tand\nnewlines\r\n  and   runs   of spaces  ",
    "emoji 😀 🎉 symbols $ % ^ ~ ` | \\ / @ # = + - _ * ©®™ € £",
    "control \x00\x01\x07 chars \u200b zero width \ufeff bom",
    "한국어 텍스트 and Ελληνικά and русский язык",
    "[CLS] [SEP] [MASK] [UNK] literal specials",
    "İstanbul DŽungla ǅ Σίσυφος ΣΑΣ",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "",
    "   ",
    "a",
]

LLAMA_SIDE = r"""
import json, sys
import llama_cpp
from llama_cpp import Llama
path, prompts, tok_texts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
# an encoder (tok_texts given) is pooled as its file says; a decoder by mean
pooling = llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED if tok_texts else llama_cpp.LLAMA_POOLING_TYPE_MEAN
llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2, embedding=True,
            pooling_type=pooling, verbose=False)
out = [llm.embed(text, normalize=True) for text in prompts]
ids = [llm.tokenize(t.encode(), add_bos=True, special=False) for t in tok_texts]
print(json.dumps({"version": llama_cpp.__version__, "embeddings": out, "token_ids": ids}))
"""


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from fetch_test_models import cache_dir
    from localllm.bench.compare import llama_python
    from localllm.llm import LLM

    ap = argparse.ArgumentParser(prog="record_embeddings.py", description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="a test model's name (models/fetch_test_models.py)")
    ap.add_argument("--synthetic", default=None, help="an encoder of models/synthetic_arch.py (bert, nomic-bert)")
    ap.add_argument("--type", default="F32", choices=["F32", "Q8_0"])
    ap.add_argument("--llama-python", default=None)
    a = ap.parse_args(argv)
    if (a.model is None) == (a.synthetic is None):
        ap.error("name a test model or --synthetic ARCH")
    if a.synthetic:
        return record_synthetic(a.synthetic, a.type, llama_python(a.llama_python))
    path = cache_dir() / f"{a.model}.gguf"
    with LLM(path, n_threads=1, ctx_size=64) as llm:
        if llm.encoder:  # a real embedding model (all-MiniLM): recorded as the synthetic encoders are
            return record_encoder(a.model, path, llama_python(a.llama_python))
        prompts = [llm.tokenize(t) for t in TEXTS]
    got = _llama(llama_python(a.llama_python), path, TEXTS, [])
    record = {"model": a.model, "llama_cpp": got["version"], "pooling": "mean", "texts": TEXTS, "token_ids": prompts}
    record["embeddings"] = [[round(v, 7) for v in e] for e in got["embeddings"]]
    _write(OUT / f"{a.model}.json", record, got["version"])
    return 0


def _llama(python: str, path: Path, texts: list[str], tok_texts: list[str]) -> dict:
    r = subprocess.run(
        [python, "-c", LLAMA_SIDE, str(path), json.dumps(texts), json.dumps(tok_texts)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(r.stdout)


def _write(out: Path, record: dict, version: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
    n = len(record["embeddings"])
    print(f"{out}: {n} embeddings of {len(record['embeddings'][0])}, llama.cpp {version}")


def _encoder_record(python: str, path: Path) -> dict:
    """llama.cpp's embeddings of ENCODER_TEXTS (the file's own pooling) and its WordPiece ids of TOKENIZER_TEXTS."""
    from localllm.engine.embedding import pooling_of
    from localllm.model.gguf import GGUFFile

    with GGUFFile(path) as f:
        pooling = pooling_of(f.metadata)
    got = _llama(python, path, ENCODER_TEXTS, TOKENIZER_TEXTS)
    return {
        "llama_cpp": got["version"],
        "pooling": pooling,
        "texts": ENCODER_TEXTS,
        "embeddings": [[round(v, 7) for v in e] for e in got["embeddings"]],
        "tokenizer_texts": TOKENIZER_TEXTS,
        "tokenizer_ids": got["token_ids"],
    }


def record_encoder(name: str, path: Path, python: str) -> int:
    """A real encoder test model (all-MiniLM) into tests/reference/embeddings/<name>.json (tests/runtime/test_encoders.py)."""
    from fetch_test_models import CATALOG
    from localllm.model.gguf import GGUFFile

    with GGUFFile(path) as f:
        types = {t.type.name for t in f.tensors.values() if len(t.dims) == 2}
    got = _encoder_record(python, path)
    wtype = "F16" if "F16" in types else sorted(types)[0]
    record = {"model": name, "weight_type": wtype, "sha256": CATALOG[name]["sha256"], **got}
    _write(OUT / f"{name}.json", record, got["llama_cpp"])
    return 0


def record_synthetic(name: str, wtype: str, python: str, seed: int = 0) -> int:
    import tempfile

    from synthetic_arch import ARCHS, write

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.gguf"
        sha = write(path, name, wtype=wtype, seed=seed)
        got = _encoder_record(python, path)
    record = {
        "model": f"synthetic {name}",
        "arch": name,
        "weight_type": wtype,
        "seed": seed,
        "tokenizer_from": ARCHS[name]["tokenizer"],
        "sha256": sha,
        **got,
    }
    _write(OUT / f"synthetic-{name}-{wtype.lower()}.json", record, got["llama_cpp"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
