"""Structured output (issue 35) as clients ask for it, against a live server on qwen2.5-coder-0.5b: the openai SDK's
`beta.chat.completions.parse` with a pydantic model and `response_format` json_object, the ollama client's
`format=` (a schema and "json"), LangChain's `ChatOpenAI.with_structured_output`, llama.cpp's json_schema and GBNF
grammar fields; every reply parses and validates against its schema; bad schemas are a 400 naming the field.
Greedy throughout."""

from __future__ import annotations

import json

import httpx
import jsonschema
import openai
import pytest
from conftest import model_file
from live_server import live_server
from pydantic import BaseModel

pytestmark = pytest.mark.model
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
ASK = [{"role": "user", "content": "Describe a fictional programmer: name, age, favourite languages."}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "languages": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
    },
    "required": ["name", "age", "languages"],
    "additionalProperties": False,
}


class Person(BaseModel):
    name: str
    age: int
    languages: list[str]


@pytest.fixture(scope="module")
def server():
    with live_server(str(model_file(QWEN)), parallel=2, host_kwargs={"fallback": True}) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def name(server) -> str:
    return server[1].state.host.default


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0)


def post(server, path: str, body: dict) -> httpx.Response:
    with httpx.Client(base_url=server[0], timeout=120) as h:
        return h.post(path, json=body)


def test_openai_sdk_parse_fills_a_pydantic_model(server, name):
    done = client(server).beta.chat.completions.parse(
        model=name, messages=ASK, response_format=Person, temperature=0, max_tokens=120
    )
    choice = done.choices[0]
    assert choice.finish_reason == "stop", choice
    person = choice.message.parsed
    assert isinstance(person, Person) and person.name and person.age >= 0, choice.message.content


def test_openai_json_object_streamed_is_one_json_object(server, name):
    stream = client(server).chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "Give me a JSON object describing the colour blue."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=120,
        stream=True,
    )
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop"
    assert isinstance(json.loads(text), dict), text


def test_ollama_client_format_schema_and_json(server, name):
    import ollama

    c = ollama.Client(host=server[0])
    reply = c.chat(model=name, messages=ASK, format=PERSON, options={"temperature": 0, "num_predict": 120})
    jsonschema.validate(json.loads(reply.message.content), PERSON)
    assert reply.done_reason == "stop"
    reply = c.generate(model=name, prompt="A JSON object with a key 'ok':", format="json", options={"num_predict": 60})
    assert isinstance(json.loads(reply.response), dict), reply.response


def test_langchain_with_structured_output(server, name):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=server[0] + "/v1", api_key="none", model=name, temperature=0, max_tokens=120)
    person = llm.with_structured_output(Person, method="json_schema").invoke(ASK[0]["content"])
    assert isinstance(person, Person) and person.name


def test_llama_cpp_json_schema_and_gbnf_grammar(server, name):
    r = post(server, "/v1/chat/completions", {"messages": ASK, "json_schema": PERSON, "max_tokens": 120})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), PERSON)
    gbnf = 'root ::= "yes" | "no"'
    r = post(server, "/v1/completions", {"prompt": "Is the sky blue? Answer:", "grammar": gbnf, "max_tokens": 8})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] in ("yes", "no"), r.json()
    assert r.json()["choices"][0]["finish_reason"] == "stop"


def test_a_reply_cut_by_max_tokens_says_length(server, name):
    r = post(
        server,
        "/v1/chat/completions",
        {
            "messages": ASK,
            "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
            "max_tokens": 4,
        },
    )
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strin"}}}},
            "response_format.json_schema.schema",
        ),
        ("/v1/chat/completions", {"response_format": {"type": "xml"}}, "response_format.type"),
        ("/v1/chat/completions", {"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'}, "grammar"),
        ("/v1/chat/completions", {"grammar": "root ::= ("}, "grammar"),
        (
            "/api/chat",
            {"format": {"type": "object", "properties": {"a": {"type": "string", "format": "no-such"}}}},
            "format",
        ),
    ],
)
def test_schemas_the_compiler_refuses_are_a_400_naming_the_field(server, name, path, body, param):
    r = post(server, path, {"model": name, "messages": ASK, "stream": False, **body})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"] if isinstance(err, dict) else None) == param or param in json.dumps(r.json()), r.text
