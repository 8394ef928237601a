"""models/synthetic_twin.py: a twin keeps the real file's header byte for byte (metadata, tokenizer, tensor table),
holds valid random weights of the same types and shapes, and runs through the model like the real one."""

from __future__ import annotations

import numpy as np
import pytest
import synthetic_twin
from conftest import model_file
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model
from localllm.text.tokenizer import Tokenizer
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


@pytest.mark.model
def test_a_retyped_twin_has_the_real_metadata_and_shapes_in_the_types_asked(tmp_path):
    """retype: the speed of types no test model has (Q5_K_M-like from Q4_K_M): the source's metadata and tensor
    shapes, each Q4_K tensor written as Q5_K (the rest as they were), and it runs."""
    real = model_file(SMOL)
    out = tmp_path / "retyped.gguf"
    assert synthetic_twin.main(["retype", str(real), str(out), "Q4_1=Q5_K", "--seed", "1"]) == 1  # 576 % 256
    assert synthetic_twin.main(["retype", str(real), str(out), "Q8_0=Q5_1"]) == 0
    with GGUFFile(real) as a, GGUFFile(out) as b:
        assert a.metadata.keys() == b.metadata.keys() and a.metadata_types == b.metadata_types
        for key, value in a.metadata.items():
            assert np.array_equal(np.asarray(value), np.asarray(b.metadata[key])), key
        assert a.tensors.keys() == b.tensors.keys()
        for name, t in a.tensors.items():
            u = b.tensors[name]
            assert u.dims == t.dims and u.type.name == ("Q5_1" if t.type.name == "Q8_0" else t.type.name), name
        ids = Tokenizer.from_metadata(b.metadata, name="twin").encode("def add(a, b):")
        logits = one_sequence(Model(b, n_blocks=2, threads=2), ids)
        assert np.all(np.isfinite(logits)) and logits.std() > 0


def test_a_retype_of_a_corrupt_source_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "bad.gguf"
    src.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert synthetic_twin.main(["retype", str(src), str(tmp_path / "out.gguf"), "Q4_K=Q5_K"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.gguf" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out.gguf").exists()


def test_a_retype_map_names_ggml_types(capsys):
    with pytest.raises(SystemExit):
        synthetic_twin.main(["retype", "a.gguf", "b.gguf", "Q4_K=Q9_K"])
    assert "FROM=TO" in capsys.readouterr().err


def test_a_bad_header_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "m.header").write_bytes(b"GGUF")
    assert synthetic_twin.main(["build", str(tmp_path / "m.header"), str(tmp_path / "out.gguf")]) == 1
    assert "m.tensors.json" in capsys.readouterr().err


SMOL = "smollm2-135m-instruct-q4_1"
_LOGITS = """
import sys
import numpy as np
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model
from localllm.model.step_batch import StepBatch
f = GGUFFile(sys.argv[1])
ids = [int(i) for i in sys.argv[3].split(",")]
m = Model(f, n_blocks=8, threads=2)
pos = np.arange(len(ids))
np.save(sys.argv[2], m.forward(StepBatch(ids, pos, pos, np.zeros(len(ids), int), np.arange(8)[None, :], [len(ids)], pos)))
"""


@pytest.mark.model
def test_a_twin_is_tame_enough_to_compare_two_devices_on(tmp_path):
    """What the gpu tests lean on (tests/runtime/test_device.py, run on twins by .ci/gpu-check): each matrix has
    Xavier's spread, and two summation orders (the scalar kernels and this CPU's fastest) agree on every top-1 with a
    margin of 0.1 or more, the logits within 5% of their largest magnitude: a random network with larger weights
    turns chaotic and fails that (seen: 4 of 13 rows flipped)."""
    import os
    import subprocess
    import sys

    from gguf.quants import dequantize

    synthetic_twin.main(["header", str(model_file(SMOL)), str(tmp_path)])
    twin = tmp_path / "twin.gguf"
    synthetic_twin.main(["build", str(tmp_path / f"{SMOL}.header"), str(twin)])
    with GGUFFile(twin) as f:
        t = f.tensors["blk.3.ffn_down.weight"]
        w = dequantize(np.array(t.rows()[:64]), t.type.id)
        assert abs(w.std() * np.sqrt(t.row_len) - 1) < 0.1
        ids = Tokenizer.from_metadata(f.metadata, name="twin").encode("def fibonacci(n):\n    return")
    script = tmp_path / "logits.py"
    script.write_text(_LOGITS)
    out = {}
    for path in ("scalar", ""):
        env = (
            {**os.environ, "LOCALLLM_CPU": path}
            if path
            else {k: v for k, v in os.environ.items() if k != "LOCALLLM_CPU"}
        )
        npy = tmp_path / f"{path or 'best'}.npy"
        subprocess.run([sys.executable, str(script), str(twin), str(npy), ",".join(map(str, ids))], env=env, check=True)
        out[path] = np.load(npy)
    a, b = out[""], out["scalar"]
    assert np.abs(a - b).max() < 0.05 * np.abs(b).max()
    for r in range(len(b)):
        top2 = np.argsort(b[r])[-2:]
        if b[r][top2[1]] - b[r][top2[0]] >= 0.1:
            assert np.argmax(a[r]) == top2[1], f"row {r}"


def test_a_corrupt_source_is_a_clear_error_and_writes_nothing(tmp_path, capsys):
    src = tmp_path / "bad.gguf"
    src.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert synthetic_twin.main(["header", str(src), str(tmp_path / "out")]) == 1
    assert "bad.gguf" in capsys.readouterr().err
    assert not (tmp_path / "out" / "bad.header").exists()


@pytest.mark.parametrize("qt", ["Q4_0", "Q6_K", "MXFP4"])
def test_twin_matrices_have_xaviers_spread_in_every_scale_format(qt):
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    k = 4096
    rows = synthetic_twin._rows("blk.0.ffn_up_exps.weight", T[qt], 64, k, np.random.default_rng(0), [])
    std = float(dequantize(rows, T[qt]).std()) * np.sqrt(k)
    # f16 scales take the factor exactly; MXFP4's E8M0 exponents take it to the nearest power of two
    assert (0.95 < std < 1.05) if qt != "MXFP4" else (0.7 < std < 1.42), std
