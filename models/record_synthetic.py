"""Records llama.cpp's logits on a synthetic model (models/synthetic_arch.py) into
tests/reference/synthetic/<arch>-<type>.json, the reference tests/runtime/test_architectures.py checks localllm
against. llama.cpp runs from llama-cpp-python's own interpreter (runtime/bench/compare.py's llama_python:
--llama-python, $LOCALLLM_LLAMA_PYTHON or ~/.cache/localllm/llama-venv).

    python models/record_synthetic.py qwen3 [--type F32|Q8_0] [--llama-python PYTHON]

Per text: its token ids (the borrowed tokenizer, no BOS) followed by 16 tokens llama.cpp chooses greedily, and at
every position llama.cpp's 10 largest logits with all those tokens in context (one evaluation, f16 KV, 2 threads).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "reference" / "synthetic"
TEXTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "The capital of France is Paris, and the capital of Italy is",
    "import numpy as np\n\nx = np.arange(10)\n",
]
N_GREEDY = 16

LLAMA_SIDE = r"""
import json, sys
import numpy as np
import llama_cpp
from llama_cpp import Llama
path, prompts, n_greedy = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
# betas -1: the file's (llama.cpp's own tools' default; llama-cpp-python's 32 and 1 would override a mistral3's)
llm = Llama(model_path=path, n_ctx=512, n_threads=2, n_batch=512, logits_all=True, verbose=False,
            yarn_beta_fast=-1.0, yarn_beta_slow=-1.0)
out = []
for ids in prompts:
    llm.reset()
    llm.eval(ids)
    greedy = []
    for _ in range(n_greedy):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        greedy.append(tok)
        llm.eval([tok])
    all_ids = ids + greedy
    llm.reset()
    llm.eval(all_ids)
    scores = np.array(llm.scores[: len(all_ids)], dtype=np.float32)
    top = [[[int(i), float(row[i])] for i in np.argsort(-row, kind="stable")[:10]] for row in scores]
    out.append({"prompt_ids": ids, "greedy_ids": greedy, "topk_per_position": top})
print(json.dumps({"version": llama_cpp.__version__, "sequences": out}))
"""


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    from localllm.bench.compare import llama_python
    from localllm.llm import LLM
    from synthetic_arch import ARCHS, WEIGHT_TYPES, write

    ap = argparse.ArgumentParser(prog="record_synthetic.py", description=__doc__.splitlines()[0])
    ap.add_argument("arch", choices=sorted(ARCHS))
    ap.add_argument("--type", default="F32", choices=sorted(WEIGHT_TYPES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llama-python", default=None)
    a = ap.parse_args(argv)
    python = llama_python(a.llama_python)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{a.arch}.gguf"
        sha = write(path, a.arch, wtype=a.type, seed=a.seed)
        with LLM(path, n_threads=1, ctx_size=64) as llm:
            prompts = [llm.tokenize(t, add_special=False) for t in TEXTS]
        r = subprocess.run(
            [python, "-c", LLAMA_SIDE, str(path), json.dumps(prompts), str(N_GREEDY)],
            capture_output=True,
            text=True,
            check=True,
        )
    got = json.loads(r.stdout)
    record = {
        "arch": a.arch,
        "weight_type": a.type,
        "seed": a.seed,
        "tokenizer_from": ARCHS[a.arch]["tokenizer"],
        "sha256": sha,
        "llama_cpp": got["version"],
        "texts": TEXTS,
        "sequences": got["sequences"],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{a.arch}-{a.type.lower()}.json"
    out.write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(f"{out}: {len(got['sequences'])} sequences, llama.cpp {got['version']}, model {sha[:12]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
