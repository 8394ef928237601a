"""The KV cache row formats a model can be loaded with, and how LLM and the CLI choose them (the row
conversions are native: kv_format.h; the tests reach them through native.testing)."""

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
