"""Special-token partitioning as llama.cpp's tokenizer_st_partition does it: text in, raw fragments and
special-token ids out, before pre-tokenization.

    s = SpecialSplitter([("<|im_start|>", 151644), ("<|im_end|>", 151645)])
    s.split("<|im_start|>user hi<|im_end|>")   # [151644, "user hi", 151645]
"""

from __future__ import annotations

import re


class SpecialSplitter:
    """Splits text into raw fragments and special-token ids the way llama.cpp's tokenizer_st_partition
    does: special tokens in order of decreasing byte length, each taking its leftmost non-overlapping
    occurrences in what the longer ones left.

    When no special token can overlap a shorter-or-equal one (a proper suffix of one is a proper prefix
    of the other; runs of one repeated character excepted), that equals a single left-to-right scan
    taking the longest special token at each position: one compiled trie regex. Otherwise the tokens
    present in the text are applied one by one.
    """

    def __init__(self, specials: list[tuple[str, int]]):
        # by decreasing length in UTF-8 bytes, as llama.cpp sorts them (std::string::size)
        order = sorted(range(len(specials)), key=lambda k: (-len(specials[k][0].encode("utf-8", "surrogatepass")), k))
        self._ordered = [specials[k] for k in order]
        self._id: dict[str, int] = {}
        for text, tid in self._ordered:
            self._id.setdefault(text, tid)
        self._pattern: re.Pattern | None = None
        self._exact = can_overlap([t for t, _ in self._ordered])
        if self._ordered and not self._exact:
            self._pattern = re.compile(trie_pattern(list(self._id)))

    def split(self, text: str) -> list[str | int]:
        """Raw text fragments (str, non-empty) and special-token ids (int), in order."""
        if not text:
            return []
        if not self._ordered:
            return [text]
        if self._exact:
            return self._split_exact(text)
        out: list[str | int] = []
        pos = 0
        ids = self._id
        for m in self._pattern.finditer(text):
            start, end = m.span()
            if start > pos:
                out.append(text[pos:start])
            out.append(ids[m.group()])
            pos = end
        if pos < len(text):
            out.append(text[pos:])
        return out

    def _split_exact(self, text: str) -> list[str | int]:
        frags: list[str | int] = [text]
        for special, tid in self._ordered:
            if special not in text:
                continue
            new: list[str | int] = []
            for f in frags:
                if isinstance(f, str) and special in f:
                    for k, part in enumerate(f.split(special)):
                        if k:
                            new.append(tid)
                        if part:
                            new.append(part)
                else:
                    new.append(f)
            frags = new
        return frags


def can_overlap(texts: list[str]) -> bool:
    """True when an occurrence of one text can start inside an occurrence of another text no longer than
    it in UTF-8 bytes, the order the texts are applied in (a proper suffix of the shorter-or-equal one is a
    proper prefix of the other); runs of a single repeated character overlap harmlessly and do not count."""
    suffixes: dict[str, list[str]] = {}
    for s in texts:
        for k in range(1, len(s)):
            suffixes.setdefault(s[k:], []).append(s)

    def run(x: str) -> bool:
        return x.count(x[0]) == len(x)

    def nbytes(x: str) -> int:
        return len(x.encode("utf-8", "surrogatepass"))

    for t in texts:
        for j in range(1, len(t)):
            for s in suffixes.get(t[:j], ()):
                if nbytes(s) <= nbytes(t) and not (run(s) and run(t) and s[0] == t[0]):
                    return True
    return False


def trie_pattern(texts: list[str]) -> str:
    """A regex matching any of texts, the longest one wherever several start at the same position."""
    trie: dict = {}
    for t in texts:
        node = trie
        for ch in t:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)
