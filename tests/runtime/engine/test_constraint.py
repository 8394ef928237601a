"""Structured output in the engine (engine/constraint.py): grammars checked when made, replies that follow them,
drafts cut where the grammar would refuse them without changing a token, and a property test over random JSON
Schemas whose every completed reply validates (jsonschema), on qwen2.5-coder-0.5b, greedy."""

from __future__ import annotations

import datetime
import json

import jsonschema
import numpy as np
import pytest
from conftest import model_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from localllm import Grammar
from localllm.llm import LLM
from localllm.text.tokenizer import Tokenizer

QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"


@pytest.fixture(scope="module")
def llm():
    with LLM(model_file(QWEN), n_threads=2, ctx_size=1024, parallel=2) as m:
        yield m


def reply(llm, content: str, grammar: Grammar, **kw):
    chunks = list(llm.chat([{"role": "user", "content": content}], grammar=grammar, temperature=0, **kw))
    return "".join(c.text for c in chunks), chunks[-1].finish_reason


def test_grammars_the_compiler_refuses_raise_value_error_naming_them():
    with pytest.raises(ValueError, match="json_schema: .*strin"):
        Grammar.json_schema({"type": "strin"})
    with pytest.raises(ValueError, match="format: .*no-such"):
        Grammar.json_schema({"type": "string", "format": "no-such"}, "format")
    with pytest.raises(ValueError, match="json_schema: not JSON"):
        Grammar.json_schema("{nope")
    with pytest.raises(ValueError, match="must be an object"):
        Grammar.json_schema(["type", "object"])
    with pytest.raises(ValueError, match="grammar: "):
        Grammar.gbnf("root ::= (")
    with pytest.raises(ValueError, match="regex: "):
        Grammar.regex("a(")


def test_the_mask_leaves_exactly_what_the_grammar_allows():
    tok = Tokenizer.from_gguf(model_file(QWEN))
    c = Grammar.regex("(yes|no)").constraint(tok)
    row = np.zeros(tok.vocab_size + 64, dtype=np.float32)  # the model's padding rows past the vocabulary too
    c.mask(row)
    allowed = {tok.decode([i]) for i in np.flatnonzero(np.isfinite(row))}
    assert allowed and allowed <= {"y", "ye", "yes", "n", "no"}, allowed
    assert np.all(np.isinf(row[tok.vocab_size :]))
    (yes,) = tok.encode("yes", add_special=False)
    assert c.drafts([yes, yes]) == 1 and c.accept(yes) and c.complete


@pytest.mark.model
def test_a_schema_reply_completes_and_validates(llm):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    }
    text, finish = reply(llm, "Name a large city and its population.", Grammar.json_schema(schema), max_tokens=80)
    assert finish == "stop"
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.model
def test_drafts_never_change_a_constrained_reply(llm):
    """n-gram drafts (this prompt repeats itself, so there are some) are cut where the grammar refuses them and
    verified as always: the reply is plain decoding's, token for token."""
    schema = {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "maxItems": 12}
    ask = 'Repeat this list exactly: ["red", "green", "blue", "red", "green", "blue", "red", "green", "blue"]'
    g = Grammar.json_schema(schema)
    off = list(llm.chat([{"role": "user", "content": ask}], grammar=g, speculative="off", temperature=0, max_tokens=80))
    on = list(
        llm.chat([{"role": "user", "content": ask}], grammar=g, speculative="ngram", temperature=0, max_tokens=80)
    )
    assert [t for c in on for t in c.token_ids] == [t for c in off for t in c.token_ids]
    assert on[-1].stats.draft_proposed > 0, "the prompt gave no drafts: the test checks nothing"
    jsonschema.validate(json.loads("".join(c.text for c in on)), schema)


@pytest.mark.model
def test_a_reply_cut_short_ends_with_length(llm):
    text, finish = reply(llm, "Describe a cat.", Grammar.json(), max_tokens=3)
    assert finish == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


# -- random schemas -------------------------------------------------------------------------------------------------

_NAMES = st.sampled_from(["id", "name", "tags", "kind", "size", "ok", "items", "note"])
_LEAVES = st.one_of(
    st.just({"type": "string", "maxLength": 12}),
    st.just({"type": "integer", "minimum": 0, "maximum": 1000}),
    st.just({"type": "number"}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.just({"type": "string", "format": "date"}),
    st.just({"type": "string", "pattern": "^[a-z]{2,5}$"}),
    st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta"]), min_size=1, max_size=4, unique=True).map(
        lambda xs: {"enum": xs}
    ),
)


RFC3339_DATES = jsonschema.FormatChecker()


@RFC3339_DATES.checks("date", raises=ValueError)
def _full_date(value) -> bool:
    """RFC 3339's full-date, which JSON Schema's "date" names: four digits of year, 0000 included (jsonschema's own
    check, Python's date.fromisoformat, refuses year 0; in the proleptic Gregorian calendar it is a leap year, as
    2000 is)."""
    if not isinstance(value, str):
        return True
    if not (len(value) == 10 and value[:4].isdigit() and value[:4].isascii()):
        return False
    datetime.date.fromisoformat(("2000" if value[:4] == "0000" else value[:4]) + value[4:])
    return True


def _schemas():
    def extend(children):
        objects = st.dictionaries(_NAMES, children, min_size=1, max_size=3).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props)}
        )
        arrays = children.map(lambda s: {"type": "array", "items": s, "maxItems": 3})
        any_of = st.lists(children, min_size=2, max_size=2).map(lambda xs: {"anyOf": xs})
        return st.one_of(objects, arrays, any_of)

    top = st.dictionaries(_NAMES, st.recursive(_LEAVES, extend, max_leaves=4), min_size=1, max_size=3)
    return top.map(lambda props: {"type": "object", "properties": props, "required": sorted(props)})


@pytest.mark.model
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=_schemas())
def test_random_schemas_give_replies_that_validate(llm, schema):
    text, finish = reply(
        llm, "Fill in this JSON object with plausible values.", Grammar.json_schema(schema), max_tokens=160
    )
    if finish == "length":  # cut short: not valid output, and said so
        return
    assert finish == "stop"
    jsonschema.validate(json.loads(text), schema, format_checker=RFC3339_DATES)
