"""models/synthetic_twin.py: a twin keeps the real file's header byte for byte (metadata, tokenizer, tensor table),
holds valid random weights of the same types and shapes, and runs through the model like the real one."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic_twin
from conftest import model_file
from localllm.gguf import GGUFFile
from localllm.model import Model
from localllm.tokenizer import Tokenizer
from test_forward import one_sequence

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"


@pytest.mark.model
def test_a_twin_has_the_real_header_and_random_weights_that_run(tmp_path):
    real = model_file(QWEN)
    assert synthetic_twin.main(["header", str(real), str(tmp_path)]) == 0
    header = tmp_path / f"{QWEN}.header"
    assert synthetic_twin.main(["build", str(header), str(tmp_path / "twin.gguf")]) == 0
    with GGUFFile(real) as a, GGUFFile(tmp_path / "twin.gguf") as b:
        assert a.file_size == b.file_size and a.data_offset == b.data_offset == header.stat().st_size
        assert a.metadata.keys() == b.metadata.keys()
        for name, t in a.tensors.items():
            u = b.tensors[name]
            assert (u.type, u.dims, u.offset, u.nbytes) == (t.type, t.dims, t.offset, t.nbytes)
        assert not np.array_equal(a.tensors["blk.0.attn_q.weight"].data, b.tensors["blk.0.attn_q.weight"].data)
        ids = Tokenizer.from_metadata(b.metadata, name="twin").encode("def add(a, b):")
        assert ids == Tokenizer.from_metadata(a.metadata, name="real").encode("def add(a, b):")
        logits = one_sequence(Model(b, n_blocks=2, threads=2), ids)
        assert np.all(np.isfinite(logits)) and logits.std() > 0


def test_a_bad_header_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "m.header").write_bytes(b"GGUF")
    assert synthetic_twin.main(["build", str(tmp_path / "m.header"), str(tmp_path / "out.gguf")]) == 1
    assert "m.tensors.json" in capsys.readouterr().err
