"""The extension's shape (DESIGN.md, house style): the binding files are the only C++ that includes pybind11,
runtime/native.py is the only module that imports localllm._native, and the type table the kernels compute
with is the one runtime/model/quant_types.py declares."""

from __future__ import annotations

import re
from pathlib import Path

from localllm import native
from localllm.model import quant_types

ROOT = Path(__file__).resolve().parents[2]


def test_only_the_binding_files_include_pybind11():
    including = {p.name for p in (ROOT / "native").rglob("*") if p.is_file() and "#include <pybind11/" in p.read_text()}
    assert including, "no binding file found"
    assert all(re.fullmatch(r"bind_\w+\.cpp|bindings\.h|module\.cpp", name) for name in including), including


def test_kernels_py_is_the_only_importer_of_the_extension():
    pattern = re.compile(
        r"^\s*(from\s+\S*\s+import\s+[^#\n]*\b_native\b|import\s+\S*_native\b|from\s+\S*_native\b)", re.M
    )
    importers = sorted(
        str(p.relative_to(ROOT))
        for folder in ("runtime", "tui")
        for p in (ROOT / folder).rglob("*.py")
        if pattern.search(p.read_text())
    )
    assert importers == ["runtime/native.py"]


def test_native_type_table_is_quant_types_supported_list():
    table = [tuple(t) for t in native.testing.type_table()]
    declared = [(q.id, q.name, q.block_size, q.type_size) for q in sorted(quant_types.SUPPORTED, key=lambda q: q.id)]
    assert table == declared
