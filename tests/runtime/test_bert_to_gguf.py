"""models/bert_to_gguf.py on a tiny sentence-transformers folder written here (safetensors by hand): the GGUF it
writes loads and embeds, is the same bytes each time, and whatever it cannot read is one clear error."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
import bert_to_gguf
from localllm.llm import LLM

# BERT's own layout: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103 (llama.cpp's defaults for a WordPiece
# vocabulary, which convert_hf_to_gguf relies on: it writes no BOS id)
VOCAB = [
    "[PAD]",
    *[f"[unused{i}]" for i in range(99)],
    "[UNK]",
    "[CLS]",
    "[SEP]",
    "[MASK]",
    "hello",
    "world",
    "##s",
    ",",
    "!",
]
D, FF, LAYERS = 8, 16, 1


def _safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        raw = a.tobytes()
        dtype = {np.float32: "F32", np.int64: "I64"}[a.dtype.type]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def tiny_bert(root: Path, **config) -> Path:
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    t = {
        "embeddings.position_ids": np.arange(16, dtype=np.int64)[None],
        "embeddings.word_embeddings.weight": w(len(VOCAB), D),
        "embeddings.position_embeddings.weight": w(16, D),
        "embeddings.token_type_embeddings.weight": w(2, D),
        "embeddings.LayerNorm.weight": np.ones(D, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(D, np.float32),
        "pooler.dense.weight": w(D, D),
    }
    b = "encoder.layer.0."
    for part, shape in (
        ("attention.self.query", (D, D)),
        ("attention.self.key", (D, D)),
        ("attention.self.value", (D, D)),
        ("attention.output.dense", (D, D)),
        ("intermediate.dense", (FF, D)),
        ("output.dense", (D, FF)),
    ):
        t[b + part + ".weight"], t[b + part + ".bias"] = w(*shape), np.zeros(shape[0], np.float32)
    for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
        t[b + norm + ".weight"], t[b + norm + ".bias"] = np.ones(D, np.float32), np.zeros(D, np.float32)
    root.mkdir(parents=True, exist_ok=True)
    _safetensors(root / "model.safetensors", t)
    cfg = {
        "_name_or_path": "org/tiny-bert",
        "model_type": "bert",
        "hidden_size": D,
        "intermediate_size": FF,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 2,
        "max_position_embeddings": 16,
        "layer_norm_eps": 1e-12,
        "type_vocab_size": 2,
        **config,
    }
    (root / "config.json").write_text(json.dumps(cfg))
    specials = [
        {"id": VOCAB.index(t), "content": t, "special": True} for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    ]
    tok = {"model": {"type": "WordPiece", "vocab": {t: i for i, t in enumerate(VOCAB)}}, "added_tokens": specials}
    (root / "tokenizer.json").write_text(json.dumps(tok))
    return root


def test_a_converted_bert_loads_embeds_and_is_reproducible(tmp_path):
    src = tiny_bert(tmp_path / "m")
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    bert_to_gguf.convert(src, a)
    bert_to_gguf.convert(src, b)
    assert a.read_bytes() == b.read_bytes()
    with LLM(a, n_threads=1) as llm:
        assert llm.encoder
        assert llm.tokenize("Hello worlds!") == [101, 104, 105, 106, 108, 102]  # [CLS] hello world ##s ! [SEP]
        v = llm.embed("hello, world")
    assert v.shape == (1, D) and abs(float(np.linalg.norm(v)) - 1) < 1e-5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"config": {"model_type": "llama"}}, "model_type 'llama', not bert"),
        ({"tokenizer": "BPE"}, "tokenizer model 'BPE', not WordPiece"),
        ({"tensor": "encoder.layer.0.attention.self.query_norm.weight"}, "not a BertModel tensor"),
    ],
)
def test_what_it_cannot_read_is_a_clear_error(tmp_path, change, message):
    src = tiny_bert(tmp_path / "m", **change.get("config", {}))
    if "tokenizer" in change:
        tok = json.loads((src / "tokenizer.json").read_text())
        tok["model"]["type"] = change["tokenizer"]
        (src / "tokenizer.json").write_text(json.dumps(tok))
    if "tensor" in change:
        _safetensors(src / "model.safetensors", {change["tensor"]: np.ones(D, np.float32)})
    with pytest.raises(SystemExit, match=message):
        bert_to_gguf.convert(src, tmp_path / "out.gguf")
