"""Records llama.cpp's embeddings of a few texts on a test model into tests/reference/embeddings/<model>.json, the
reference tests/runtime/server/test_embeddings.py holds localllm to (cosine >= 0.999). llama.cpp runs from
llama-cpp-python's own interpreter (runtime/bench/compare.py's llama_python: --llama-python,
$LOCALLLM_LLAMA_PYTHON or ~/.cache/localllm/llama-venv), with mean pooling and L2 normalisation, each text
tokenized by llama.cpp (the record keeps localllm's ids of it too, which the test checks are the same).

    python models/record_embeddings.py qwen2.5-coder-0.5b-instruct-q4_k_m [--llama-python PYTHON]
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

LLAMA_SIDE = r"""
import json, sys
import llama_cpp
from llama_cpp import Llama
path, prompts = sys.argv[1], json.loads(sys.argv[2])
llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, embedding=True,
            pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, verbose=False)
out = [llm.embed(text, normalize=True) for text in prompts]
print(json.dumps({"version": llama_cpp.__version__, "embeddings": out}))
"""


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from fetch_test_models import cache_dir
    from localllm.bench.compare import llama_python
    from localllm.llm import LLM

    ap = argparse.ArgumentParser(prog="record_embeddings.py", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a test model's name (models/fetch_test_models.py)")
    ap.add_argument("--llama-python", default=None)
    a = ap.parse_args(argv)
    path = cache_dir() / f"{a.model}.gguf"
    with LLM(path, n_threads=1, ctx_size=64) as llm:
        prompts = [llm.tokenize(t) for t in TEXTS]
    r = subprocess.run(
        [llama_python(a.llama_python), "-c", LLAMA_SIDE, str(path), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(r.stdout)
    record = {"model": a.model, "llama_cpp": got["version"], "pooling": "mean", "texts": TEXTS, "token_ids": prompts}
    record["embeddings"] = [[round(v, 7) for v in e] for e in got["embeddings"]]
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{a.model}.json"
    out.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"{out}: {len(TEXTS)} embeddings of {len(record['embeddings'][0])}, llama.cpp {got['version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
