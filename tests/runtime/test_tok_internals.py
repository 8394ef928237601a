"""Tokenizer internals: pre-tokenizer splits, the two merge loops, SPM chunking and special-token partition
against direct ports of llama.cpp's algorithms."""

from __future__ import annotations

import functools
import warnings

import pytest
from conftest import model_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from localllm.text.bpe import BPE, BYTE_TO_UNICODE, PRE_TOKENIZERS
from localllm.text.special_tokens import SpecialSplitter, can_overlap, trie_pattern
from localllm.text.spm import SPACE
from localllm.text.tokenizer import Tokenizer

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def bytes_only(pre: str | None) -> BPE:
    """A BPE over the 256 byte characters and no merges: enough to test pre-tokenization."""
    return BPE({c: i for i, c in enumerate(BYTE_TO_UNICODE)}, [], pre)


@functools.cache
def _load(name: str) -> Tokenizer:
    return Tokenizer.from_gguf(model_file(name))


def tok(name: str) -> Tokenizer:
    model_file(name)
    return _load(name)


# -- pre-tokenizers (llama.cpp's regex lists, applied one after another) -------------------------------------
@pytest.mark.parametrize(
    "pre, text, pieces",
    [
        ("qwen2", "Hello world 123 it's", ["Hello", " world", " ", "1", "2", "3", " it", "'s"]),
        ("qwen2", "a  \n\n  b", ["a", "  \n\n", " ", " b"]),
        ("qwen2", "x=[1];\n", ["x", "=[", "1", "];\n"]),
        ("llama-bpe", "1234567 IT'S", ["123", "456", "7", " IT", "'S"]),
        ("smollm", "numbers 1234 x", ["numbers", " ", "1", "2", "3", "4", " x"]),
        ("starcoder", "a  b", ["a", " ", " b"]),
        ("gpt-2", "Hello  world!!", ["Hello", " ", " world", "!!"]),
        ("gpt-2", "it's 42", ["it", "'s", " 42"]),
        ("default", "a+b=1234", ["a", "+", "b", "=", "123", "4"]),
        ("deepseek-coder", "Hi there\n12", ["Hi", " there", "\n", "1", "2"]),
        # gpt-oss's o200k: case runs split, contractions kept on the word, digits in threes (tiktoken's splits)
        ("gpt-4o", "HTTPServer World's DON'T 12345", ["HTTPServer", " World's", " DON'T", " ", "123", "45"]),
    ],
)
def test_pre_tokenizer_split(pre, text, pieces):
    assert bytes_only(pre).split(text) == pieces


@pytest.mark.parametrize("pre", sorted(PRE_TOKENIZERS))
def test_every_pre_tokenizer_splits_losslessly(pre):
    text = "Hello, World! it's 12345 x=y+1;\n\n  \tÜber 日本語 😀 IMGIMGAZ <sentinel:3>  end  "
    pieces = bytes_only(pre).split(text)
    assert "".join(pieces) == text and all(pieces)


def test_unknown_pre_tokenizer_warns_and_uses_gpt2():
    with pytest.warns(UserWarning, match="unknown tokenizer.ggml.pre 'no-such-pre'"):
        bpe = bytes_only("no-such-pre")
    assert bpe.split("it's 42") == bytes_only("gpt-2").split("it's 42")


def test_missing_pre_tokenizer_warns_and_uses_default():
    with pytest.warns(UserWarning, match="tokenizer.ggml.pre is missing"):
        bpe = bytes_only(None)
    assert bpe.split("a+b=1234") == ["a", "+", "b", "=", "123", "4"]


def test_known_pre_tokenizer_is_silent():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bytes_only("qwen2")


# -- merge loops: the short min-rank loop and the heap must agree -----------------------------------------------
def pieces(alphabet: list[str], min_size: int = 0, max_size: int = 100):
    """Strings glued from the given pieces (single characters or longer)."""
    return st.lists(st.sampled_from(alphabet), min_size=min_size, max_size=max_size).map("".join)


_GPT2_TEXT = pieces(list("abcdefghijklmnopqrstuvwxyzĠĊ.,()_=") + ["ĠĠ", "ing", "Ġthe"], min_size=2, max_size=100)


@SETTINGS
@given(word=_GPT2_TEXT)
def test_bpe_heap_matches_min_rank_loop(word):
    bpe = tok("qwen2.5-coder-0.5b-instruct-q4_k_m")._bpe
    assert bpe._merge_long(list(word)) == _bpe_min_rank_reference(bpe, word)


def _bpe_min_rank_reference(bpe: BPE, word: str) -> list[str]:
    parts = list(word)
    while len(parts) > 1:
        ranks = [bpe._ranks.get(a + " " + b) for a, b in zip(parts, parts[1:])]
        found = [(r, i) for i, r in enumerate(ranks) if r is not None]
        if not found:
            break
        _, i = min(found)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]
    return parts


@SETTINGS
@given(word=_GPT2_TEXT)
def test_bpe_short_loop_matches_reference(word):
    bpe = tok("qwen2.5-coder-0.5b-instruct-q4_k_m")._bpe
    assert bpe.merge(word[:40]) == _bpe_min_rank_reference(bpe, word[:40])


_SPM_TEXT = pieces(list("abcdefghijklmnopqrstuvwxyz.,()<>/ \n") + ["> </", "é", "the ", "ing"], max_size=120)


@SETTINGS
@given(text=_SPM_TEXT)
def test_spm_heap_matches_short_loop(text):
    spm = tok("gemma-3-270m-q4_k_m")._spm
    text = text.replace(" ", SPACE)[:48]
    assert spm._merge_long(list(text)) == spm.merge(text)


@SETTINGS
@given(text=_SPM_TEXT)
def test_spm_chunks_give_the_ids_of_the_whole_fragment(text):
    spm = tok("gemma-3-270m-q4_k_m")._spm
    escaped = text.replace(" ", SPACE)
    assert "".join(spm.chunks(escaped)) == escaped
    whole = [spm._vocab.get(s) for s in spm._merge_long(list(escaped))] if escaped else []
    if None not in whole:
        assert spm.encode(text) == whole
    else:
        assert spm.encode(text) == spm._encode_chunk(escaped)


def test_spm_keeps_cross_token_whole():
    spm = tok("gemma-3-270m-q4_k_m")._spm
    assert spm.chunks(f"a{SPACE}b{SPACE}{SPACE}c") == ["a", f"{SPACE}b", f"{SPACE}{SPACE}c"]
    assert spm.chunks(f"a>{SPACE}</b{SPACE}c") == [f"a>{SPACE}</b", f"{SPACE}c"]  # '>▁</' is a gemma3 token


# -- special-token partition ----------------------------------------------------------------------------------------
def st_partition_reference(text: str, specials: list[tuple[str, int]]) -> list[str | int]:
    """llama.cpp's tokenizer_st_partition, line for line: specials in the given order, each splitting every
    raw fragment (offset, length) at its occurrences found with text.find from the fragment's offset."""
    buf: list[tuple[int, int] | int] = [(0, len(text))] if text else []
    for special, tid in specials:
        out: list[tuple[int, int] | int] = []
        for frag in buf:
            if isinstance(frag, int):
                out.append(frag)
                continue
            off, length = frag
            while True:
                match = text.find(special, off)
                if match < 0 or match + len(special) > off + length:
                    break
                if match > off:
                    out.append((off, match - off))
                out.append(tid)
                end = off + length
                off = match + len(special)
                length = end - off
            if length > 0:
                out.append((off, length))
        buf = out
    return [f if isinstance(f, int) else text[f[0] : f[0] + f[1]] for f in buf]


def ordered(specials: list[str]) -> list[tuple[str, int]]:
    pairs = [(s, i) for i, s in enumerate(specials)]
    return sorted(pairs, key=lambda p: (-len(p[0]), p[1]))


_RUNS = ["\n" * k for k in range(1, 8)] + [" " * k for k in range(2, 8)] + ["<b>", "</b>", "<s>", "</s>", "<|im_end|>"]
_OVERLAPPING = ["ab", "bcd", "cd", "abc", "x", "dx", "cda"]


@SETTINGS
@given(text=pieces(list("ab \n<>/s|imend_") + ["<|im_end|>", "</b>", "\n\n\n", "    "], max_size=40))
def test_partition_scan_matches_llama_cpp(text):
    splitter = SpecialSplitter([(s, i) for i, s in enumerate(_RUNS)])
    assert splitter._pattern is not None  # the single-scan path
    assert splitter.split(text) == st_partition_reference(text, ordered(_RUNS))


@SETTINGS
@given(text=st.text(alphabet=st.sampled_from(list("abcdx")), max_size=40))
def test_partition_overlapping_specials_match_llama_cpp(text):
    splitter = SpecialSplitter([(s, i) for i, s in enumerate(_OVERLAPPING)])
    assert splitter._pattern is None  # overlaps: the token-by-token path
    assert splitter.split(text) == st_partition_reference(text, ordered(_OVERLAPPING))


def test_partition_longest_first_not_leftmost_first():
    # "ab" starts first, but llama.cpp lets the longer "bcd" claim its text before "ab" is tried
    assert SpecialSplitter([("ab", 0), ("bcd", 1)]).split("abcd") == ["a", 1]


def testcan_overlap():
    assert not can_overlap(["\n", "\n\n", "\n\n\n", "  ", "   ", "<b>", "</b>"])
    assert can_overlap(["ab", "bcd"])
    assert can_overlap(["ab", "ba"])
    assert not can_overlap(["abc", "cd"])  # the longer one first: its occurrence wins either way


def testtrie_pattern_prefers_longest():
    import re

    pat = re.compile(trie_pattern(["<a>", "<ab>", "<", "x.y"]))
    assert pat.findall("<ab><a><x.y xzy") == ["<ab>", "<a>", "<", "x.y"]


def test_special_tokens_apply_longest_in_bytes_first():
    # "céé" is 3 characters but 5 UTF-8 bytes, "xabc" 4 and 4: llama.cpp applies "céé" first
    s = SpecialSplitter([("xabc", 0), ("céé", 1)])
    assert s.split("xabcéé") == ["xab", 1]


def _packed(strings):
    """(uint8 buffer, starts, ends) as GGUF string arrays are laid out."""
    import numpy as np

    data = [s.encode() if isinstance(s, str) else s for s in strings]
    ends = np.cumsum([len(d) for d in data]).astype(np.int64)
    starts = (ends - np.array([len(d) for d in data], dtype=np.int64)).astype(np.int64)
    return np.frombuffer(b"".join(data) or b"\0", dtype=np.uint8), starts, ends


def test_native_merge_check_agrees_with_bpe():
    """tokenizer._merges_checked's native check passes exactly the merges bpe.py accepts (it only skips the
    Python check: False leaves BPE to name the problem)."""
    from localllm import native
    from localllm.text.bpe import BPE

    tokens = ["a", "b", "ab", "c", "abc", "é", "éa"]
    cases = {
        ("a b", "ab c"): True,
        ("é a",): True,
        ("a c",): False,  # "ac" is not a token
        ("a b c",): False,  # first space splits "a" | "b c": "b c" is not a token
        ("ab",): False,  # no space
        (" ab",): False,  # the space must be at byte 1 or later
        ("a ",): False,  # ... and not last
        ("a",): False,
    }
    vocab = {t: i for i, t in enumerate(tokens)}
    for merges, ok in cases.items():
        assert native.merges_valid(*_packed(tokens), *_packed(merges)) is ok, merges
        if ok:
            BPE(vocab, list(merges), "qwen2")
        else:
            with pytest.raises(ValueError, match="tokenizer.ggml.merges"):
                BPE(vocab, list(merges), "qwen2")
    # a merge that is not well-formed UTF-8 goes to the Python check (which decodes with replacement)
    assert native.merges_valid(*_packed(tokens), *_packed([b"a \xc3"])) is False
