"""OpenAI's Responses API (issue 35) with the openai SDK against a live server on qwen2.5-coder-0.5b:
`responses.create` whole and streamed (its typed events), a function tool turn, previous_response_id over the
server's store, text.format structured output, retrieve and delete, and refusals. Greedy throughout."""

from __future__ import annotations

import json

import openai
import pytest
from conftest import model_file
from live_server import live_server

pytestmark = pytest.mark.model
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city's name"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def client():
    with live_server(str(model_file(QWEN)), parallel=2, host_kwargs={"fallback": True}) as (url, _app):
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_create_whole_and_retrieve(client):
    r = client.responses.create(
        model="m", input="What is the capital of France?", instructions="Answer in one sentence.", temperature=0
    )
    assert r.status == "completed" and "Paris" in r.output_text
    assert r.usage.input_tokens > 10 and r.usage.output_tokens > 0
    assert client.responses.retrieve(r.id).output_text == r.output_text
    client.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_create_streamed_events(client):
    kinds, text, final = [], "", None
    for event in client.responses.create(model="m", input="Count to five.", temperature=0, stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            final = event.response
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_item.added" in kinds and "response.output_text.done" in kinds
    assert final is not None and final.output_text == text and text


def test_previous_response_id_continues_the_conversation(client):
    first = client.responses.create(model="m", input="My name is Ada. Just say hello.", temperature=0)
    second = client.responses.create(
        model="m", input="What is my name?", previous_response_id=first.id, temperature=0, max_output_tokens=30
    )
    assert "Ada" in second.output_text
    assert second.usage.input_tokens > first.usage.input_tokens
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="hi", previous_response_id="resp_missing")


def test_a_function_tool_turn(client):
    r = client.responses.create(
        model="m", input="What is the weather like in Paris right now?", tools=[WEATHER], temperature=0
    )
    call = next(o for o in r.output if o.type == "function_call")
    assert call.name == "get_weather" and json.loads(call.arguments)["city"] == "Paris"
    done = client.responses.create(
        model="m",
        previous_response_id=r.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C and sunny"}],
        tools=[WEATHER],
        temperature=0,
        max_output_tokens=60,
    )
    assert done.status in ("completed", "incomplete") and done.output


def test_text_format_json_schema_and_max_output_tokens(client):
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    r = client.responses.create(
        model="m",
        input="Name a city in Japan.",
        text={"format": {"type": "json_schema", "name": "city", "schema": schema}},
        temperature=0,
    )
    assert isinstance(json.loads(r.output_text)["city"], str)
    r = client.responses.create(model="m", input="Write a long story.", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def test_refusals_name_the_field(client):
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.responses.create(model="m", input="hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.BadRequestError, match="input"):
        client.responses.create(
            model="m", input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]
        )
