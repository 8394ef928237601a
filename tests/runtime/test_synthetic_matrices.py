"""models/synthetic_matrices.py: the files it writes open with the loader, hold the declared types and
shapes, carry the fixed scale in every block, and multiply through the kernels like any GGUF's matrices."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from gguf.quants import dequantize
from localllm import native
from localllm.model.gguf import GGUFFile

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
                y = native.matmul_raw(int(qtype), raw, k, x)[0]
                ref = w.astype(np.float64) @ x[0].astype(np.float64)
                assert np.linalg.norm(y - ref) <= 0.02 * np.linalg.norm(ref)  # int8 activations: 0.1-0.9% here


def test_synthetic_script_without_a_directory_prints_its_usage(capsys):
    assert load_script().main([]) == 2
    assert "synthetic_matrices.py DIR" in capsys.readouterr().err


def test_real_subset_copies_each_type_until_its_budget(tmp_path):
    """--real: the copied matrices are the source's own bytes (first rows where a matrix is cut), about the budget
    of each type and never the embedding."""
    mod = load_script()
    assert mod.main([str(tmp_path / "syn")]) == 0
    src = tmp_path / "syn" / "syn-0.5b.gguf"
    assert mod.main([str(tmp_path / "sub"), "--real", str(src), "--mb-per-type", "1"]) == 0
    dst = tmp_path / "sub" / "sub-syn-0.5b.gguf"
    with GGUFFile(src) as f, GGUFFile(dst) as g:
        per_type: dict[str, int] = {}
        row_bytes: dict[str, int] = {}
        for name, t in g.tensors.items():
            s = f.tensors[name]
            assert (t.type.id, t.row_len) == (s.type.id, s.row_len) and t.n_rows <= s.n_rows
            rows = np.array(t.rows())
            np.testing.assert_array_equal(rows, np.array(s.rows()[: t.n_rows]))
            per_type[t.type.name] = per_type.get(t.type.name, 0) + rows.nbytes
            row_bytes[t.type.name] = max(row_bytes.get(t.type.name, 0), rows.shape[1])
        assert set(per_type) == {"Q5_0", "Q8_0", "Q4_K", "Q6_K"}
        # each type stops once it holds 1 MB: the matrix that crosses the budget is cut within one row of it
        for ty, b in per_type.items():
            assert 1e6 <= b < 1e6 + row_bytes[ty], ty


def test_real_subset_needs_a_positive_budget(tmp_path, capsys):
    assert load_script().main([str(tmp_path), "--real", "x.gguf", "--mb-per-type", "0"]) == 2
    assert "--mb-per-type" in capsys.readouterr().err


def test_real_subset_of_a_bad_file_is_a_one_line_error_and_writes_nothing(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    out = tmp_path / "sub"
    mod = load_script()
    assert mod.main([str(out), "--real", str(bad)]) == 1
    assert mod.main([str(out), "--real", str(tmp_path / "missing.gguf")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "bad.gguf" in err[0] and "missing.gguf" in err[1]
    assert not list(out.glob("*.gguf"))


def test_real_subsets_of_two_sources_of_one_name_are_refused(tmp_path, capsys):
    """Two sources with one file name (a/m.gguf, b/m.gguf) would write the same DIR/sub-m.gguf, the second over
    the first: refused before anything is written."""
    out = tmp_path / "sub"
    a = load_script().main([str(out), "--real", str(tmp_path / "a" / "m.gguf"), str(tmp_path / "b" / "m.gguf")])
    assert a == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "two sources named m.gguf" in err[0] and err[0].startswith("error: ")
    same = str(tmp_path / "a" / "m.gguf")
    assert load_script().main([str(out), "--real", same, same]) == 2
    assert "m.gguf given twice" in capsys.readouterr().err
    assert not out.exists()
