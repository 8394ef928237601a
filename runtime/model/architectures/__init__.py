"""Model specs from GGUF files: `spec_from_gguf(f)` dispatches on `general.architecture`.

with GGUFFile(path) as f:
    spec = spec_from_gguf(f)     # ModelSpec; raises UnsupportedModelError (a ValueError) naming the field
"""

from __future__ import annotations

from . import bert, gemma2, gemma3, gpt_oss, llama, mistral3, nomic_bert, phi3, qwen2, qwen3, qwen3moe, smollm3
from .spec import LayerSpec, ModelSpec, RopeSpec, UnsupportedModelError

ARCHITECTURES = {
    m.ARCH: m.spec
    for m in (llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, smollm3, phi3, mistral3, gpt_oss, bert, nomic_bert)
}

__all__ = ["ARCHITECTURES", "LayerSpec", "ModelSpec", "RopeSpec", "UnsupportedModelError", "spec_from_gguf"]


def spec_from_gguf(f) -> ModelSpec:
    """f: a localllm.model.gguf.GGUFFile."""
    arch = f.metadata.get("general.architecture")
    if arch is None:
        raise UnsupportedModelError(f.path, "general.architecture", "missing (required)")
    build = ARCHITECTURES.get(arch) if isinstance(arch, str) else None
    if build is None:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise UnsupportedModelError(
            f.path, "general.architecture", f"unsupported architecture {arch!r} (supported: {supported})"
        )
    return build(f)
