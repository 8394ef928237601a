"""A sentence-transformers BERT model (model.safetensors, config.json, tokenizer.json, 1_Pooling/config.json) written
as a GGUF file the way llama.cpp's convert_hf_to_gguf writes a BertModel: the same keys and tensor names, the
phantom-space WordPiece vocabulary, matrices in F16 and the rest in F32. It lets a real embedding model that the
package index carries only as Hugging Face files (all-MiniLM-L6-v2) be a test model (fetch_test_models.py).

    python models/bert_to_gguf.py MODEL_DIR OUT.gguf      # prints the file's sha256

Reads safetensors with numpy alone (an 8-byte header length, a JSON header, the raw tensors). The output's bytes
depend only on the input files and the gguf package.
"""

from __future__ import annotations

import argparse
import json
import re
import struct
import sys
from pathlib import Path

import gguf
import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": None, "I64": np.int64}
# Hugging Face BertModel name (after an optional "bert." prefix) -> GGUF name
_NAMES = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
_LAYER = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_POOLING = {"pooling_mode_mean_tokens": 1, "pooling_mode_cls_token": 2}  # llama.cpp's llama_pooling_type


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """name -> array (a view of the file's bytes, copied)."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(t["dtype"])
        if dtype is None:
            raise SystemExit(f"error: {path}: tensor {name} has dtype {t['dtype']}, which this converter does not read")
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(raw[base + a : base + b], dtype=dtype).reshape(t["shape"]).copy()
    return out


def gguf_name(hf: str) -> str | None:
    """The GGUF name of a BertModel tensor; None for what llama.cpp leaves out (the pooler, position_ids)."""
    hf = hf.removeprefix("bert.")
    if hf in _NAMES:
        return _NAMES[hf]
    m = re.fullmatch(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)", hf)
    if m and m.group(2) in _LAYER:
        return f"blk.{m.group(1)}.{_LAYER[m.group(2)]}.{m.group(3)}"
    if hf.startswith("pooler.") or hf == "embeddings.position_ids":
        return None
    raise SystemExit(f"error: tensor {hf} is not a BertModel tensor this converter knows")


def _phantom(token: str) -> str:
    """convert_hf_to_gguf's WordPiece spelling: a word-initial piece gets "▁", a "##" continuation loses it, and a
    bracketed token ([CLS], [unused0]) stays as it is."""
    if token.startswith("[") and token.endswith("]"):
        return token
    return token[2:] if token.startswith("##") else "\u2581" + token


def convert(model_dir: Path, out: Path) -> None:
    cfg = json.loads((model_dir / "config.json").read_text())
    if cfg.get("model_type") != "bert":
        raise SystemExit(f"error: {model_dir}: model_type {cfg.get('model_type')!r}, not bert")
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    if tok["model"]["type"] != "WordPiece":
        raise SystemExit(f"error: {model_dir}: tokenizer model {tok['model']['type']!r}, not WordPiece")
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    words = [w for w, _ in vocab]
    special = {t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
    pool_cfg = model_dir / "1_Pooling" / "config.json"
    pooling = 1
    if pool_cfg.exists():
        p = json.loads(pool_cfg.read_text())
        pooling = next((v for k, v in _POOLING.items() if p.get(k)), 1)

    w = gguf.GGUFWriter(str(out), "bert")
    w.add_string("general.name", str(cfg.get("_name_or_path", "bert")).rsplit("/", 1)[-1])  # not the folder's name
    w.add_uint32("bert.context_length", cfg["max_position_embeddings"])
    w.add_uint32("bert.embedding_length", cfg["hidden_size"])
    w.add_uint32("bert.feed_forward_length", cfg["intermediate_size"])
    w.add_uint32("bert.block_count", cfg["num_hidden_layers"])
    w.add_uint32("bert.attention.head_count", cfg["num_attention_heads"])
    w.add_float32("bert.attention.layer_norm_epsilon", cfg["layer_norm_eps"])
    w.add_bool("bert.attention.causal", False)
    w.add_uint32("bert.pooling_type", pooling)
    w.add_string("tokenizer.ggml.model", "bert")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", [_phantom(t) for t in words])
    w.add_array("tokenizer.ggml.token_type", [3 if t in special else 1 for t in words])
    w.add_uint32("tokenizer.ggml.token_type_count", cfg.get("type_vocab_size", 1))
    ids = {t: i for i, t in enumerate(words)}
    for key, text in (("eos", "[SEP]"), ("unknown", "[UNK]"), ("seperator", "[SEP]"), ("padding", "[PAD]")):
        w.add_uint32(f"tokenizer.ggml.{key}_token_id", ids[text])
    w.add_uint32("tokenizer.ggml.cls_token_id", ids["[CLS]"])
    w.add_uint32("tokenizer.ggml.mask_token_id", ids["[MASK]"])
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", True)

    tensors = read_safetensors(model_dir / "model.safetensors")
    for hf, a in tensors.items():
        name = gguf_name(hf)
        if name is None:
            continue
        a = a.astype(np.float32)
        if a.ndim == 2 and name != "token_types.weight":  # matrices (and the embeddings) in F16, as the converter does
            a = a.astype(np.float16)
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="bert_to_gguf.py", description=__doc__.splitlines()[0])
    ap.add_argument("model_dir", type=Path)
    ap.add_argument("out", type=Path)
    a = ap.parse_args(argv)
    convert(a.model_dir, a.out)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fetch_test_models import _sha256

    print(_sha256(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
