"""Write small GGUF files holding random weight matrices with the real models' shapes per type, for
`localllm bench kernels` on a machine the real models cannot reach (a borrowed machine with no network).

    python models/synthetic_matrices.py DIR        # -> DIR/syn-0.5b.gguf (14 MB), DIR/syn-1.5b.gguf (19 MB)
    localllm bench kernels DIR/syn-0.5b.gguf DIR/syn-1.5b.gguf --threads 1 2

The blocks are random bytes with every f16 scale set to 2^-7, so no scale is subnormal, infinite or NaN (a
subnormal operand can slow a multiply on some CPUs). The timings are only those of the kernels: these files
are small enough to stay in a large L3, so their N = 1 figures are not memory-bound unless --stream-mib
makes the streamed copies larger than the cache. Needs the `gguf` package (the test extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T, GGUFWriter

# byte offsets of the f16 fields in each block
HALVES = {T.Q5_0: [0], T.Q8_0: [0], T.Q4_K: [0, 2], T.Q6_K: [208]}

# (name, type, rows, row length): qwen2.5-coder-0.5b's and -1.5b's matrices of each quantized type
SHAPES = {
    "syn-0.5b.gguf": [("blk.0.ffn_gate.weight", T.Q5_0, 4864, 896), ("blk.0.attn_q.weight", T.Q5_0, 896, 896),
                      ("blk.0.attn_v.weight", T.Q8_0, 4864, 896), ("blk.0.ffn_down.weight", T.Q4_K, 896, 4864),
                      ("blk.1.ffn_down.weight", T.Q6_K, 896, 4864)],
    "syn-1.5b.gguf": [("blk.0.ffn_gate.weight", T.Q4_K, 8960, 1536), ("blk.0.ffn_down.weight", T.Q6_K, 1536, 8960)],
}


def write(path: Path, mats, rng: np.random.Generator) -> None:
    w = GGUFWriter(str(path), "llama")
    for name, qtype, rows, k in mats:
        block, size = GGML_QUANT_SIZES[qtype]
        q = rng.integers(0, 256, size=(rows, k // block, size), dtype=np.uint8)
        for off in HALVES[qtype]:
            q[:, :, off:off + 2] = np.frombuffer(np.float16(1 / 128).tobytes(), np.uint8)
        q = q.reshape(rows, -1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: " + next(line.strip() for line in __doc__.splitlines() if "synthetic_matrices.py DIR" in line),
              file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, mats in SHAPES.items():
        write(out / name, mats, rng)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
