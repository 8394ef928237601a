"""Random GGML blocks for kernel tests: random bytes with every f16 scale field (and MXFP4's E8M0 exponent) set to a
sane value, so each type's whole bit-level format (signs, high bits, packed 6-bit scales) is exercised."""

from __future__ import annotations

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T

# byte offsets of the f16 scale fields inside each block (the rest of the block is random bits)
F16_FIELDS = {
    T.Q4_0: [0],
    T.Q5_0: [0],
    T.Q8_0: [0],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
    T.Q4_1: [0, 2],
    T.Q5_1: [0, 2],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q6_K: [208],
}
# byte offsets of the E8M0 exponent fields (scale 2^(e - 128)): e drawn from E8M0_RANGE, scales 2^-12 .. 2^3
E8M0_FIELDS = {T.MXFP4: [0]}
E8M0_RANGE = (116, 132)
TYPES = [
    T.F32,
    T.F16,
    T.BF16,
    T.Q4_0,
    T.Q4_1,
    T.Q5_0,
    T.Q5_1,
    T.Q8_0,
    T.Q2_K,
    T.Q3_K,
    T.Q4_K,
    T.Q5_K,
    T.Q6_K,
    T.IQ4_NL,
    T.IQ4_XS,
    T.MXFP4,
]


def random_rows(qt: T, rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [rows, row_bytes] holding rows of k weights of type qt."""
    bs, ts = GGML_QUANT_SIZES[qt]
    if qt == T.F32:
        return rng.standard_normal((rows, k), dtype=np.float32).view(np.uint8)
    if qt == T.F16:
        return rng.standard_normal((rows, k)).astype(np.float16).view(np.uint8)
    if qt == T.BF16:
        f = rng.standard_normal((rows, k)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, size=(rows, k // bs, ts), dtype=np.uint8)
    for off in E8M0_FIELDS.get(qt, []):
        raw[:, :, off] = rng.integers(*E8M0_RANGE, size=(rows, k // bs), dtype=np.uint8)
    for off in F16_FIELDS.get(qt, []):
        d = (rng.random((rows, k // bs)) * 0.02 + 0.001) * rng.choice([-1, 1], size=(rows, k // bs))
        raw[:, :, off : off + 2] = d.astype(np.float16).view(np.uint8).reshape(rows, k // bs, 2)
    return raw.reshape(rows, -1)
