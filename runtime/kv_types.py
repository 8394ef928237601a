"""The KV cache row formats a model can be loaded with, how LLM and the CLI choose them, and their row
conversions (the native extension is imported only by those).
"""

from __future__ import annotations

KV_TYPES = ("f16", "q8_0", "q4_0")  # KV cache row formats; q8_0 / q4_0 are GGML blocks of 32 along head_dim


def kv_types(kv_type: str = "f16", k_type: str | None = None, v_type: str | None = None) -> tuple[str, str]:
    """(K type, V type): kv_type for both unless k_type / v_type override it; ValueError names a bad one."""
    for name, value in (("kv_type", kv_type), ("k_type", k_type), ("v_type", v_type)):
        if value is None and name != "kv_type":
            continue
        if value not in KV_TYPES:
            raise ValueError(f"{name} must be one of {', '.join(KV_TYPES)}, got {value!r}")
    return k_type or kv_type, v_type or kv_type


def kv_quantize(kv_type: str, x):
    """float32 [n, k] -> uint8 [n, row bytes]: rows as the KV cache stores them (f16, or GGML q8_0 / q4_0
    blocks of 32, bit-identical to ggml's reference quantizers); k must be whole blocks."""
    from . import _native

    kv_types(kv_type)
    return _native.kv_quantize(kv_type, x)


def kv_dequantize(kv_type: str, rows, k: int):
    """uint8 [n, row bytes] -> float32 [n, k]: the values the attention reads from a KV row."""
    from . import _native

    kv_types(kv_type)
    return _native.kv_dequantize(kv_type, rows, k)


def hadamard(x):
    """float32 [n, dim] -> H x / sqrt(m) over groups of m dims (m the largest power of two dividing dim):
    the rotation applied per head to a quantized K (with q) and V (with the attention output)."""
    from . import _native

    return _native.hadamard(x)
