"""Tokenizer from GGUF metadata: byte-level BPE (`gpt2`), SentencePiece-style (`llama`) and WordPiece (`bert`)
vocabularies, with llama.cpp's special-token handling, so ids match llama.cpp's llama_tokenize exactly.

    tok = Tokenizer.from_gguf("model.gguf")      # any GGUF, vocab-only too; TokenizerError on bad metadata
    ids = tok.encode("text")                      # add_special=True: BOS / EOS as the model asks
    ids = tok.encode(prompt, parse_special=True)  # a rendered chat prompt: <|im_start|> is one token
    text = tok.decode(ids)                        # control tokens hidden unless special=True
    d = tok.detokenizer()                         # streaming: d.push(id) -> str, d.flush() -> str
    tok.chat_template.render(messages) -> str     # see chat_template.py
    tok.encode_chat(messages) -> list[int]        # rendered and encoded, one BOS at most
    tok.stop_ids                                  # ids that end generation

Special tokens (llama.cpp's tokenizer_st_partition): user-defined tokens (type 4: `<tool_call>`,
gemma's `\\n` and runs of spaces) are always matched as whole tokens, before the text is split any
further; control and unknown tokens (types 3 and 2: `<|im_start|>`, `<start_of_turn>`) only with
parse_special=True, otherwise they are plain text. Longer special tokens claim text first.

decode() concatenates token bytes: it does not apply llama.cpp's clean_spaces pass (" ?" -> "?"), so
decode(encode(s)) == s wherever the vocabulary can spell s. For SPM vocabularies with
add_space_prefix, one leading space of the first piece is dropped, undoing the prefix encode adds.

WordPiece (wpm.py) as llama.cpp runs it: add_special puts [CLS] (BOS) before the text and [SEP]
(tokenizer.ggml.seperator_token_id) after it whatever add_bos / add_eos say; decode gives the normalized
words (lowercased where the file says so), each word-initial piece's ▁ as a space, the first one dropped.
"""

from __future__ import annotations

import operator
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..model.gguf import GGUFFile, StringArray
from .bpe import BPE, token_bytes
from .chat_template import ChatTemplate, ChatTemplateError
from .detokenizer import IncrementalDetokenizer
from .special_tokens import SpecialSplitter
from .spm import SPACE, SPM
from .token_ids import token_ids
from .wpm import WPM

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # tokenizer.ggml.token_type

# llama.cpp's text-based detection (llama_vocab::impl::load): the first text of each list found in the vocabulary
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<PAD>"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",  # o200k_harmony (gpt-oss)
    "<|call|>",  # o200k_harmony
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
)
# gpt-oss's harmony format: the markers of a message's header are rendered (a reply's channels are parsed from its
# text, server/harmony.py), and <|end|> ends a message, not the reply, when <|return|> and <|call|> end the reply
_HARMONY_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


class TokenizerError(ValueError):
    """Tokenizer metadata that cannot be used; the message names the model file and the metadata key."""


class Tokenizer:
    """Build with from_gguf() or from_metadata(); immutable afterwards apart from internal caches.

    tokens: [vocab_size] token texts; model: "gpt2" | "llama"; pre: tokenizer.ggml.pre (BPE only).
    bos_id, eos_id, eot_id, eom_id, pad_id, unk_id, sep_id: ids or None; add_bos, add_eos, add_sep: what
    add_special adds (add_sep: WordPiece's [SEP]);
    add_space_prefix: SPM's leading space; stop_ids: llama.cpp's end-of-generation ids (EOS, EOT, EOM,
    FIM pad / repo / file separator, tokens with an end-of-turn text) plus the control token the chat
    template ends an assistant turn with; chat_template: ChatTemplate (ChatML when the GGUF has none; one
    whose render() raises ChatTemplateError, with a warning at load, when the model's template is broken).
    """

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> Tokenizer:
        with GGUFFile(path) as f:
            return cls.from_metadata(f.metadata, name=os.fspath(path))

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any], name: str) -> Tokenizer:
        """metadata: GGUFFile.metadata (or a dict of the same shapes); name: for error messages.
        Copies what it needs, so the GGUF file can be closed afterwards."""
        try:
            return cls(metadata, name)
        except TokenizerError:
            raise
        except ValueError as e:  # from BPE / SPM, which name the key but not the file
            raise TokenizerError(f"{name}: {e}") from None

    def __init__(self, md: Mapping[str, Any], name: str):
        self.name = name
        self.model = _string(md, "tokenizer.ggml.model", name)
        if self.model not in ("gpt2", "llama", "bert"):
            raise TokenizerError(
                f"{name}: tokenizer.ggml.model {self.model!r} is not supported "
                "(supported: 'gpt2' byte-level BPE, 'llama' SentencePiece, 'bert' WordPiece)"
            )
        tokens = _strings(md, "tokenizer.ggml.tokens", name)
        n = len(tokens)
        if n == 0:
            raise TokenizerError(f"{name}: tokenizer.ggml.tokens is empty")
        # llama.cpp's name for an empty token text (rare: a scan first, ~30 ms less to the first token)
        self.tokens: list[str] = tokens if all(tokens) else [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        types = _numbers(md, "tokenizer.ggml.token_type", name, n, np.int64)
        self._types: list[int] = [NORMAL] * n if types is None else types.tolist()
        self._vocab: dict[str, int] = dict(zip(self.tokens, range(n)))  # the last of duplicate texts wins

        # llama.cpp's defaults per vocabulary type, which the GGUF keys below override; for 'gpt2' it falls
        # back to id 11 for BOS and EOS, which is left out here: a GPT-2 ',' that ends generation helps no one
        self._bpe: BPE | None = None
        self._spm: SPM | None = None
        self._wpm: WPM | None = None
        self.pre: str | None = None
        sep = None
        if self.model == "gpt2":
            self.pre = md.get("tokenizer.ggml.pre")
            if self.pre is not None and not isinstance(self.pre, str):
                raise TokenizerError(f"{name}: tokenizer.ggml.pre must be a string, got {type(self.pre).__name__}")
            if "tokenizer.ggml.merges" not in md:
                raise TokenizerError(f"{name}: tokenizer.ggml.merges is missing (needed by a 'gpt2' tokenizer)")
            self._bpe = BPE(
                self._vocab, _strings(md, "tokenizer.ggml.merges", name), self.pre, merges_checked=_merges_checked(md)
            )
            space_prefix, add_bos, bos, eos, unk = False, self._bpe.pre.add_bos, None, None, None
        elif self.model == "bert":  # llama.cpp's defaults: BERT's ids of [CLS], [UNK], [SEP]
            space_prefix, add_bos, bos, eos, unk, sep = False, True, 101, None, 100, 102
        else:
            scores = _numbers(md, "tokenizer.ggml.scores", name, n, np.float64)
            space_prefix, add_bos, bos, eos, unk = True, True, 1, 2, 0
        self.add_space_prefix = _flag(md, "tokenizer.ggml.add_space_prefix", name, space_prefix)
        self.add_bos = _flag(md, "tokenizer.ggml.add_bos_token", name, add_bos)
        self.add_eos = _flag(md, "tokenizer.ggml.add_eos_token", name, False)
        self.bos_id = _token_id(md, "tokenizer.ggml.bos_token_id", name, n, _default_id(bos, n))
        self.eos_id = _token_id(md, "tokenizer.ggml.eos_token_id", name, n, _default_id(eos, n))
        self.unk_id = _token_id(md, "tokenizer.ggml.unknown_token_id", name, n, _default_id(unk, n))
        self.pad_id = _token_id(md, "tokenizer.ggml.padding_token_id", name, n, None)
        # WordPiece: [SEP] after the text with add_special, always (as llama.cpp), and [CLS] before it
        self.sep_id = _token_id(md, "tokenizer.ggml.seperator_token_id", name, n, _default_id(sep, n))
        self.add_sep = self.model == "bert"
        if self.add_sep:
            self.add_bos, self.add_eos = True, False
            if self.sep_id is None:
                raise TokenizerError(f"{name}: a 'bert' tokenizer needs tokenizer.ggml.seperator_token_id")
        if self.add_bos and self.bos_id is None:
            raise TokenizerError(
                f"{name}: tokenizer.ggml.add_bos_token is set but there is no tokenizer.ggml.bos_token_id"
            )
        if self.add_eos and self.eos_id is None:
            raise TokenizerError(
                f"{name}: tokenizer.ggml.add_eos_token is set but there is no tokenizer.ggml.eos_token_id"
            )
        if self.model == "bert":
            lowercase = _flag(md, "tokenizer.ggml.normalizer.lowercase", name, True)
            strip = _flag(md, "tokenizer.ggml.normalizer.strip_accents", name, lowercase)
            self._wpm = WPM(self._vocab, lowercase, strip, self.unk_id)
        elif self._bpe is None:
            self._spm = SPM(self._vocab, self.tokens, np.zeros(n) if scores is None else scores, self.unk_id)

        eog = self._end_of_generation(md)
        # [n_vocab] bytes per token with special=True, and with control / unknown tokens hidden; built per token
        # on first use (all 150k at load cost ~0.1 s of the time to the first token)
        self._pieces = _Pieces(lambda i: self._piece(i, True), n)
        self._visible_pieces = _Pieces(lambda i: self._piece(i, False), n)
        self._max_piece: int | None = None
        self._special_splitters: dict[bool, SpecialSplitter] = {}
        try:
            if self._wpm is not None and md.get("tokenizer.chat_template") is None:  # an encoder's: it does not chat
                raise ChatTemplateError(f"{name}: a WordPiece (BERT) vocabulary without a chat template: no chat")
            self.chat_template = ChatTemplate(
                md.get("tokenizer.chat_template"),
                model=name,
                bos_token="" if self.bos_id is None else self.tokens[self.bos_id],
                eos_token="" if self.eos_id is None else self.tokens[self.eos_id],
            )
        except ChatTemplateError as e:  # the model still loads: raw prompts work, chat prompts raise e
            if self._wpm is None:
                warnings.warn(f"{e}; chat prompts will fail (raw prompts work)", stacklevel=3)
            self.chat_template = ChatTemplate.unusable(e, model=name)
        turn_end = self._template_end_of_turn()
        self.stop_ids: frozenset[int] = frozenset(eog if turn_end is None else eog | {turn_end})

    def _end_of_generation(self, md: Mapping[str, Any]) -> set[int]:
        """Sets eot_id / eom_id and returns llama.cpp's end-of-generation ids: EOS, EOT, EOM, the FIM pad /
        repo / file-separator tokens and every token with an end-of-turn text. Tokens llama.cpp finds by
        their text (no GGUF key) become control tokens, as there."""
        n, by_text = len(self.tokens), []

        def key_or_text(key: str, texts: tuple[str, ...]) -> int | None:
            tid = _token_id(md, f"tokenizer.ggml.{key}_token_id", self.name, n, None)
            if tid is None:
                tid = next((self._vocab[t] for t in texts if t in self._vocab), None)
                if tid is not None:
                    by_text.append(tid)
            return tid

        self.eot_id = key_or_text("eot", _EOT_TEXTS)
        self.eom_id = key_or_text("eom", _EOM_TEXTS)
        fim = {key: key_or_text(key, texts) for key, texts in _FIM_TEXTS.items()}
        # fill-in-the-middle token ids by role (fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep), None where
        # the model has none
        self.fim: dict[str, int | None] = fim
        eog = {self._vocab[t] for t in _EOG_TEXTS if t in self._vocab}
        for tid in (*by_text, *eog):
            self._types[tid] = CONTROL
        eog.update(
            t
            for t in (self.eos_id, self.eot_id, self.eom_id, fim["fim_pad"], fim["fim_rep"], fim["fim_sep"])
            if t is not None
        )
        for t in _HARMONY_RENDERED:
            if t in self._vocab:
                self._types[self._vocab[t]] = USER_DEFINED
        ends = {self.tokens[t]: t for t in eog}
        if {"<|return|>", "<|call|>", "<|end|>"} <= ends.keys():  # as llama.cpp's vocab loader does
            eog.discard(ends["<|end|>"])
            self._types[ends["<|end|>"]] = USER_DEFINED
        return eog

    # -- properties ----------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def max_piece_bytes(self) -> int:
        """The most bytes of text one token stands for: text of B bytes encodes to at least B / this many tokens
        (what lets a caller refuse text that cannot fit a context before tokenizing it)."""
        if self._max_piece is None:
            self._max_piece = max(1, max(len(p) for p in self._pieces))
        return self._max_piece

    def is_special(self, token_id: int) -> bool:
        """True for control and unknown tokens: the ones decode() hides unless special=True."""
        return self._types[self._check_id(token_id)] in (CONTROL, UNKNOWN)

    def token_type(self, token_id: int) -> int:
        """tokenizer.ggml.token_type of one id (after llama.cpp's end-of-generation overrides)."""
        return self._types[self._check_id(token_id)]

    def token_to_id(self, text: str) -> int | None:
        return self._vocab.get(text)

    def piece(self, token_id: int, special: bool = False) -> bytes:
        """The bytes one token decodes to (b"" for a hidden control token when special=False)."""
        i = self._check_id(token_id)
        return (self._pieces if special else self._visible_pieces)[i]

    # -- encode ------------------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids for text. add_special: BOS / EOS where the model adds them (add_bos / add_eos);
        parse_special: match control tokens written in the text (rendered chat prompts)."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes a str, got {type(text).__name__}")
        out: list[int] = []
        if add_special and self.add_bos:
            out.append(self.bos_id)
        prev_special = True  # SPM: a fragment at the start or after a special token gets the space prefix
        for frag in self._splitter(parse_special).split(text):
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
            elif self._bpe is not None:
                out += self._bpe.encode(frag)
            elif self._wpm is not None:
                out += self._wpm.encode(frag)
            else:
                if self.add_space_prefix and prev_special:
                    frag = " " + frag
                out += self._spm.encode(frag)
                prev_special = False
        if add_special and self.add_eos:
            out.append(self.eos_id)
        if add_special and self.add_sep:
            out.append(self.sep_id)
        return out

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> list[int]:
        """chat_template.render(...) encoded with special tokens parsed and BOS added as encode() does;
        a BOS the template already wrote at the start is not doubled. ChatTemplateError on bad messages."""
        prompt = self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **extra)
        if self.add_bos and self.bos_id is not None and prompt.startswith(self.tokens[self.bos_id]):
            prompt = prompt[len(self.tokens[self.bos_id]) :]
        return self.encode(prompt, add_special=True, parse_special=True)

    # -- decode ------------------------------------------------------------------------------------------
    def decode(self, ids: Iterable[int], special: bool = False) -> str:
        """Text for ids; special=True also renders control tokens. Invalid UTF-8 becomes U+FFFD.
        Raises ValueError for an id outside the vocabulary, TypeError for anything but integers."""
        ids = token_ids(ids, "ids", len(self.tokens))
        pieces = self._pieces if special else self._visible_pieces
        data = b"".join([pieces[i] for i in ids])
        if self._strip_first_space:
            first = next((pieces[i] for i in ids if pieces[i]), b"")
            if first[:1] == b" ":
                data = data[1:]
        return data.decode("utf-8", "replace")

    def detokenizer(self, special: bool = False) -> IncrementalDetokenizer:
        """A fresh streaming detokenizer; its push()/flush() output concatenates to decode(ids, special)."""
        return IncrementalDetokenizer(
            self._pieces if special else self._visible_pieces, strip_first_space=self._strip_first_space
        )

    @property
    def _strip_first_space(self) -> bool:
        """decode drops the first piece's leading space: SPM's added prefix, WordPiece's first ▁."""
        return self.add_space_prefix or self._wpm is not None

    # -- internals ----------------------------------------------------------------------------------------
    def _check_id(self, token_id: int) -> int:
        i = operator.index(token_id)
        if not 0 <= i < len(self.tokens):
            raise ValueError(f"token id {i} is outside the vocabulary [0, {len(self.tokens)})")
        return i

    def _piece(self, i: int, special: bool) -> bytes:
        """The bytes token i decodes to; special=False hides control / unknown tokens."""
        kind, text = self._types[i], self.tokens[i]
        if kind == NORMAL:
            if self._spm is not None or self._wpm is not None:
                return text.replace(SPACE, " ").encode("utf-8", "surrogatepass")
            return token_bytes(text)
        if kind in (CONTROL, UNKNOWN):
            return text.encode("utf-8", "surrogatepass") if special else b""
        if kind == USER_DEFINED:
            return text.encode("utf-8", "surrogatepass")
        if kind == BYTE and self._spm is not None and re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", text):
            return bytes([int(text[3:5], 16)])
        return b""  # unused, undefined, and byte tokens of a BPE vocabulary: llama.cpp renders nothing

    def _splitter(self, parse_special: bool) -> SpecialSplitter:
        s = self._special_splitters.get(parse_special)
        if s is None:
            kinds = (CONTROL, UNKNOWN, USER_DEFINED) if parse_special else (USER_DEFINED,)
            ids = [i for i, k in enumerate(self._types) if k in kinds]
            s = self._special_splitters[parse_special] = SpecialSplitter([(self.tokens[i], i) for i in ids])
        return s

    def _template_end_of_turn(self) -> int | None:
        """The control token a rendered assistant turn ends with (e.g. <|im_end|>, <end_of_turn>)."""
        tail = self.chat_template.end_of_turn()
        for k in range(min(len(tail or ""), 256), 0, -1):  # longest prefix first
            tid = self._vocab.get(tail[:k])
            if tid is not None and self._types[tid] == CONTROL:
                return tid
        return None


class _Pieces(Sequence[bytes]):
    """A read-only list of n byte strings, each made by piece(i) the first time it is read."""

    def __init__(self, piece: Callable[[int], bytes], n: int):
        self._piece, self._cache = piece, [None] * n

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        p = self._cache[i]
        if p is None:
            p = self._cache[i] = self._piece(operator.index(i) % len(self._cache))
        return p


# -- metadata readers: each raises TokenizerError naming the file and the key ------------------------------
def _string(md: Mapping[str, Any], key: str, name: str) -> str:
    if key not in md:
        raise TokenizerError(f"{name}: {key} is missing: this GGUF has no tokenizer")
    v = md[key]
    if not isinstance(v, str):
        raise TokenizerError(f"{name}: {key} must be a string, got {type(v).__name__}")
    return v


def _merges_checked(md: Mapping[str, Any]) -> bool:
    """True when the native check passed every merge against the token texts (bytewise, from the file's
    buffer); False leaves the check to BPE, which names a bad merge."""
    from .. import native

    tokens, merges = md.get("tokenizer.ggml.tokens"), md.get("tokenizer.ggml.merges")
    if not isinstance(tokens, StringArray) or not isinstance(merges, StringArray):
        return False
    tv, mv = tokens.native_view(), merges.native_view()
    return tv is not None and mv is not None and native.merges_valid(*tv, *mv)


def _strings(md: Mapping[str, Any], key: str, name: str) -> list[str]:
    if key not in md:
        raise TokenizerError(f"{name}: {key} is missing")
    v = md[key]
    if isinstance(v, StringArray):
        return v.tolist()
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise TokenizerError(f"{name}: {key} must be an array of strings")
    return list(v)


def _numbers(md: Mapping[str, Any], key: str, name: str, n: int, dtype) -> np.ndarray | None:
    """A numeric array of exactly n entries, copied out of the file; None when the key is absent."""
    if key not in md:
        return None
    v = md[key]
    if not isinstance(v, np.ndarray) or v.dtype.kind not in "iufb" or v.ndim != 1:
        raise TokenizerError(f"{name}: {key} must be a numeric array")
    if len(v) != n:
        raise TokenizerError(f"{name}: {key} has {len(v)} entries but tokenizer.ggml.tokens has {n}")
    return v.astype(dtype)


def _flag(md: Mapping[str, Any], key: str, name: str, default: bool) -> bool:
    v = md.get(key, default)
    if not isinstance(v, (bool, np.bool_)):
        raise TokenizerError(f"{name}: {key} must be a bool, got {v!r}")
    return bool(v)


def _default_id(tid: int | None, n: int) -> int | None:
    return tid if tid is not None and tid < n else None


def _token_id(md: Mapping[str, Any], key: str, name: str, n: int, default: int | None) -> int | None:
    if key not in md:
        return default
    v = md[key]
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TokenizerError(f"{name}: {key} must be an integer token id, got {v!r}")
    if not 0 <= v < n:
        raise TokenizerError(f"{name}: {key} = {v} is outside the vocabulary [0, {n})")
    return int(v)
