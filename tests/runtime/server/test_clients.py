"""`serve` as real clients use it (issue 33): the ollama client, litellm's `ollama_chat/` provider, LangChain's
ChatOllama and ChatOpenAI, the openai SDK through a tool conversation, and curl-style bodies, against a live server
on qwen2.5-coder-0.5b (a model whose template takes tools). Greedy throughout, so replies are the model's own."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from conftest import model_file
from live_server import live_server

pytestmark = pytest.mark.model
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city's name"}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]


@pytest.fixture(scope="module")
def server():
    with live_server(str(model_file(QWEN)), parallel=2, host_kwargs={"fallback": True}) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def name(server) -> str:
    """The served model's name, as /api/tags lists it."""
    return server[1].state.host.default


def post(server, path: str, **kw) -> httpx.Response:
    with httpx.Client(base_url=server[0], timeout=120) as h:
        return h.post(path, **kw)


# -- bodies as curl and litellm send them ---------------------------------------------------------------------------


def test_bodies_are_json_whatever_their_content_type(server, name):
    body = json.dumps({"model": name, "messages": ASK, "stream": False, "options": {"num_predict": 2}})
    for headers in ({}, {"content-type": "application/x-www-form-urlencoded"}, {"content-type": "text/plain"}):
        with httpx.Client(base_url=server[0], timeout=120) as h:
            # httpx sends no content type for raw content unless told: what litellm's Ollama providers send
            r = h.post("/api/chat", content=body.encode(), headers=headers)
            assert r.status_code == 200, (headers, r.text)
            assert r.json()["done"] is True
            r = h.post(
                "/v1/chat/completions",
                content=json.dumps({"messages": ASK, "max_tokens": 2}).encode(),
                headers=headers,
            )
            assert r.status_code == 200, (headers, r.text)
            r = h.post("/infill", content=json.dumps({"input_prefix": "def f(", "n_predict": 2}), headers=headers)
            assert r.status_code == 200, (headers, r.text)


def test_malformed_json_names_the_position_in_its_message(server):
    r = post(server, "/v1/chat/completions", content=b'{"messages": [}', headers={"content-type": "application/json"})
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] is None and err["code"] == "invalid_json"
    assert "not valid JSON" in err["message"] and "at byte 14" in err["message"], err


# -- the ollama client ----------------------------------------------------------------------------------------------


def test_ollama_client_gets_tool_calls_streamed_and_whole(server, name):
    import ollama

    client = ollama.Client(host=server[0], timeout=120)
    whole = client.chat(model=name, messages=ASK, tools=[WEATHER], options={"temperature": 0})
    calls = whole.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}
    streamed = [
        c for c in client.chat(model=name, messages=ASK, tools=[WEATHER], stream=True, options={"temperature": 0})
    ]
    got = [tc for c in streamed for tc in (c.message.tool_calls or [])]
    assert [(tc.function.name, tc.function.arguments) for tc in got] == [("get_weather", {"city": "Paris"})]
    assert streamed[-1].done and not any(c.done for c in streamed[:-1])
    assert "".join(c.message.content or "" for c in streamed).strip() == ""  # the call is not also text


def test_ollama_show_lists_the_tools_capability(server, name):
    import ollama

    caps = ollama.Client(host=server[0]).show(name).capabilities
    assert "tools" in caps and "completion" in caps and "insert" in caps


def expected_prompt_tokens(server, messages: list[dict]) -> int:
    """The token count of the conversation as the model's template renders it, tool calls' arguments as objects."""
    return len(server[1].state.host.resident()[0].llm.tokenizer.encode_chat(messages, tools=[WEATHER]))


CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
RESULT = "18 degrees Celsius and sunny"
# What the template must see for the history of one call and its result (Qwen's template: the call as a
# <tool_call> block with its arguments as JSON, the result as a <tool_response> in a user turn).
HISTORY = [*ASK, {"role": "assistant", "content": "", "tool_calls": [CALL]}, {"role": "tool", "content": RESULT}]


def test_ollama_history_with_tool_calls_goes_into_the_prompt(server, name):
    import ollama

    client = ollama.Client(host=server[0], timeout=120)
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    result = {"role": "tool", "content": RESULT, "tool_name": "get_weather"}
    with_calls = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]}, result]
    without = [*ASK, {"role": "assistant", "content": ""}, result]
    a = client.chat(model=name, messages=with_calls, tools=[WEATHER], options={"temperature": 0, "num_predict": 1})
    b = client.chat(model=name, messages=without, tools=[WEATHER], options={"temperature": 0, "num_predict": 1})
    # the call's tokens, exactly as the template renders it (the client re-serializes the tools its own way, so
    # the two requests are compared with each other): they were dropped before
    plain = [*ASK, {"role": "assistant", "content": ""}, {"role": "tool", "content": RESULT}]
    call_tokens = expected_prompt_tokens(server, HISTORY) - expected_prompt_tokens(server, plain)
    assert call_tokens > 10 and a.prompt_eval_count - b.prompt_eval_count == call_tokens


# -- litellm and LangChain ------------------------------------------------------------------------------------------


def test_litellm_ollama_chat_provider_gets_tool_calls(server, name, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of its price list
    import litellm

    r = litellm.completion(
        model=f"ollama_chat/{name}", api_base=server[0], messages=ASK, tools=[WEATHER], temperature=0, timeout=120
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    plain = litellm.completion(
        model=f"ollama_chat/{name}", api_base=server[0], messages=[{"role": "user", "content": "Say hi."}], max_tokens=8
    )
    assert plain.choices[0].message.content


def test_langchain_chat_ollama_bind_tools_streamed(server, name):
    from langchain_ollama import ChatOllama

    llm = ChatOllama(model=name, base_url=server[0], temperature=0).bind_tools([WEATHER])
    chunks = list(llm.stream(ASK[0]["content"]))
    whole = chunks[0]
    for c in chunks[1:]:
        whole = whole + c
    assert [(t["name"], t["args"]) for t in whole.tool_calls] == [("get_weather", {"city": "Paris"})]


def test_langchain_chat_openai_without_the_v1_prefix(server, name):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model=name, base_url=server[0], api_key="none", temperature=0, max_tokens=8)
    assert llm.invoke("Say hello.").content


# -- the openai SDK through a tool conversation ---------------------------------------------------------------------


def test_openai_two_turn_tool_conversation(server, name):
    """The call comes back as OpenAI's tool_calls; sent back in the history (arguments a JSON string, as the SDK
    sends them) with a scripted result, it reaches the template as the object the template expects. (Greedy,
    qwen2.5-coder 0.5B and 1.5B then call the tool again rather than answer, with this prompt exactly: the
    template's own rendering, checked here token for token; the string form made them repeat it until the
    length limit.)"""
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)
    first = client.chat.completions.create(model=name, messages=ASK, tools=[WEATHER], temperature=0)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert isinstance(call.function.arguments, str) and call.id
    history = [
        *ASK,
        choice.message.model_dump(exclude_none=True),  # arguments as OpenAI sends them: a JSON string
        {"role": "tool", "tool_call_id": call.id, "content": RESULT},
    ]
    second = client.chat.completions.create(model=name, messages=history, tools=[WEATHER], temperature=0, max_tokens=24)
    assert second.usage.prompt_tokens == expected_prompt_tokens(server, HISTORY)
    assert second.choices[0].finish_reason in ("stop", "tool_calls", "length")


def test_routes_answer_without_the_v1_prefix_and_unknown_models_get_the_default(server, name):
    client = openai.OpenAI(base_url=server[0], api_key="none", max_retries=0, timeout=120)  # a bare base URL
    assert name in [m.id for m in client.models.list().data]
    r = client.chat.completions.create(
        model="gpt-3.5-turbo", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    assert r.model == name and r.choices[0].message.content is not None  # served by the default, and said so
    r = client.completions.create(model="gpt-3.5-turbo-instruct", prompt="def add(a, b):", max_tokens=4)
    assert r.model == name and r.choices[0].text


# -- what is refused, and what other servers accept -----------------------------------------------------------------


def test_input_the_model_cannot_see_is_refused_naming_it(server, name):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    cases = [
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}]},
            "messages[0].content[1]",
        ),
        (
            "/api/chat",
            {"model": name, "messages": [{"role": "user", "content": "What is it?", "images": ["iVBORw0KGgo="]}]},
            "messages[0].images",
        ),
        (
            "/api/chat",
            {"model": name, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
            "messages[0].content",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ("/api/chat", {"model": name, "messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
        ("/infill", {"input_prefix": "x", "input_extra": [{"name": "a.py", "content": "x"}]}, "input_extra[0]"),
        ("/v1/chat/completions", {"messages": ASK, "tools": [WEATHER], "tool_choice": "required"}, "tool_choice"),
        (
            "/v1/chat/completions",
            {
                "messages": ASK,
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            },
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {"id": "1", "type": "function", "function": {"name": "get_weather", "arguments": "{oops"}}
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0].function.arguments",
        ),
    ]
    for path, body, param in cases:
        r = post(server, path, json=body)
        assert r.status_code == 400, (path, body, r.text)
        err = r.json()["error"]
        message = err if isinstance(err, str) else err["message"]
        assert param in message, (param, message)
        if not isinstance(err, str):
            assert err["param"] == param


def test_values_other_servers_accept(server, name):
    r = post(server, "/v1/chat/completions", json={"messages": ASK, "seed": -1, "max_tokens": 3, "temperature": 0.7})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
    r = post(server, "/v1/chat/completions", json={"messages": ASK, "max_tokens": 0})
    j = r.json()
    assert r.status_code == 200 and j["choices"][0]["message"]["content"] == ""
    assert j["choices"][0]["finish_reason"] == "length" and j["usage"]["completion_tokens"] == 0
    assert j["usage"]["prompt_tokens"] > 5
    r = post(server, "/api/chat", json={"model": name, "messages": []})  # Ollama's documented "load the model"
    assert r.status_code == 200 and r.json()["done_reason"] == "load"


# -- streaming with tools -------------------------------------------------------------------------------------------


def test_with_tools_a_code_reply_streams_before_it_ends(server):
    """A reply that opens a code block used to arrive as one chunk at its end when the request had tools."""
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)
    ask = [{"role": "user", "content": "Write a Python function that adds two numbers. Reply with a code block only."}]
    arrivals = []
    t0 = time.perf_counter()
    for chunk in client.chat.completions.create(
        model="any", messages=ask, tools=[WEATHER], temperature=0, max_tokens=60, stream=True
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append((time.perf_counter() - t0, chunk.choices[0].delta.content))
    text = "".join(t for _, t in arrivals)
    assert text.lstrip().startswith("```"), text
    assert len(arrivals) > 10 and arrivals[0][0] < arrivals[-1][0] / 2, arrivals[:3]
