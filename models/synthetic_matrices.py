"""Write small GGUF files holding weight matrices per type, for `localllm bench kernels` on a machine the real
models cannot reach (a borrowed machine with no network): random blocks with the real models' shapes, or the
real models' own matrices, a few of each type, copied out of their GGUF files.

    python models/synthetic_matrices.py DIR        # -> DIR/syn-0.5b.gguf, syn-1.5b.gguf, syn-types.gguf (60 MB)
    python models/synthetic_matrices.py DIR --real MODEL.gguf [--mb-per-type 6]   # -> DIR/sub-MODEL.gguf
    localllm bench kernels DIR/syn-0.5b.gguf DIR/syn-1.5b.gguf --threads 1 2

--real copies each quantized type's 2-D matrices (not the embedding, which is looked up, not multiplied) in
file order until about --mb-per-type MB of that type are taken; a matrix larger than that keeps only its first
rows (the 0.5B's 145 MB output matrix, say). 6 MB a type makes the 0.5B's file 24 MB.

The blocks are random bytes with every f16 scale set to 2^-7, so no scale is subnormal, infinite or NaN (a
subnormal operand can slow a multiply on some CPUs). The timings are only those of the kernels: these files
are small enough to stay in a large L3, so their N = 1 figures are not memory-bound unless --stream-mib
makes the streamed copies larger than the cache. Needs the `gguf` package (the test extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUFWriter
from gguf import GGMLQuantizationType as T

# byte offsets of the f16 fields in each block
HALVES = {
    T.Q5_0: [0],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.Q3_K: [108],
    T.Q2_K: [80, 82],
    T.IQ4_XS: [0],
}

# (name, type, rows, row length): qwen2.5-coder-0.5b's and -1.5b's matrices of each quantized type
SHAPES = {
    "syn-0.5b.gguf": [
        ("blk.0.ffn_gate.weight", T.Q5_0, 4864, 896),
        ("blk.0.attn_q.weight", T.Q5_0, 896, 896),
        ("blk.0.attn_v.weight", T.Q8_0, 4864, 896),
        ("blk.0.ffn_down.weight", T.Q4_K, 896, 4864),
        ("blk.1.ffn_down.weight", T.Q6_K, 896, 4864),
    ],
    "syn-1.5b.gguf": [("blk.0.ffn_gate.weight", T.Q4_K, 8960, 1536), ("blk.0.ffn_down.weight", T.Q6_K, 1536, 8960)],
    # the types of other files people pull (Q5_K_M, Q3_K_M, Q2_K, IQ4_XS), at the 1.5B's ffn_gate shape (27 MB)
    "syn-types.gguf": [
        (f"blk.{i}.ffn_gate.weight", t, 8960, 1536) for i, t in enumerate([T.Q5_K, T.IQ4_XS, T.Q3_K, T.Q2_K])
    ],
}


def write(path: Path, mats, rng: np.random.Generator) -> None:
    w = GGUFWriter(str(path), "llama")
    for name, qtype, rows, k in mats:
        block, size = GGML_QUANT_SIZES[qtype]
        q = rng.integers(0, 256, size=(rows, k // block, size), dtype=np.uint8)
        for off in HALVES[qtype]:
            q[:, :, off : off + 2] = np.frombuffer(np.float16(1 / 128).tobytes(), np.uint8)
        q = q.reshape(rows, -1)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_subset(src: Path, path: Path, bytes_per_type: int) -> list[tuple[str, str, int, int]]:
    """Copies src's 2-D weight matrices (quantized or float), about bytes_per_type of each type, into path; returns
    (name, type, rows, row length) of each copied matrix."""
    from localllm.bench.matrices import weight_matrices
    from localllm.model.gguf import GGUFFile

    taken: dict[str, int] = {}
    out = []
    with GGUFFile(src) as f:  # opened (and checked) before anything is written
        w = GGUFWriter(str(path), "llama")
        for t in weight_matrices(f):  # the matrices bench kernels times
            if t.name == "token_embd.weight" or taken.get(t.type.name, 0) >= bytes_per_type:
                continue
            view = t.rows()  # a view of the map: only the rows kept are copied
            left = bytes_per_type - taken.get(t.type.name, 0)
            rows = np.array(view[: max(1, min(len(view), -(-left // view.shape[1])))])
            taken[t.type.name] = taken.get(t.type.name, 0) + rows.nbytes
            w.add_tensor(t.name, rows, raw_shape=rows.shape, raw_dtype=T(t.type.id))
            out.append((t.name, t.type.name, rows.shape[0], t.row_len))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def usage() -> int:
    print(
        "usage: "
        + "\n       ".join(line.strip() for line in __doc__.splitlines() if "synthetic_matrices.py DIR" in line),
        file=sys.stderr,
    )
    return 2


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        return usage()
    out = Path(argv[0])
    if len(argv) > 1:
        import argparse

        p = argparse.ArgumentParser(prog="synthetic_matrices.py DIR")
        p.add_argument("--real", nargs="+", required=True, metavar="MODEL.gguf")
        p.add_argument("--mb-per-type", type=float, default=6.0)
        a = p.parse_args(argv[1:])
        if a.mb_per_type <= 0:
            print("error: --mb-per-type must be positive", file=sys.stderr)
            return 2
        names = [Path(src).name for src in a.real]
        if len(set(names)) < len(names):  # each would overwrite the other's sub- file
            dup = next(n for n in names if names.count(n) > 1)
            paths = {str(Path(src).resolve()) for src in a.real if Path(src).name == dup}
            what = f"{dup} given twice" if len(paths) == 1 else f"two sources named {dup}"
            print(f"error: {what}: their subsets would share DIR/sub-{dup}", file=sys.stderr)
            return 2
        out.mkdir(parents=True, exist_ok=True)
        for src in a.real:
            dst = out / ("sub-" + Path(src).name)
            try:
                write_subset(Path(src), dst, int(a.mb_per_type * 1e6))
            except (OSError, ValueError) as e:  # GGUFError is a ValueError: a missing, unreadable or corrupt source
                print(f"error: {src}: {e}", file=sys.stderr)
                return 1
            print(dst)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, mats in SHAPES.items():
        write(out / name, mats, rng)
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
