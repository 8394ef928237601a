"""GGUF files (v2 and v3), parsed over one read-only mmap without copying.

    f = GGUFFile(path)            # raises GGUFError (a ValueError) naming the problem and the offset
    f.metadata["general.architecture"] -> "qwen2"
    f.metadata["tokenizer.ggml.tokens"] -> StringArray (a lazy sequence of str)
    f.metadata["tokenizer.ggml.scores"] -> numpy array viewing the map
    f.tensors["blk.0.attn_q.weight"] -> TensorInfo; .data is a uint8 numpy view of its bytes

Nothing but the header, metadata and tensor table is read at open: tensor bytes are views into the
map, so the OS pages weights in on first touch. Every count, length and offset read from the file is
bounded by the bytes that remain, so a hostile header can neither allocate gigabytes nor read past
the end of the map.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import quant_types

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT = 32
MAX_KEY_LEN = 1 << 16

# metadata value types
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALAR = {
    _UINT8: ("<B", "<u1"),
    _INT8: ("<b", "<i1"),
    _UINT16: ("<H", "<u2"),
    _INT16: ("<h", "<i2"),
    _UINT32: ("<I", "<u4"),
    _INT32: ("<i", "<i4"),
    _FLOAT32: ("<f", "<f4"),
    _BOOL: ("<?", "<u1"),
    _UINT64: ("<Q", "<u8"),
    _INT64: ("<q", "<i8"),
    _FLOAT64: ("<d", "<f8"),
}
_TYPE_NAMES = [
    "uint8",
    "int8",
    "uint16",
    "int16",
    "uint32",
    "int32",
    "float32",
    "bool",
    "string",
    "array",
    "uint64",
    "int64",
    "float64",
]


class GGUFError(ValueError):
    """A malformed or unsupported GGUF file; the message names the file, the problem and the offset."""


class StringArray(Sequence[str]):
    """A GGUF array of strings, decoded on access. Offsets were validated when the file was opened."""

    def __init__(self, buf: memoryview, starts: np.ndarray, ends: np.ndarray, u8: np.ndarray | None = None):
        self._buf, self._starts, self._ends, self._u8 = buf, starts, ends, u8

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return bytes(self._buf[self._starts[i] : self._ends[i]]).decode("utf-8", errors="replace")

    def native_view(self):
        """(uint8 buffer, starts, ends) for the native string functions, or None when not backed by one."""
        return None if self._u8 is None else (self._u8, self._starts, self._ends)

    def raw(self, i: int) -> bytes:
        return bytes(self._buf[self._starts[i] : self._ends[i]])

    def tolist(self) -> list[str]:
        if self._u8 is not None:  # the whole array decoded natively (tokenizer vocabularies: 150k strings)
            from .. import native

            return native.decode_strings(self._u8, self._starts, self._ends)
        b, out = self._buf, []
        for s, e in zip(self._starts.tolist(), self._ends.tolist()):
            out.append(str(b[s:e], "utf-8", "replace"))
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __repr__(self) -> str:
        return f"StringArray(len={len(self)})"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGML order: dims[0] is the row length (innermost)
    type: quant_types.QuantType
    offset: int  # absolute byte offset in the file
    nbytes: int
    data: np.ndarray = field(repr=False)  # uint8 view into the map, [nbytes]

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order: (..., n_rows, row_len)."""
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def row_len(self) -> int:
        return self.dims[0]

    @property
    def n_rows(self) -> int:
        return self.n_elements // self.dims[0] if self.dims[0] else 0

    def rows(self) -> np.ndarray:
        """uint8 view [n_rows, row_bytes]."""
        return self.data.reshape(self.n_rows, self.type.row_bytes(self.row_len))


class _Reader:
    def __init__(self, path: str, buf: memoryview):
        self.path, self.buf, self.pos, self.end = path, buf, 0, len(buf)

    def fail(self, msg: str, at: int | None = None) -> GGUFError:
        return GGUFError(f"{self.path}: {msg} (at offset {self.pos if at is None else at})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise self.fail(f"truncated file: {what} needs {n} bytes, {self.end - self.pos} remain")

    def scalar(self, fmt: str, size: int, what: str):
        self.need(size, what)
        v = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def string_bounds(self, what: str, limit: int | None = None) -> tuple[int, int]:
        at = self.pos
        n = self.u64(f"length of {what}")
        if n > self.end or (limit is not None and n > limit):
            raise self.fail(f"absurd string length {n} for {what}", at)
        if n > self.end - self.pos:
            raise self.fail(f"truncated file: {what} needs {n} bytes, {self.end - self.pos} remain", at)
        s = self.pos
        self.pos += n
        return s, self.pos

    def string(self, what: str, limit: int | None = None) -> str:
        s, e = self.string_bounds(what, limit)
        try:
            return bytes(self.buf[s:e]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8", s) from None


class GGUFFile:
    """One GGUF file mapped read-only. Use as a context manager or call close()."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            mode = os.stat(self.path).st_mode
            if not stat.S_ISREG(mode):  # a directory cannot be mapped; opening a FIFO would block
                raise GGUFError(f"{self.path}: not a regular file (at offset 0)")
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise GGUFError(f"{self.path}: cannot open: {e.strerror}") from None
        try:
            self.file_size = os.fstat(fd).st_size
            if self.file_size < 24:
                raise GGUFError(
                    f"{self.path}: truncated file: {self.file_size} bytes is smaller than a GGUF header (at offset 0)"
                )
            try:
                self._mmap = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except OSError as e:
                raise GGUFError(f"{self.path}: cannot map the file: {e.strerror or e} (at offset 0)") from None
        finally:
            os.close(fd)
        try:
            self._parse(memoryview(self._mmap))
        except GGUFError:
            self.close()
            raise

    # -- parsing -----------------------------------------------------------------------------------
    def _parse(self, buf: memoryview) -> None:
        r = _Reader(self.path, buf)
        self._u8 = np.frombuffer(self._mmap, dtype=np.uint8)
        magic = bytes(buf[:4])
        if magic != GGUF_MAGIC:
            raise r.fail(f"bad magic {magic!r}, expected {GGUF_MAGIC!r}: not a GGUF file", 0)
        r.pos = 4
        self.version = r.u32("version")
        if self.version not in (2, 3):
            if self.version in (0x02000000, 0x03000000):
                raise r.fail("big-endian GGUF files are not supported", 4)
            raise r.fail(f"unsupported GGUF version {self.version} (supported: 2, 3)", 4)
        n_tensors = r.u64("tensor count")
        n_kv = r.u64("metadata count")
        # each metadata entry needs >= 8 (key len) + 1 + 4 (type) bytes; each tensor info >= 8 + 1 + 4 + 4 + 8
        if n_kv > (r.end - r.pos) // 13:
            raise r.fail(f"absurd metadata count {n_kv} for a {self.file_size}-byte file", 16)
        if n_tensors > (r.end - r.pos) // 25:
            raise r.fail(f"absurd tensor count {n_tensors} for a {self.file_size}-byte file", 8)

        self.metadata: dict[str, Any] = {}
        self.metadata_types: dict[str, str] = {}
        for _ in range(n_kv):
            at = r.pos
            key = r.string("metadata key", MAX_KEY_LEN)
            vtype = r.u32(f"type of {key!r}")
            if key in self.metadata:
                raise r.fail(f"duplicate metadata key {key!r}", at)
            self.metadata[key] = self._value(r, vtype, key)
            self.metadata_types[key] = _TYPE_NAMES[vtype] if vtype < len(_TYPE_NAMES) else str(vtype)

        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (
            not isinstance(align, int)
            or isinstance(align, bool)
            or align <= 0
            or align & (align - 1)
            or align > 1 << 20
        ):
            raise r.fail(f"general.alignment must be a power of two, got {align!r}")
        self.alignment = align

        infos = []
        for i in range(n_tensors):
            at = r.pos
            name = r.string(f"name of tensor {i}", MAX_KEY_LEN)
            n_dims = r.u32(f"dimension count of {name!r}")
            if not 1 <= n_dims <= MAX_DIMS:
                raise r.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)", at)
            r.need(8 * n_dims, f"dimensions of {name!r}")
            dims = struct.unpack_from(f"<{n_dims}Q", buf, r.pos)
            r.pos += 8 * n_dims
            type_id = r.u32(f"type of {name!r}")
            offset = r.u64(f"offset of {name!r}")
            qt = quant_types.BY_ID.get(type_id)
            if qt is None:
                raise r.fail(f"tensor {name!r} has unknown type id {type_id}", r.pos - 12)
            n = 1
            for d in dims:
                if d > self.file_size * 8:
                    raise r.fail(f"tensor {name!r} has absurd dimension {d}", at)
                n *= d
            if dims[0] % qt.block_size:
                raise r.fail(
                    f"tensor {name!r}: row length {dims[0]} is not a multiple of {qt.name}'s block size {qt.block_size}",
                    at,
                )
            if offset % align:
                raise r.fail(
                    f"tensor {name!r}: data offset {offset} is not a multiple of the alignment {align}", r.pos - 8
                )
            infos.append((name, dims, qt, offset, n // qt.block_size * qt.type_size, at))

        self.data_offset = (r.pos + align - 1) // align * align
        self.tensors: dict[str, TensorInfo] = {}
        u8 = self._u8
        for name, dims, qt, offset, nbytes, at in infos:
            start = self.data_offset + offset
            if start + nbytes > self.file_size:
                raise GGUFError(
                    f"{self.path}: tensor data past end of file: {name!r} needs bytes "
                    f"{start}..{start + nbytes} of a {self.file_size}-byte file (at offset {at})"
                )
            if name in self.tensors:
                raise GGUFError(f"{self.path}: duplicate tensor name {name!r} (at offset {at})")
            self.tensors[name] = TensorInfo(name, tuple(dims), qt, start, nbytes, u8[start : start + nbytes])

    def _value(self, r: _Reader, vtype: int, key: str, depth: int = 0):
        if vtype in _SCALAR:
            fmt, _ = _SCALAR[vtype]
            v = r.scalar(fmt, struct.calcsize(fmt), f"value of {key!r}")
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return r.string(f"value of {key!r}")
        if vtype == _ARRAY:
            if depth > 2:
                raise r.fail(f"arrays nested too deeply in {key!r}")
            at = r.pos
            etype = r.u32(f"element type of {key!r}")
            count = r.u64(f"element count of {key!r}")
            remain = r.end - r.pos
            if etype in _SCALAR:
                _, dt = _SCALAR[etype]
                size = np.dtype(dt).itemsize
                if count > remain // size:
                    raise r.fail(f"absurd array length {count} for {key!r}", at)
                arr = np.frombuffer(r.buf, dtype=dt, count=count, offset=r.pos)
                r.pos += count * size
                return arr.astype(bool) if etype == _BOOL else arr
            if etype == _STRING:
                if count > remain // 8:
                    raise r.fail(f"absurd array length {count} for {key!r}", at)
                return self._string_array(r, count, key)
            if etype == _ARRAY:
                if count > remain // 12:
                    raise r.fail(f"absurd array length {count} for {key!r}", at)
                return [self._value(r, _ARRAY, key, depth + 1) for _ in range(count)]
            raise r.fail(f"unknown array element type {etype} in {key!r}", at)
        raise r.fail(f"unknown metadata value type {vtype} for {key!r}", r.pos - 4)

    def _string_array(self, r: _Reader, count: int, key: str) -> StringArray:
        from .. import native  # the scan is native: a Python loop costs ~0.4 us per string

        try:
            starts, ends, r.pos = native.scan_strings(self._u8, r.pos, count)
        except ValueError as e:
            index, _, problem = str(e).partition(": ")
            if problem == "truncated":
                raise r.fail(f"truncated file: element {index.split()[-1]} of {key!r}") from None
            raise r.fail(f"{problem} in element {index.split()[-1]} of {key!r}") from None
        return StringArray(r.buf, starts, ends, self._u8)

    # -- access ------------------------------------------------------------------------------------
    @property
    def architecture(self) -> str | None:
        a = self.metadata.get("general.architecture")
        return a if isinstance(a, str) else None

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        """metadata[f"{architecture}.{suffix}"], e.g. arch_value("block_count")."""
        return self.metadata.get(f"{self.architecture}.{suffix}", default)

    def tensor(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor named {name!r}") from None

    def close(self) -> None:
        m = getattr(self, "_mmap", None)
        if m is not None:
            self.tensors = {}
            self.metadata = {}
            self._u8 = None
            with contextlib.suppress(BufferError):  # numpy views are still alive; the map is released when they are
                m.close()
            self._mmap = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
