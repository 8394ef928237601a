"""SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), token for token as llama.cpp's llm_tokenizer_spm.

    spm = SPM(vocab, tokens, scores, unk_id)
    spm.encode("raw text")  -> list[int]   # one raw fragment: special tokens split off and the space
                                           # prefix added by the caller; no BOS/EOS

Spaces become U+2581, the text starts as one symbol per character, and adjacent symbols whose
concatenation is a token merge, highest token score first and leftmost first among equal scores
(llama.cpp's bigram queue). A final symbol that is not a token falls back to its UTF-8 bytes as
`<0xNN>` tokens.

Merging is local, so a fragment is cut into chunks before each U+2581 that follows another character,
except inside an occurrence of a token that itself spans such a cut (gemma3 has one: '>▁</'). No merge
can cross a remaining cut, so encoding chunk by chunk gives exactly the ids of the whole fragment, and
chunks repeat enough to cache.
"""

from __future__ import annotations

import math
import re

import numpy as np
import regex

from .bigram_queue import merge_by_queue
from .piece_cache import PieceCache

SPACE = "\u2581"
_CUTS = regex.compile(f"(?<=[^{SPACE}])(?={SPACE})")  # where chunks may start
_CHUNK = re.compile(f"{SPACE}+[^{SPACE}]*|[^{SPACE}]+")  # one chunk when there is no token to keep whole
_NO_SCORE = -math.inf
_LOWEST = -3.5e38  # below every finite float32: where a token's own score is -inf or NaN
_SHORT_CHUNK = 48  # longer chunks merge through a heap: O(n log n) instead of O(n^2)


class SPM:
    """vocab: text -> id (the last of duplicate texts wins, as in llama.cpp); tokens: [n_vocab] texts;
    scores: [n_vocab] token scores (higher merges first); unk_id: stands for a byte with no token of its own."""

    def __init__(self, vocab: dict[str, int], tokens: list[str], scores: np.ndarray, unk_id: int | None):
        self._vocab = vocab
        # text -> score, the last of duplicate texts winning as in vocab; -inf and NaN clamp to _LOWEST
        self._score = dict(zip(tokens, np.where(scores > _LOWEST, scores, _LOWEST).tolist()))
        self._byte_ids: list[list[int]] = []
        for b in range(256):
            tid = vocab.get(f"<0x{b:02X}>")
            if tid is None and b < 0x80:
                tid = vocab.get(chr(b))
            if tid is None:
                tid = unk_id
            self._byte_ids.append([] if tid is None else [tid])
        cross = sorted(
            {t for t in vocab if SPACE in t[1:] and re.search(f"[^{SPACE}]{SPACE}", t)}, key=len, reverse=True
        )
        self._cross = regex.compile("|".join(map(regex.escape, cross))) if cross else None
        self._cache = PieceCache(self._encode_chunk)

    def encode(self, text: str) -> list[int]:
        return self._cache.encode(self.chunks(text.replace(" ", SPACE)))

    def chunks(self, text: str) -> list[str]:
        """text (spaces already U+2581) cut where no token can merge across; the chunks concatenate to text."""
        if self._cross is None or self._cross.search(text) is None:
            return _CHUNK.findall(text)
        kept = set()
        for m in self._cross.finditer(text, overlapped=True):
            kept.update(range(m.start() + 1, m.end()))
        cuts = [m.start() for m in _CUTS.finditer(text) if m.start() not in kept]
        if not cuts:
            return [text]
        return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]

    def _encode_chunk(self, chunk: str) -> list[int]:
        vocab, out = self._vocab, []
        for sym in self.merge(chunk):
            tid = vocab.get(sym)
            if tid is not None:
                out.append(tid)
            else:  # only single characters reach here: every merged symbol is a token
                for byte in sym.encode("utf-8", "surrogatepass"):
                    out += self._byte_ids[byte]
        return out

    def merge(self, text: str) -> list[str]:
        """The final symbols of one chunk: highest-score adjacent pair first, leftmost among equals."""
        parts = list(text)
        if len(parts) < 2:
            return parts
        if len(parts) > _SHORT_CHUNK:
            return self._merge_long(parts)
        get = self._score.get
        sc = [get(a + b, _NO_SCORE) for a, b in zip(parts, parts[1:])]
        while sc:
            best = max(sc)
            if best == _NO_SCORE:
                break
            i = sc.index(best)
            parts[i] += parts.pop(i + 1)
            del sc[i]
            if i < len(sc):
                sc[i] = get(parts[i] + parts[i + 1], _NO_SCORE)
            if i > 0:
                sc[i - 1] = get(parts[i - 1] + parts[i], _NO_SCORE)
        return parts

    def _merge_long(self, parts: list[str]) -> list[str]:
        """merge() through llama.cpp's bigram queue, highest score first."""
        get = self._score.get

        def priority(a: str, b: str):
            s = get(a + b)
            return None if s is None else -s

        return merge_by_queue(parts, priority)
