"""What a GGUF model is, as the store's manifest records it: architecture, parameters, quant, context length.

describe([path, ...]) -> {"architecture": "qwen2", "parameters": 494032768, "quant": "Q4_K_M", "context_length": 32768}
"""

from __future__ import annotations

from pathlib import Path

from ..model.gguf import GGUFFile

# llama_ftype (general.file_type) -> the quant name llama.cpp prints
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
}


def describe(paths: list[Path]) -> dict:
    """architecture, parameters, quant and context_length of a GGUF model (all parts of a split one).

    Raises GGUFError when a file is not a valid GGUF file.
    """
    info: dict = {"architecture": None, "parameters": 0, "quant": None, "context_length": None}
    by_type: dict[str, int] = {}
    for i, p in enumerate(paths):
        with GGUFFile(p) as g:
            if i == 0:
                info["architecture"] = g.architecture
                ft = g.metadata.get("general.file_type")
                info["quant"] = FILE_TYPES.get(ft) if isinstance(ft, int) else None
                ctx = g.arch_value("context_length")
                info["context_length"] = ctx if isinstance(ctx, int) else None
            for t in g.tensors.values():
                info["parameters"] += t.n_elements
                if len(t.dims) >= 2:
                    by_type[t.type.name] = by_type.get(t.type.name, 0) + t.nbytes
    if info["quant"] is None and by_type:
        info["quant"] = max(by_type, key=by_type.__getitem__)
    return info
