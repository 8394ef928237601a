"""models/synthetic_matrices.py: the files it writes open with the loader, hold the declared types and
shapes, carry the fixed scale in every block, and multiply through the kernels like any GGUF's matrices."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from gguf.quants import dequantize

from localllm import kernels
from localllm.gguf import GGUFFile

SCRIPT = Path(__file__).resolve().parents[2] / "models" / "synthetic_matrices.py"


def load_script():
    spec = importlib.util.spec_from_file_location("synthetic_matrices", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_synthetic_files_hold_the_declared_matrices(tmp_path):
    mod = load_script()
    assert mod.main([str(tmp_path)]) == 0
    for name, mats in mod.SHAPES.items():
        with GGUFFile(tmp_path / name) as f:
            assert sorted(f.tensors) == sorted(m[0] for m in mats)
            for tname, qtype, rows, k in mats:
                t = f.tensors[tname]
                assert (t.type.id, t.n_rows, t.row_len) == (int(qtype), rows, k)
                raw = np.array(t.rows()[:2])
                w = dequantize(raw, qtype).reshape(2, k)
                assert np.all(np.isfinite(w)) and np.abs(w).max() > 0
                # every block's scale is 2^-7: the weights are 2^-7 times small integers (times the K-quants'
                # 6- or 8-bit group scales)
                assert np.allclose(w * 128, np.round(w * 128))
                x = np.random.default_rng(0).standard_normal((1, k), dtype=np.float32)
                y = kernels.matmul_raw(int(qtype), raw, k, x)[0]
                ref = w.astype(np.float64) @ x[0].astype(np.float64)
                assert np.linalg.norm(y - ref) <= 0.02 * np.linalg.norm(ref)  # int8 activations: 0.1-0.9% here


def test_synthetic_script_without_a_directory_prints_its_usage(capsys):
    assert load_script().main([]) == 2
    assert "synthetic_matrices.py DIR" in capsys.readouterr().err
