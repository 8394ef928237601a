"""Anthropic's Messages API (issue 35) with the anthropic SDK against a live server on qwen2.5-coder-0.5b:
`messages.create` whole and streamed (its event types in order), a tool turn (tool_use out, tool_result in),
stop sequences and max_tokens as stop reasons, count_tokens, and errors in Anthropic's shape. Greedy throughout."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import model_file
from live_server import live_server

anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK (a test extra) is not installed")
pytestmark = pytest.mark.model
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "the city's name"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def server():
    with live_server(str(model_file(QWEN)), parallel=2, host_kwargs={"fallback": True}) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server[0], api_key="none", max_retries=0)


def test_messages_create_whole(client):
    msg = client.messages.create(
        model="claude-test",  # any name: serve MODEL answers with its model
        max_tokens=40,
        system="You answer in one short sentence.",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        extra_body={"temperature": 0},  # this SDK no longer sends temperature; the API takes it
    )
    assert msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text" and "Paris" in msg.content[0].text
    assert msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 10 and 0 < msg.usage.output_tokens <= 40


def test_messages_stream_events_in_order(client):
    kinds, text = [], ""
    with client.messages.stream(
        model="m",
        max_tokens=30,
        messages=[{"role": "user", "content": "Count to five."}],
        extra_body={"temperature": 0},
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "content_block_delta":
                text += event.delta.text
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds[1] == "content_block_start" and "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text == text and text
    assert final.stop_reason in ("end_turn", "max_tokens") and final.usage.output_tokens > 0


def test_stop_reasons_max_tokens_and_stop_sequence(client):
    msg = client.messages.create(
        model="m",
        max_tokens=3,
        messages=[{"role": "user", "content": "Write a long story."}],
        extra_body={"temperature": 0},
    )
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    msg = client.messages.create(
        model="m",
        max_tokens=60,
        messages=[{"role": "user", "content": "List the numbers 1, 2, 3, 4, 5 separated by commas."}],
        stop_sequences=["3"],
        extra_body={"temperature": 0},  # this SDK no longer sends temperature; the API takes it
    )
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == "3", msg
    assert "3" not in msg.content[0].text


def test_a_tool_turn(client):
    ask = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    msg = client.messages.create(model="m", max_tokens=80, tools=[WEATHER], messages=ask, extra_body={"temperature": 0})
    assert msg.stop_reason == "tool_use", msg
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input.get("city") == "Paris" and use.id.startswith("toolu_")
    # the result goes back as a tool_result block; the model answers in text
    history = ask + [
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "18 C and sunny"}]},
    ]
    count = client.messages.count_tokens(model="m", tools=[WEATHER], messages=history)
    assert count.input_tokens > 50
    with client.messages.stream(
        model="m", max_tokens=60, tools=[WEATHER], messages=history, extra_body={"temperature": 0}
    ) as s:
        final = s.get_final_message()
    assert final.content and final.content[0].type in ("text", "tool_use")


def test_errors_come_in_anthropics_shape(server, client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model="m",
            max_tokens=10,
            messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "http://x"}}]}],
        )
    assert "messages[0].content[0]" in str(e.value)
    r = httpx.post(server[0] + "/v1/messages", json={"messages": [{"role": "user", "content": "hi"}]}, timeout=60)
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and "max_tokens" in r.json()["error"]["message"]


def test_structured_output_through_output_config(client):
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str
        population_millions: float

    ask = [{"role": "user", "content": "Describe Paris as JSON."}]
    # greedy: at the default temperature a sampled string can outrun max_tokens (a flake, seen once)
    parsed = client.messages.parse(
        model="m", max_tokens=80, messages=ask, output_format=City, extra_body={"temperature": 0}
    )
    assert isinstance(parsed.parsed_output, City), parsed  # the SDK's own validation of the reply
    assert parsed.stop_reason == "end_turn"
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    streamed = ""
    with client.messages.stream(
        model="m",
        max_tokens=40,
        messages=ask,
        extra_body={"temperature": 0},
        output_config={"format": {"type": "json_schema", "schema": schema}},
    ) as s:
        for text in s.text_stream:
            streamed += text
    assert json.loads(streamed) in ({"ok": True}, {"ok": False})
    for bad, where in (
        ({"format": {"type": "json_object"}}, "output_config.format"),
        ({"format": {"type": "json_schema", "schema": {"type": "nope"}}}, "output_config.format.schema"),
    ):
        with pytest.raises(anthropic.BadRequestError, match=where.replace(".", r"\.")):
            client.messages.create(model="m", max_tokens=10, messages=ask, output_config=bad)
    with pytest.raises(anthropic.BadRequestError, match="both constrain"):
        client.messages.create(
            model="m",
            max_tokens=10,
            messages=ask,
            output_config={"format": {"type": "json_schema", "schema": schema}},
            extra_body={"grammar": 'root ::= "a"'},
        )
