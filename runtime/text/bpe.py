"""Byte-level BPE (`tokenizer.ggml.model = "gpt2"`), token for token as llama.cpp's llm_tokenizer_bpe.

    bpe = BPE(tokens, merges, pre="qwen2")   # raises ValueError naming the metadata key on bad input
    bpe.encode("raw text")  -> list[int]     # one raw fragment: special tokens already split off, no BOS/EOS

A fragment is pre-tokenized by the regex list of its `tokenizer.ggml.pre` (llama.cpp's exact patterns,
applied one after the other: each regex splits every piece into its matches and the gaps between them),
each piece is mapped to GPT-2's byte-to-unicode alphabet and merged pair by pair, lowest merge rank first
and leftmost first among equal ranks (the order of llama.cpp's bigram queue). Pieces repeat a lot in real
text, so piece -> ids is cached.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from itertools import repeat

import regex

from .bigram_queue import merge_by_queue
from .piece_cache import PieceCache

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_BLOOM = r" ?[^(\s|.,!?…。，、।۔،)]+"
# llama.cpp's deepseek-llm letter class, as code point ranges: its literal text has characters that Unicode
# normalization rewrites (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A), so they are spelled as numbers
_DEEPSEEK_LETTERS = "".join(
    chr(lo) if lo == hi else f"{chr(lo)}-{chr(hi)}"
    for lo, hi in (
        (0x41, 0x5A),
        (0x61, 0x7A),
        (0xB5, 0xB5),
        (0xC0, 0xD6),
        (0xD8, 0xF6),
        (0xF8, 0x1BA),
        (0x1BC, 0x1BF),
        (0x1C4, 0x293),
        (0x295, 0x2AF),
        (0x370, 0x373),
        (0x376, 0x377),
        (0x37B, 0x37D),
        (0x37F, 0x37F),
        (0x386, 0x386),
        (0x388, 0x38A),
        (0x38C, 0x38C),
        (0x38E, 0x3A1),
        (0x3A3, 0x3F5),
        (0x3F7, 0x481),
        (0x48A, 0x52F),
        (0x531, 0x556),
        (0x10A0, 0x10C5),
        (0x13A0, 0x13F5),
        (0x13F8, 0x13FD),
        (0x1C90, 0x1CBA),
        (0x1CBD, 0x1CBF),
        (0x1D00, 0x1D2B),
        (0x1D6B, 0x1D77),
        (0x1D79, 0x1D9A),
        (0x1E00, 0x1F15),
        (0x1F18, 0x1F1D),
        (0x1F20, 0x1F45),
        (0x1F48, 0x1F4D),
        (0x1F50, 0x1F57),
        (0x1F59, 0x1F59),
        (0x1F5B, 0x1F5B),
        (0x1F5D, 0x1F5D),
        (0x1F5F, 0x1F7D),
        (0x1F80, 0x1FB4),
        (0x1FB6, 0x1FBC),
        (0x1FBE, 0x1FBE),
        (0x1FC2, 0x1FC4),
        (0x1FC6, 0x1FCC),
        (0x1FD0, 0x1FD3),
        (0x1FD6, 0x1FDB),
        (0x1FE0, 0x1FEC),
        (0x1FF2, 0x1FF4),
        (0x1FF6, 0x1FFC),
        (0x2102, 0x2102),
        (0x2107, 0x2107),
        (0x210A, 0x2113),
        (0x2115, 0x2115),
        (0x2119, 0x211D),
        (0x2124, 0x2124),
        (0x2126, 0x2126),
        (0x2128, 0x2128),
        (0x212A, 0x212D),
        (0x212F, 0x2134),
        (0x2139, 0x2139),
        (0x213C, 0x213F),
        (0x2145, 0x2149),
        (0x214E, 0x214E),
        (0x2183, 0x2184),
        (0x2C00, 0x2C7B),
        (0x2C7E, 0x2CE4),
        (0x2CEB, 0x2CEE),
        (0x2CF2, 0x2CF3),
        (0xA640, 0xA66D),
        (0xA680, 0xA69B),
        (0xA722, 0xA76F),
        (0xA771, 0xA787),
        (0xA78B, 0xA78E),
        (0xAB70, 0xABBF),
        (0xFB00, 0xFB06),
        (0xFB13, 0xFB17),
        (0xFF21, 0xFF3A),
        (0xFF41, 0xFF5A),
        (0x10400, 0x1044F),
        (0x104B0, 0x104D3),
        (0x104D8, 0x104FB),
        (0x10C80, 0x10CB2),
        (0x10CC0, 0x10CF2),
        (0x118A0, 0x118DF),
        (0x1E900, 0x1E943),
    )
)
_CJK = r"[一-龥ࠀ-一가-퟿]+"


@dataclass(frozen=True)
class PreTokenizer:
    """One `tokenizer.ggml.pre` family: llama.cpp's regex list and the flags it sets for it.

    Patterns use no capturing groups (split() wraps each in one). llama.cpp's ECMAScript `$` is written
    `\\Z` here: Python's `$` would also match before a final newline.
    """

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a piece that is itself a token is emitted whole (llama3, tekken)
    add_bos: bool = False  # llama.cpp's add_bos default for this family when the GGUF does not say


_DEFAULT = PreTokenizer((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"))
_GPT2_PRE = PreTokenizer((_GPT2,))
_STARCODER = PreTokenizer((r"\p{N}", _GPT2))
_LLAMA3_PRE = PreTokenizer((_LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2_PRE = PreTokenizer((_QWEN2,))

# tokenizer.ggml.pre -> pre-tokenizer, as llama.cpp's llama_vocab::impl::load and llm_tokenizer_bpe
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe", "falcon3"], _LLAMA3_PRE),
    **dict.fromkeys(["dbrx", "smaug-bpe"], PreTokenizer((_LLAMA3,))),
    "deepseek-llm": PreTokenizer(
        (
            r"[\r\n]",
            rf"\s?[{_DEEPSEEK_LETTERS}]+",
            r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
            r"\s+\Z",
            _CJK,
            r"\p{N}+",
        )
    ),
    "deepseek-coder": PreTokenizer((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
    "deepseek-v3": PreTokenizer(
        (
            r"\p{N}{1,3}",
            r"[一-龥぀-ゟ゠-ヿ]+",
            r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
            r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        )
    ),
    "falcon": PreTokenizer(
        (
            r"[\p{P}\$\+<=>\^~\|`]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            r"[0-9][0-9][0-9]",
        )
    ),
    **dict.fromkeys(["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"], _STARCODER),
    **dict.fromkeys(
        [
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v1-en",
            "jina-v2-es",
            "jina-v2-de",
            "jina-v2-code",
            "roberta-bpe",
            "mpt",
            "olmo",
            "jais",
        ],
        _GPT2_PRE,
    ),
    **dict.fromkeys(["qwen2", "stablelm2", "megrez"], _QWEN2_PRE),
    **dict.fromkeys(["poro-chat", "bloom", "gpt3-finnish"], PreTokenizer((_BLOOM,))),
    "chatglm-bpe": PreTokenizer((_LLAMA3,)),
    "viking": PreTokenizer((_BLOOM, r"\p{N}")),
    "tekken": PreTokenizer(
        (
            r"[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])(?:[^a-z]))*(?:(?=[\p{L}])(?:[^A-Z]))+"
            r"|[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])(?:[^a-z]))+(?:(?=[\p{L}])(?:[^A-Z]))*"
            r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ),
        ignore_merges=True,
        add_bos=True,
    ),
    # gpt-oss (o200k), Llama 4: llama.cpp's rewrite of tokenizer.json's regex (case classes as lookaheads)
    **dict.fromkeys(
        ["gpt-4o", "llama4"],
        PreTokenizer(
            (
                r"[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])(?:[^a-z]))*(?:(?=[\p{L}])(?:[^A-Z]))+"
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
                r"|[^\r\n\p{L}\p{N}]?(?:(?=[\p{L}])(?:[^a-z]))+(?:(?=[\p{L}])(?:[^A-Z]))*"
                r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?"
                r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
            )
        ),
    ),
    "chameleon": PreTokenizer(
        (
            r"<sentinel:[0-9]+>",
            r"(?:IMGIMG)(?:(?:A|B|C|D|E|F|G|H|I){1,4})Z",
            r"(?:[\t\n]|    |  )",
            r"\p{N}",
            r"[\p{P}!-/:-@\[-`{-~]",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        ),
        add_bos=True,
    ),
}


def pre_tokenizer(pre: str | None) -> PreTokenizer:
    """The pre-tokenizer for a `tokenizer.ggml.pre` value; warns (never silently) when it is missing or unknown."""
    if pre is None or pre == "":
        warnings.warn(
            "tokenizer.ggml.pre is missing: using llama.cpp's 'default' pre-tokenizer; "
            "tokenization may differ from the model's training",
            stacklevel=3,
        )
        return _DEFAULT
    found = PRE_TOKENIZERS.get(pre)
    if found is None:
        warnings.warn(
            f"unknown tokenizer.ggml.pre {pre!r}: falling back to the GPT-2 pre-tokenizer; "
            "tokenization may differ from the model's training",
            stacklevel=3,
        )
        return _GPT2_PRE
    return found


def _byte_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character table: [256] single characters."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


BYTE_TO_UNICODE = _byte_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in enumerate(BYTE_TO_UNICODE)}
# str.translate table over a latin-1 view of UTF-8 bytes: chr(byte) -> GPT-2 character
_ENCODE_TABLE = {b: c for b, c in enumerate(BYTE_TO_UNICODE)}
_NO_RANK = 1 << 62
_SHORT_WORD = 48  # longer words merge through a heap: O(n log n) instead of O(n^2)


# str.translate table: GPT-2 character -> chr(byte), for a latin-1 encode; the latin-1 characters that are
# not GPT-2 characters map to U+FFFF so that the encode fails and token_bytes takes the slow path
_DECODE_TABLE = {
    **{c: "\uffff" for c in [*range(0x80, 0xA1), 0xAD]},
    **{ord(c): chr(b) for b, c in enumerate(BYTE_TO_UNICODE)},
}


def token_bytes(text: str) -> bytes:
    """The bytes a normal byte-level BPE token stands for; characters outside GPT-2's table keep their UTF-8."""
    try:
        return text.translate(_DECODE_TABLE).encode("latin-1")
    except UnicodeEncodeError:
        pass
    out = bytearray()
    for ch in text:
        b = UNICODE_TO_BYTE.get(ch)
        if b is None:
            out += ch.encode("utf-8", "surrogatepass")
        else:
            out.append(b)
    return bytes(out)


class BPE:
    """Merge-rank BPE over GPT-2's byte alphabet.

    vocab: text -> id, shared with the caller (the last of duplicate texts wins, as in llama.cpp);
    merges: ["a b", ...], rank = index; pre: tokenizer.ggml.pre (None when the key is absent).
    """

    def __init__(self, vocab: dict[str, int], merges: list[str], pre: str | None, merges_checked: bool = False):
        self.pre = pre_tokenizer(pre)
        self._vocab = vocab
        self._ranks = self._load_ranks(vocab, merges, merges_checked)
        self._patterns = [regex.compile(f"({r})") for r in self.pre.regexes]
        self._cache = PieceCache(self._encode_piece)

    @staticmethod
    def _load_ranks(vocab: dict[str, int], merges: list[str], checked: bool = False) -> dict[str, int]:
        """ "a b" -> rank; the first of duplicate merges wins (llama.cpp's bpe_ranks.emplace). Raises
        ValueError for a merge that is not two tokens, or whose parts or result are not tokens; checked: the
        caller has verified that already (natively, from the file's bytes: tokenizer._merges_checked)."""
        if checked:
            return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        joined = "\n".join(merges)
        one_space_inside = (
            list(map(str.count, merges, repeat(" "))).count(1) == len(merges)
            and joined.count("\n") == len(merges) - 1
            and "\n " not in joined
            and " \n" not in joined
            and not joined.startswith(" ")
            and not joined.endswith(" ")
        )
        if one_space_inside:  # the common case, checked without a Python loop
            parts = joined.replace(" ", "\n").split("\n")  # [a0, b0, a1, b1, ...]
            ok = all(map(vocab.__contains__, parts)) and all(
                map(vocab.__contains__, map(str.__add__, parts[0::2], parts[1::2]))
            )
        else:
            ok = False
        if not ok:
            for i, m in enumerate(merges):
                k = m.find(" ", 1)
                if k < 0 or k == len(m) - 1:
                    raise ValueError(f"tokenizer.ggml.merges[{i}] = {m!r} is not two tokens separated by a space")
                a, b = m[:k], m[k + 1 :]
                for part in (a, b, a + b):
                    if part not in vocab:
                        raise ValueError(
                            f"tokenizer.ggml.merges[{i}] = {m!r} refers to {part!r}, "
                            "which is not in tokenizer.ggml.tokens"
                        )
        return dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))

    def split(self, text: str) -> list[str]:
        """Pre-tokenize one fragment: the pieces BPE merges within, in order; they concatenate to text."""
        pieces = [text]
        for pat in self._patterns:
            out: list[str] = []
            for p in pieces:
                out += pat.split(p)  # [gap, match, gap, match, ..., gap]
            pieces = [p for p in out if p]
        return pieces

    def encode(self, text: str) -> list[int]:
        return self._cache.encode(self.split(text))

    def _encode_piece(self, piece: str) -> list[int]:
        word = piece.encode("utf-8", "surrogatepass").decode("latin-1").translate(_ENCODE_TABLE)
        vocab = self._vocab
        if self.pre.ignore_merges and word in vocab:
            return [vocab[word]]
        out = []
        for sym in self.merge(word):
            tid = vocab.get(sym)
            if tid is not None:
                out.append(tid)
            else:  # llama.cpp: each UTF-8 byte of the symbol as a one-byte token, when there is one
                for byte in sym.encode("utf-8"):
                    tid = vocab.get(chr(byte)) if byte < 0x80 else None
                    if tid is not None:
                        out.append(tid)
        return out

    def merge(self, word: str) -> list[str]:
        """Apply merges to one byte-encoded word: lowest rank first, leftmost among equals, one at a time."""
        parts = list(word)
        if len(parts) < 2:
            return parts
        if len(parts) > _SHORT_WORD:
            return self._merge_long(parts)
        ranks = self._ranks
        get = ranks.get
        pr = [get(a + " " + b, _NO_RANK) for a, b in zip(parts, parts[1:])]
        while pr:
            best = min(pr)
            if best == _NO_RANK:
                break
            i = pr.index(best)
            parts[i] += parts.pop(i + 1)
            del pr[i]
            if i < len(pr):
                pr[i] = get(parts[i] + " " + parts[i + 1], _NO_RANK)
            if i > 0:
                pr[i - 1] = get(parts[i - 1] + " " + parts[i], _NO_RANK)
        return parts

    def _merge_long(self, parts: list[str]) -> list[str]:
        """merge() through llama.cpp's bigram queue, lowest rank first."""
        get = self._ranks.get
        return merge_by_queue(parts, lambda a, b: get(a + " " + b))
