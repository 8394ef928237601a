"""Structured output: a grammar a request's tokens must follow, enforced on each row the request samples.

    g = Grammar.json_schema(schema)      # or Grammar.json(), Grammar.regex(r), Grammar.lark(text), Grammar.gbnf(text)
                                         # ValueError naming what the compiler refused, before anything runs
    c = g.constraint(tokenizer)          # one per request: the grammar's state over the model's vocabulary
    c.mask(row)                          # row [n >= vocab] float32, in place: tokens the grammar forbids -> -inf
    c.accept(token_id)                   # the token sampled from the masked row (False: the grammar refused it)
    n = c.drafts(ids)                    # how many of a draft's ids the grammar takes from here (the rest are cut)
    c.complete                           # the grammar is satisfied (only an end-of-generation token may follow)

The automaton is llguidance's (a Rust library with Python bindings, no dependencies; measured against
outlines-core and xgrammar in docs/performance.md): it compiles JSON Schema, regular expressions and Lark grammars
(GBNF through its converter) lazily over the tokenizer's byte strings, and computes a token mask in tens of
microseconds on a 151,936-token vocabulary. The vocabulary's view is built once per Tokenizer and shared.

End of generation: the tokenizer's stop ids are the grammar's end tokens, allowed only where the grammar is
satisfied, so a constrained reply ends with "stop" exactly when it is complete; one cut by max_tokens ends with
"length" and is not valid output.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..text.tokenizer import Tokenizer

if TYPE_CHECKING:
    import llguidance

_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_VOCABS: weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_VOCABS_LOCK = threading.Lock()


def _llg():
    """llguidance, imported on first use: 23 ms (with importlib.metadata) that a reply without a grammar (`localllm
    run`'s first token) does not wait for."""
    import llguidance

    return llguidance


class _Vocab:
    """What llguidance's TokenizerWrapper reads of a tokenizer: every token's bytes (control tokens marked with a
    leading 0xFF, its convention for special tokens), the end and begin ids, and an encoder for text it tokenizes."""

    def __init__(self, tok: Tokenizer):
        self._tok = tok
        stops = sorted(tok.stop_ids)
        self.eos_token_id = stops[0] if stops else None
        self.bos_token_id = tok.bos_id
        self.special_token_ids = [i for i in range(tok.vocab_size) if tok.is_special(i)]
        special = set(self.special_token_ids)
        self.tokens = [(b"\xff" if i in special else b"") + tok.piece(i, special=True) for i in range(tok.vocab_size)]

    def __call__(self, text: str | bytes) -> list[int]:
        return self._tok.encode(text if isinstance(text, str) else text.decode("utf-8", "replace"), add_special=False)


def _vocabulary(tok: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of tok, built once per Tokenizer (about a second for a 151,936-token vocabulary)."""
    with _VOCABS_LOCK:
        v = _VOCABS.get(tok)
        if v is None:
            llg = _llg()
            v = llg.LLTokenizer(llg.TokenizerWrapper(_Vocab(tok)), eos_token=sorted(tok.stop_ids) or None)
            _VOCABS[tok] = v
        return v


class Grammar:
    """A compiled-on-demand grammar (llguidance's serialized form), checked when made: ValueError names the problem
    (a schema keyword the compiler does not take, a regex or grammar that does not parse)."""

    def __init__(self, spec: str, what: str):
        self.spec, self.what = spec, what
        is_error, messages = _llg().LLMatcher.validate_grammar_with_warnings(spec)
        if is_error:
            raise ValueError(f"{what}: {messages[0] if messages else 'not a grammar localllm can enforce'}")

    @classmethod
    def json_schema(cls, schema: dict[str, Any] | str, what: str = "json_schema") -> Grammar:
        """Replies that are JSON documents valid under schema (a JSON Schema object or its text)."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise ValueError(f"{what}: not JSON ({e})") from None
        if not isinstance(schema, dict):
            raise ValueError(f"{what}: a JSON Schema must be an object, got {type(schema).__name__}")
        try:
            # the separators json.dumps writes, and no other whitespace: a model cannot loop on blank space
            spec = _llg().LLMatcher.grammar_from_json_schema(schema, defaults=_JSON_LAYOUT)
        except ValueError as e:
            raise ValueError(f"{what}: {e}") from None
        return cls(spec, what)

    @classmethod
    def json(cls, what: str = "json_object") -> Grammar:
        """Replies that are one JSON object (OpenAI's json_object, Ollama's format "json")."""
        return cls.json_schema({"type": "object"}, what)

    @classmethod
    def regex(cls, pattern: str, what: str = "regex") -> Grammar:
        return cls(_llg().LLMatcher.grammar_from_regex(pattern), what)

    @classmethod
    def lark(cls, text: str, what: str = "grammar") -> Grammar:
        return cls(_llg().LLMatcher.grammar_from_lark(text), what)

    @classmethod
    def gbnf(cls, text: str, what: str = "grammar") -> Grammar:
        """llama.cpp's GBNF grammars (its `grammar` field), converted to Lark."""
        from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark

        try:
            lark = gbnf_to_lark(text)
        except GbnfToLarkError as e:
            raise ValueError(f"{what}: {e}") from None
        return cls.lark(lark, what)

    def constraint(self, tok: Tokenizer) -> Constraint:
        return Constraint(self, _vocabulary(tok))


class Constraint:
    """One request's position in its grammar. Engine thread only."""

    def __init__(self, grammar: Grammar, vocab: llguidance.LLTokenizer):
        self._m = _llg().LLMatcher(vocab, grammar.spec, log_level=0)
        if self._m.is_error():
            raise ValueError(f"{grammar.what}: {self._m.get_error()}")
        self._n = vocab.vocab_size
        self._what = grammar.what

    def mask(self, row: np.ndarray) -> None:
        """Sets the logits of the tokens the grammar forbids next to -inf, in place (row: [n >= vocab])."""
        bits = np.frombuffer(self._m.compute_bitmask(), dtype=np.uint8)
        allowed = np.unpackbits(bits, count=self._n, bitorder="little")
        np.copyto(row[: self._n], -np.inf, where=allowed == 0)
        row[self._n :] = -np.inf

    def accept(self, token_id: int) -> bool:
        return self._m.consume_token(int(token_id))

    def drafts(self, ids: list[int]) -> int:
        """How many leading ids of a draft the grammar would take from the current state."""
        return self._m.validate_tokens([int(t) for t in ids]) if ids else 0

    @property
    def complete(self) -> bool:
        return self._m.is_accepting()

    @property
    def error(self) -> str:
        return self._m.get_error() if self._m.is_error() else ""
