"""WordPiece (`tokenizer.ggml.model = "bert"`), token for token as llama.cpp's llm_tokenizer_wpm.

    wpm = WPM(vocab, lowercase=True, strip_accents=True, unk_id=100)
    wpm.encode("raw text")  -> list[int]   # one raw fragment: special tokens split off by the caller; no [CLS]/[SEP]

The vocabulary is the one convert_hf_to_gguf writes for a BERT tokenizer: a word-initial piece `word` is stored as
`▁word`, a continuation piece `##ing` as `ing`, control tokens ([CLS], [SEP], [UNK], ...) as they are.

Normalization (llama.cpp's preprocess, BertNormalizer's options `tokenizer.ggml.normalizer.lowercase` and
`.strip_accents`, both on by default): with strip_accents each code point becomes the first code point of its
canonical decomposition (é -> e: llama.cpp's one-step NFD table) and combining marks (\\p{M}) are dropped; with
lowercase each code point takes its simple lowercase mapping. Whitespace ends a word; NUL, U+FFFD and control or
format characters (\\p{Cc}, \\p{Cf}, \\p{Co}, \\p{Cs}) are dropped; punctuation (\\p{P}), ASCII symbols and CJK
ideographs are words of their own. Each word, prefixed with ▁, is cut greedily into the longest vocabulary pieces
from the left; a word with any part that matches no piece is one [UNK].
"""

from __future__ import annotations

import unicodedata

from .piece_cache import PieceCache

SPACE = "\u2581"
# llama.cpp's \s (unicode_set_whitespace)
_WHITESPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x2028, 0x2029, 0x202F, 0x205F]
    + [0x3000]
)
# CJK ideograph blocks as llama.cpp's is_chinese_char lists them (0x2B920, not 0x2B820, as in HF's Rust code)
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK)


def _lower(c: str) -> str:
    """The simple lowercase mapping of one character (one character: İ -> i, not i + U+0307)."""
    low = c.lower()
    return low if len(low) == 1 else low[0]


class WPM:
    """vocab: text -> id (the last of duplicate texts wins, as in llama.cpp); unk_id: the id of a word no pieces
    spell (None: such words are dropped)."""

    def __init__(self, vocab: dict[str, int], lowercase: bool, strip_accents: bool, unk_id: int | None):
        self._vocab = vocab
        self.lowercase, self.strip_accents, self.unk_id = lowercase, strip_accents, unk_id
        self._max_len = max((len(t) for t in vocab), default=1)
        self._chars: dict[str, tuple[str, bool]] = {}  # character -> (its normalized text, a word of its own)
        self._cache = PieceCache(self._encode_word)

    def encode(self, text: str) -> list[int]:
        return self._cache.encode(self.words(text))

    def words(self, text: str) -> list[str]:
        """text normalized and split into words (llama.cpp's preprocess)."""
        words, cur = [], []
        for c in text:
            info = self._chars.get(c)
            if info is None:
                info = self._chars[c] = self._classify(c)
            s, alone = info
            if s is None:  # whitespace
                if cur:
                    words.append("".join(cur))
                    cur = []
            elif alone:
                if cur:
                    words.append("".join(cur))
                    cur = []
                words.append(s)
            else:
                cur.append(s)
        if cur:
            words.append("".join(cur))
        return words

    def _classify(self, c: str) -> tuple[str | None, bool]:
        """(normalized text, is a word of its own) of one character; (None, False) for whitespace; ("", False)
        for what is dropped."""
        if self.strip_accents:  # the first code point of the canonical decomposition
            c = unicodedata.normalize("NFD", c)[0]
        cp = ord(c)
        if cp in _WHITESPACE:
            return None, False
        cat = unicodedata.category(c)
        if cp == 0 or cp == 0xFFFD or cat in ("Cc", "Cf", "Co", "Cs"):
            return "", False
        if self.strip_accents and cat[0] == "M":
            return "", False
        s = _lower(c) if self.lowercase else c
        alone = cat[0] == "P" or (cp < 0x7F and cat[0] == "S") or _is_cjk(cp)
        return s, alone

    def _encode_word(self, word: str) -> list[int]:
        """A word's pieces: ▁word cut greedily, longest piece first; [UNK] when some part matches none."""
        if not word:
            return []
        w = SPACE + word
        vocab, out, i, n = self._vocab, [], 0, len(w)
        while i < n:
            for j in range(min(n, i + self._max_len), i, -1):
                tid = vocab.get(w[i:j])
                if tid is not None:
                    out.append(tid)
                    i = j
                    break
            else:
                return [] if self.unk_id is None else [self.unk_id]
        return out
