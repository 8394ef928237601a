"""A synthetic twin of a GGUF model, for a machine the real models cannot reach (the lent GPU machine: nothing can
be fetched there and only 64 MiB travel): the real file's header (metadata, tokenizer, tensor table) kept byte for
byte, valid random blocks in place of its weights (models/quant_blocks.py: random bits, every f16 scale finite,
scaled so each matrix has Xavier's spread), so the twin loads, tokenizes and runs with the real shapes, types and
speed; its words are nonsense.

    python models/synthetic_twin.py header MODEL.gguf... DIR   # DIR/MODEL.header (a few MB) + DIR/MODEL.tensors.json
    python models/synthetic_twin.py build DIR/MODEL.header OUT.gguf [--seed 0]   # the twin, full size
    python models/synthetic_twin.py retype MODEL.gguf OUT.gguf Q4_K=Q5_K [...] [--seed 0]
        # a twin whose tensors of one type are of another (a Q5_K_M-like file from a Q4_K_M one: the
        # speed of quantization types no test model has); the metadata copied, tensors of whole blocks only

Needs numpy and the `gguf` package (the test extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize
from quant_blocks import E8M0_FIELDS, F16_FIELDS, random_rows

ROWS_PER_CHUNK = 4096  # rows generated and written at a time (bounds the memory of a large matrix)


def write_header(src: Path, out_dir: Path) -> Path:
    """DIR/NAME.header: src's bytes before its tensor data; DIR/NAME.tensors.json: its tensor table."""
    from localllm.model.gguf import GGUFFile

    with GGUFFile(src) as f:
        tensors = [
            {
                "name": t.name,
                "type": t.type.id,
                "rows": t.n_rows,
                "row_len": t.row_len,
                "offset": t.offset,
                "nbytes": t.nbytes,
            }
            for t in f.tensors.values()
        ]
        size = f.file_size
        start = f.data_offset
    with open(src, "rb") as raw:
        header = raw.read(start)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (src.stem + ".header")
    path.write_bytes(header)
    (out_dir / (src.stem + ".tensors.json")).write_text(json.dumps({"file_size": size, "tensors": tensors}))
    return path


def _rows(name: str, qt: T, rows: int, k: int, rng: np.random.Generator, scale: list[float]) -> np.ndarray:
    """rows of tensor `name`: 1-D norms 1 + N(0, 0.1), 1-D biases N(0, 0.02), matrices with a standard deviation of
    1 / sqrt(row length) (Xavier's, so the residual stream keeps its scale through the layers and two summation
    orders rarely flip a top-1: a random network with larger weights turns chaotic). scale: [] on a tensor's first
    chunk, which sets it to the factor that every f16 scale field of a quantized tensor is multiplied by."""
    if rows == 1 and qt in (T.F32, T.F16):
        x = 0.02 * rng.standard_normal((1, k)) if "bias" in name else 1 + 0.1 * rng.standard_normal((1, k))
        return x.astype(np.float32 if qt == T.F32 else np.float16).view(np.uint8)
    if qt in (T.F32, T.F16):
        x = rng.standard_normal((rows, k)) / np.sqrt(k)
        return x.astype(np.float32 if qt == T.F32 else np.float16).view(np.uint8)
    raw = random_rows(qt, rows, k, rng)
    if not scale:  # from this first chunk's dequantized weights
        sample = dequantize(raw[: min(rows, 64)], qt)
        scale.append(1 / (np.sqrt(k) * float(sample.std())))
    bs, ts = GGML_QUANT_SIZES[qt]
    blocks = raw.reshape(rows, k // bs, ts)
    for off in F16_FIELDS.get(qt, []):
        d = blocks[:, :, off : off + 2].copy().view(np.float16).astype(np.float32) * scale[0]
        blocks[:, :, off : off + 2] = d.astype(np.float16).view(np.uint8)
    for off in E8M0_FIELDS.get(qt, []):  # a power-of-two scale (MXFP4): the factor to the nearest power of two
        e = blocks[:, :, off].astype(np.int32) + round(float(np.log2(scale[0])))
        blocks[:, :, off] = np.clip(e, 1, 254).astype(np.uint8)
    return raw


def build(header: Path, out: Path, seed: int = 0) -> None:
    """The twin of the model whose header (write_header) is `header`, written to `out`."""
    table = json.loads(header.with_suffix(".tensors.json").read_text())
    rng = np.random.default_rng(seed)
    with open(out, "wb") as f:
        f.truncate(table["file_size"])
        f.write(header.read_bytes())
        for t in table["tensors"]:
            f.seek(t["offset"])
            rows, k, qt, scale = t["rows"], t["row_len"], T(t["type"]), []
            for r0 in range(0, rows, ROWS_PER_CHUNK):
                f.write(_rows(t["name"], qt, min(ROWS_PER_CHUNK, rows - r0), k, rng, scale).tobytes())
            if f.tell() != t["offset"] + t["nbytes"]:
                raise ValueError(f"{t['name']}: wrote {f.tell() - t['offset']} bytes, the table says {t['nbytes']}")


def retype(src: Path, out: Path, mapping: dict[T, T], seed: int = 0) -> None:
    """A twin of src (its metadata and tensor shapes) with random weights, each tensor of a type in mapping
    written in the type it maps to (ValueError where a tensor's rows are not whole blocks of that type). The writer
    holds every tensor until it writes the file: about the model's size in memory (build streams; this does not)."""
    import gguf
    from localllm.model.gguf import GGUFFile

    with GGUFFile(src) as f:  # first: a corrupt or missing source is the loader's one-line error, nothing written
        reader = gguf.GGUFReader(src)
        w = gguf.GGUFWriter(str(out), f.metadata["general.architecture"])
        for key, field in reader.fields.items():
            # the writer's own; general.alignment too (the writer pads to its default, which a copied value could
            # contradict); general.file_type stays the source's (a label)
            if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), vtype, sub)
        rng = np.random.default_rng(seed)
        for t in f.tensors.values():
            qt = mapping.get(T(t.type.id), T(t.type.id))
            bs = GGML_QUANT_SIZES[qt][0]
            if t.row_len % bs:
                raise ValueError(f"{t.name}: rows of {t.row_len} weights are not whole {qt.name} blocks of {bs}")
            rows = _rows(t.name, qt, t.n_rows, t.row_len, rng, [])
            if qt in (T.F32, T.F16):  # float tensors as arrays of their own shape (norms and biases are 1-D)
                w.add_tensor(t.name, rows.view(np.float32 if qt == T.F32 else np.float16).reshape(t.shape))
            else:  # the byte rows of a quantized tensor of t's shape (raw_shape: numpy order, in bytes)
                w.add_tensor(t.name, rows, raw_shape=(*t.shape[:-1], rows.shape[-1]), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="synthetic_twin.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    h = sub.add_parser("header", help="keep real models' headers and tensor tables (small files)")
    h.add_argument("paths", nargs="+", type=Path, metavar="MODEL.gguf... DIR")
    b = sub.add_parser("build", help="write a twin from a header")
    b.add_argument("header", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("retype", help="a twin with some tensor types changed (FROM=TO)")
    r.add_argument("src", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("maps", nargs="+", metavar="FROM=TO")
    r.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    try:
        if a.verb == "header":
            if len(a.paths) < 2:
                p.error("header needs MODEL.gguf... and DIR")
            for src in a.paths[:-1]:
                print(write_header(src, a.paths[-1]))
        elif a.verb == "retype":
            try:
                mapping = {T[x]: T[y] for x, y in (m.split("=", 1) for m in a.maps)}
            except (KeyError, ValueError):
                p.error(f"maps are FROM=TO of GGML type names (Q4_K=Q5_K), got {' '.join(a.maps)}")
            retype(a.src, a.out, mapping, a.seed)
            print(a.out)
        else:
            build(a.header, a.out, a.seed)
            print(a.out)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
