"""Fill-in-the-middle prompts from the model's own FIM tokens (read from the GGUF vocab: Qwen2.5-Coder's
<|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>, <|repo_name|>, <|file_sep|>), in prefix-suffix-middle order, with
other files' chunks ahead of them as llama.cpp's /infill does. Too long an input is trimmed to fit: other files
first, then the far end of the prefix and of the suffix (the text nearest the cursor is kept).

    ids = fim_prompt(tok, prefix, suffix, extra=[{"filename": "a.py", "text": "..."}], budget=ctx - n_predict)
    # ValueError when the model has no FIM tokens
"""

from __future__ import annotations

from collections.abc import Sequence

from ..text.tokenizer import Tokenizer


def has_fim(tok: Tokenizer) -> bool:
    return all(tok.fim.get(k) is not None for k in ("fim_pre", "fim_suf", "fim_mid"))


def fim_prompt(tok: Tokenizer, prefix: str, suffix: str, extra: Sequence[dict] = (), budget: int = 4096) -> list[int]:
    if not has_fim(tok):
        raise ValueError(
            f"{tok.name}: this model has no fill-in-the-middle tokens (fim_prefix, fim_suffix, fim_middle)"
        )

    def enc(text: str) -> list[int]:
        return tok.encode(text, add_special=False) if text else []

    bos = [tok.bos_id] if tok.add_bos and tok.bos_id is not None else []
    pre, suf = enc(prefix), enc(suffix)
    room = max(budget - len(bos) - 3, 2)
    # the suffix gets at most a quarter of the room, the prefix the rest (llama.cpp's split)
    suf = suf[: max(room // 4, room - len(pre))]
    pre = pre[-(room - len(suf)) :] if len(pre) > room - len(suf) else pre
    head: list[int] = []
    rep, sep = tok.fim.get("fim_rep"), tok.fim.get("fim_sep")
    left = room - len(pre) - len(suf)
    if extra and sep is not None:
        chunks = [] if rep is None else [rep, *enc("myproject\n")]
        for item in extra:
            if not isinstance(item, dict):
                continue
            piece = [sep, *enc(f"{item.get('filename', '')}\n{item.get('text', '')}")]
            if len(chunks) + len(piece) + 1 > left:
                break
            chunks += piece
        if chunks:
            head = [*chunks, sep]
    return [*bos, *head, tok.fim["fim_pre"], *pre, tok.fim["fim_suf"], *suf, tok.fim["fim_mid"]]
