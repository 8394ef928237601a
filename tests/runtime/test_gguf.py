"""The GGUF loader against gguf-py's reader, on real and generated files, and against corrupt input."""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from conftest import MODEL_NAMES, model_file
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from localllm.model.gguf import GGUFError, GGUFFile, StringArray


def write_sample(path, alignment=None, tensors=True):
    w = GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 1.5)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 2.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo ✓")
    w.add_array("t.strs", ["a", "", "ü", "<|im_start|>"])
    w.add_array("t.ints", [1, 2, 3])
    w.add_array("t.floats", [0.5, -1.0])
    w.add_key_value("t.nested", [[1, 2], [3]], GGUFValueType.ARRAY)
    if tensors:
        w.add_tensor("a.weight", np.arange(64, dtype=np.float32).reshape(2, 32))
        w.add_tensor("b.weight", np.ones((3, 34), dtype=np.uint8), raw_dtype=T.Q8_0)
        w.add_tensor("c", np.arange(5, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_generated_file_matches_gguf_reader(tmp_path):
    p = write_sample(tmp_path / "s.gguf")
    with GGUFFile(p) as f:
        md = f.metadata
        assert f.version == 3
        assert md["general.architecture"] == "llama"
        assert (md["t.u8"], md["t.i8"], md["t.u16"], md["t.i16"]) == (200, -5, 60000, -30000)
        assert (md["t.u32"], md["t.i32"], md["t.u64"], md["t.i64"]) == (
            4_000_000_000,
            -2_000_000_000,
            2**63 + 5,
            -(2**62),
        )
        assert (md["t.f32"], md["t.f64"], md["t.bool"], md["t.str"]) == (1.5, 2.25, True, "héllo ✓")
        assert isinstance(md["t.strs"], StringArray) and md["t.strs"].tolist() == ["a", "", "ü", "<|im_start|>"]
        assert md["t.strs"][2] == "ü" and md["t.strs"][-1] == "<|im_start|>" and len(md["t.strs"]) == 4
        assert md["t.ints"].tolist() == [1, 2, 3] and md["t.floats"].tolist() == [0.5, -1.0]
        assert [a.tolist() for a in md["t.nested"]] == [[1, 2], [3]]
        r = GGUFReader(str(p))
        assert set(f.tensors) == {t.name for t in r.tensors}
        for t in r.tensors:
            mine = f.tensors[t.name]
            assert mine.dims == tuple(int(d) for d in t.shape)
            assert mine.type.id == int(t.tensor_type)
            assert mine.offset == int(t.data_offset)
            np.testing.assert_array_equal(mine.data, np.asarray(t.data).view(np.uint8).reshape(-1))
        assert f.tensors["a.weight"].data.view(np.float32).tolist() == list(range(64))
        assert f.tensors["b.weight"].rows().shape == (3, 34)


def test_custom_alignment(tmp_path):
    p = write_sample(tmp_path / "a.gguf", alignment=64)
    with GGUFFile(p) as f:
        assert f.alignment == 64 and f.data_offset % 64 == 0
        assert all(t.offset % 64 == 0 for t in f.tensors.values())


def test_vocab_only_file_without_tensors(tmp_path):
    with GGUFFile(write_sample(tmp_path / "v.gguf", tensors=False)) as f:
        assert f.tensors == {} and f.metadata["t.str"] == "héllo ✓"


@pytest.mark.parametrize("name", MODEL_NAMES[:1])  # gguf-py's reader needs ~13 s on the larger vocabularies
def test_real_models_match_gguf_reader(name):
    path = model_file(name)
    f = GGUFFile(path)
    r = GGUFReader(str(path))
    assert len(f.tensors) == len(r.tensors)
    for t in r.tensors[:: max(1, len(r.tensors) // 20)]:
        m = f.tensors[t.name]
        assert (m.dims, m.type.id, m.offset) == (tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset))
    for key in ("general.architecture", "tokenizer.ggml.model", f"{f.architecture}.block_count"):
        field = r.fields[key]
        v = field.contents()
        assert f.metadata[key] == v
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    assert f.metadata["tokenizer.ggml.tokens"].tolist() == toks
    f.close()


# ---- corrupt files ---------------------------------------------------------------------------------


def header(version=3, n_tensors=0, n_kv=0, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv_string(key, value):
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v


def tensor_info(name, dims, type_id, offset):
    n = name.encode()
    return (
        struct.pack("<Q", len(n))
        + n
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", type_id, offset)
    )


def open_bytes(tmp_path, data):
    p = tmp_path / "bad.gguf"
    p.write_bytes(data)
    return GGUFFile(p)


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "truncated file"),
        (b"GGUF\x03\x00", "truncated file"),
        (header(magic=b"GGML") + b"\0" * 8, "bad magic"),
        (header(version=1), "unsupported GGUF version 1"),
        (header(version=4), "unsupported GGUF version 4"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (header(n_kv=1 << 60), "absurd metadata count"),
        (header(n_tensors=1 << 60), "absurd tensor count"),
        (header(n_kv=1) + struct.pack("<Q", 1 << 40) + b"x" * 16, "absurd string length"),
        (header(n_kv=1) + kv_string("a", "b")[:-1], "truncated file"),
        (
            header(n_kv=1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99) + b"\0" * 16,
            "unknown metadata value type 99",
        ),
        (
            header(n_kv=1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 1 << 50) + b"\0" * 16,
            "absurd array length",
        ),
        (
            header(n_kv=1)
            + struct.pack("<Q", 1)
            + b"k"
            + struct.pack("<IIQ", 9, 8, 3)
            + struct.pack("<Q", 1 << 33)
            + b"\0" * 64,
            "absurd string length",
        ),
        (header(n_kv=1) + struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<I", 4) + b"\0" * 12, "not valid UTF-8"),
        (header(n_kv=2) + kv_string("a", "b") + kv_string("a", "c") + b"\0" * 16, "duplicate metadata key"),
        (header(n_tensors=1) + tensor_info("w", [32, 2], 77, 0) + b"\0" * 64, "unknown type id 77"),
        (header(n_tensors=1) + tensor_info("w", [32, 2, 1, 1, 1], 0, 0) + b"\0" * 64, "has 5 dimensions"),
        (header(n_tensors=1) + tensor_info("w", [32, 2], 0, 16) + b"\0" * 512, "not a multiple of the alignment 32"),
        (header(n_tensors=1) + tensor_info("w", [33, 2], 8, 0) + b"\0" * 512, "not a multiple of Q8_0's block size"),
        (header(n_tensors=1) + tensor_info("w", [32, 1000], 0, 0) + b"\0" * 512, "tensor data past end of file"),
        (header(n_tensors=1) + tensor_info("w", [1 << 62, 1 << 62], 0, 0) + b"\0" * 512, "absurd dimension"),
        (
            header(n_kv=1) + struct.pack("<Q", 17) + b"general.alignment" + struct.pack("<II", 4, 48) + b"\0" * 16,
            "power of two",
        ),
    ],
)
def test_corrupt_files_raise_clear_errors(tmp_path, data, message):
    with pytest.raises(GGUFError, match=message) as e:
        open_bytes(tmp_path, data)
    assert "bad.gguf" in str(e.value) and "offset" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_missing_file():
    with pytest.raises(GGUFError, match="cannot open"):
        GGUFFile("/nonexistent/model.gguf")


def test_directory_and_fifo_are_not_gguf_files(tmp_path):
    os.mkfifo(tmp_path / "fifo.gguf")  # opening it for reading would block until a writer came
    for p in (tmp_path, tmp_path / "fifo.gguf"):
        with pytest.raises(GGUFError, match=rf"^{p}: not a regular file \(at offset 0\)$"):
            GGUFFile(p)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_real_models_tensor_table_is_consistent(name):
    with GGUFFile(model_file(name)) as f:
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in f.tensors.values())
        assert spans[0][0] >= f.data_offset and spans[-1][1] <= f.file_size
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "tensors overlap"
        assert f.arch_value("block_count") > 0 and len(f.metadata["tokenizer.ggml.tokens"]) > 1000


def _fuzz_seed(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzz")
    p = write_sample(base / "seed.gguf")
    return p.read_bytes()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    out = [_fuzz_seed(tmp_path_factory)]
    for name in MODEL_NAMES[:1]:
        try:
            path = model_file(name)
        except pytest.skip.Exception:
            continue
        with GGUFFile(path) as f:
            end = f.data_offset
        out.append(path.read_bytes()[: end + 4096])  # a real header, its metadata and tensor table
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_mutated_headers_raise_only_gguf_error(tmp_path, seeds, data):
    seed = data.draw(st.sampled_from(seeds))
    buf = bytearray(seed)
    limit = min(len(buf), 1 << 16) if len(seeds) > 1 and seed is not seeds[0] else len(buf)
    for _ in range(data.draw(st.integers(1, 8))):
        kind = data.draw(st.sampled_from(["byte", "u64", "truncate"]))
        pos = data.draw(st.integers(0, limit - 1))
        if kind == "byte":
            buf[pos] = data.draw(st.integers(0, 255))
        elif kind == "u64" and pos + 8 <= len(buf):
            buf[pos : pos + 8] = struct.pack(
                "<Q", data.draw(st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**63, 2**64 - 1]))
            )
        elif kind == "truncate":
            del buf[pos:]
            break
    p = tmp_path / "fuzz.gguf"
    p.write_bytes(bytes(buf))
    try:
        f = GGUFFile(p)
    except GGUFError:
        return
    for v in f.metadata.values():  # lazily decoded values must decode too
        if isinstance(v, StringArray):
            v.tolist()
    f.close()
