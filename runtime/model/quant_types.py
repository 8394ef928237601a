"""GGML tensor types: id, name, block size (weights per block) and type size (bytes per block).

The ids and sizes are GGML's (cross-checked against `gguf.constants` in tests). `supported` marks the
types the native kernels compute; every other known type is recognised by the loader but refused by
the kernels with an error naming the type and the tensor.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QuantType:
    id: int
    name: str
    block_size: int  # weights per block
    type_size: int  # bytes per block
    supported: bool  # computed by the native kernels

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.type_size / self.block_size

    def row_bytes(self, n: int) -> int:
        """Bytes of a row of n weights; raises ValueError when n is not a whole number of blocks."""
        if n % self.block_size:
            raise ValueError(f"{self.name}: row length {n} is not a multiple of the block size {self.block_size}")
        return n // self.block_size * self.type_size


_TABLE = [
    # id, name, block, bytes, supported
    (0, "F32", 1, 4, True),
    (1, "F16", 1, 2, True),
    (2, "Q4_0", 32, 18, True),
    (3, "Q4_1", 32, 20, True),
    (6, "Q5_0", 32, 22, True),
    (7, "Q5_1", 32, 24, True),
    (8, "Q8_0", 32, 34, True),
    (9, "Q8_1", 32, 36, False),
    (10, "Q2_K", 256, 84, True),
    (11, "Q3_K", 256, 110, True),
    (12, "Q4_K", 256, 144, True),
    (13, "Q5_K", 256, 176, True),
    (14, "Q6_K", 256, 210, True),
    (15, "Q8_K", 256, 292, False),
    (16, "IQ2_XXS", 256, 66, False),
    (17, "IQ2_XS", 256, 74, False),
    (18, "IQ3_XXS", 256, 98, False),
    (19, "IQ1_S", 256, 50, False),
    (20, "IQ4_NL", 32, 18, True),
    (21, "IQ3_S", 256, 110, False),
    (22, "IQ2_S", 256, 82, False),
    (23, "IQ4_XS", 256, 136, True),
    (24, "I8", 1, 1, False),
    (25, "I16", 1, 2, False),
    (26, "I32", 1, 4, False),
    (27, "I64", 1, 8, False),
    (28, "F64", 1, 8, False),
    (29, "IQ1_M", 256, 56, False),
    (30, "BF16", 1, 2, True),
    (34, "TQ1_0", 256, 54, False),
    (35, "TQ2_0", 256, 66, False),
    (39, "MXFP4", 32, 17, True),
]

BY_ID: dict[int, QuantType] = {t[0]: QuantType(*t) for t in _TABLE}
BY_NAME: dict[str, QuantType] = {q.name: q for q in BY_ID.values()}
SUPPORTED: list[QuantType] = [q for q in BY_ID.values() if q.supported]
# supported by the CPU kernels but not decoded by the CUDA backend (native/cuda/gemm.cu, with_type), which would
# refuse them tensor by tensor at load: a model holding one runs on the CPU (model.py)
CPU_ONLY: frozenset[str] = frozenset({"MXFP4"})


def get(type_id_or_name: int | str) -> QuantType:
    """Returns the type; raises ValueError naming an unknown id or name."""
    t = BY_NAME.get(type_id_or_name.upper()) if isinstance(type_id_or_name, str) else BY_ID.get(type_id_or_name)
    if t is None:
        raise ValueError(f"unknown GGML tensor type {type_id_or_name!r}")
    return t
