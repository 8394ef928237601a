"""`localllm serve` live on loopback: the real openai client and httpx against the app, on the smallest model
(and the 0.5B where fill-in-the-middle and tool calls need a code model)."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from conftest import model_file
from live_server import live_server

pytestmark = pytest.mark.model
SMOL = "smollm2-135m-instruct-q4_1"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
KEY = "test-key"


@pytest.fixture(scope="module")
def smol():
    with live_server(str(model_file(SMOL)), api_key=KEY) as (url, app):
        yield url, app


@pytest.fixture(scope="module")
def client(smol):
    return openai.OpenAI(base_url=smol[0] + "/v1", api_key=KEY, max_retries=0)


def http(smol) -> httpx.Client:
    return httpx.Client(base_url=smol[0], headers={"Authorization": f"Bearer {KEY}"}, timeout=60)


def pool(smol) -> dict:
    entry = smol[1].state.host.resident()[0]
    return entry.llm.pool_stats()


def wait_idle(smol, seconds: float = 10) -> dict:
    end = time.monotonic() + seconds
    while True:
        p = pool(smol)
        if (p["running"] == 0 and p["waiting"] == 0 and p["blocks_used"] == 0) or time.monotonic() > end:
            return p
        time.sleep(0.05)


MSG = [{"role": "user", "content": "Name three colours."}]


def test_models_list_the_served_model_with_its_contexts(client):
    models = client.models.list().data
    served = models[0]
    assert served.id.endswith(f"{SMOL}.gguf")
    assert served.model_extra["context_length"] == 2048
    assert served.model_extra["trained_context_length"] == 8192


def test_chat_streamed_and_whole_agree_and_a_second_turn_is_cached(client):
    whole = client.chat.completions.create(model=SMOL, messages=MSG, temperature=0, max_tokens=12)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 5
    parts, usage = [], None
    for chunk in client.chat.completions.create(
        model=SMOL, messages=MSG, temperature=0, max_tokens=12, stream=True, stream_options={"include_usage": True}
    ):
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
        else:
            usage = chunk.usage
    assert "".join(parts) == text
    assert usage.completion_tokens == whole.usage.completion_tokens
    follow = [*MSG, {"role": "assistant", "content": text}, {"role": "user", "content": "And three more."}]
    second = client.chat.completions.create(model=SMOL, messages=follow, temperature=0, max_tokens=4)
    assert second.usage.prompt_tokens_details.cached_tokens >= 16


def test_completions_stop_seed_and_logprobs(client):
    r = client.completions.create(model=SMOL, prompt="1, 2, 3, 4,", temperature=0, max_tokens=20, stop=[" 7"])
    assert r.choices[0].finish_reason == "stop" and " 7" not in r.choices[0].text and "5" in r.choices[0].text
    a, b = (
        client.completions.create(model=SMOL, prompt="Once upon a time", temperature=1.0, seed=42, max_tokens=12)
        for _ in range(2)
    )
    assert a.choices[0].text == b.choices[0].text
    lp = (
        client.chat.completions.create(
            model=SMOL, messages=MSG, temperature=0, max_tokens=3, logprobs=True, top_logprobs=3
        )
        .choices[0]
        .logprobs.content
    )
    assert len(lp) == 3
    for entry in lp:
        assert len(entry.top_logprobs) == 3 and entry.logprob <= 0
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)  # greedy takes the best token
    legacy = client.completions.create(model=SMOL, prompt="Hello", temperature=0, max_tokens=2, logprobs=2)
    assert len(legacy.choices[0].logprobs.token_logprobs) == 2


def test_errors_have_openai_shape_and_name_the_field(smol, client):
    with http(smol) as h:
        r = h.post("/v1/chat/completions", json={"messages": MSG, "temperature": -1})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
        r = h.post("/v1/chat/completions", json={"messages": "hi"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
        r = h.post("/v1/chat/completions", json={"model": "no-such-model", "messages": MSG})
        assert r.status_code == 404 and "no-such-model" in r.json()["error"]["message"]
        r = h.post("/v1/chat/completions", json={"messages": MSG, "n": 17})  # n choices: up to 16 (test_choices.py)
        assert r.status_code == 400 and r.json()["error"]["param"] == "n"
        r = h.post("/v1/completions", json={"prompt": "word " * 3000, "max_tokens": 4})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        r = h.post("/v1/chat/completions", json={"messages": MSG, "max_tokens": 5000})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
        r = h.get("/v1/nothing-here")
        assert r.status_code == 404 and set(r.json()["error"]) == {"message", "type", "param", "code"}
        r = h.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 400
        r = h.post("/v1/chat/completions", json={"messages": MSG, "unknown_field": 1, "max_tokens": 1})
        assert r.status_code == 200  # extra fields are ignored
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=SMOL, messages=MSG, top_p=0)


def test_the_key_is_required_except_for_health(smol):
    with httpx.Client(base_url=smol[0]) as h:
        assert h.get("/health").json() == {"status": "ok"}
        r = h.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert h.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert h.get("/api/tags", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def test_a_client_that_disconnects_mid_stream_frees_its_blocks(smol):
    with http(smol) as h:
        body = {"messages": MSG, "max_tokens": 400, "stream": True, "ignore_eos": True}
        with h.stream("POST", "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert all(line.startswith("data: ") or not line for line in got)
        # the connection is closed here, long before 400 tokens
        p = wait_idle(smol)
        assert p["blocks_used"] == 0 and p["running"] == 0
        metrics = h.get("/metrics").text
    assert "localllm_requests_cancelled_total" in metrics
    cancelled = next(line for line in metrics.splitlines() if line.startswith("localllm_requests_cancelled_total"))
    assert int(cancelled.split()[-1]) >= 1


def test_ollama_routes(smol):
    with http(smol) as h:
        tags = h.get("/api/tags").json()["models"]
        assert any(m["name"].endswith(f"{SMOL}.gguf") for m in tags)
        assert h.get("/api/version").json()["version"]
        r = h.post(
            "/api/generate",
            json={"model": SMOL, "prompt": "Hi", "stream": False, "options": {"temperature": 0, "num_predict": 4}},
        )
        j = r.json()
        assert r.status_code == 200 and j["done"] and j["eval_count"] <= 4 and j["response"]
        with h.stream(
            "POST", "/api/chat", json={"model": SMOL, "messages": MSG, "options": {"temperature": 0, "num_predict": 6}}
        ) as r:
            objs = [json.loads(line) for line in r.iter_lines() if line]
        assert objs[-1]["done"] and not any(o["done"] for o in objs[:-1])
        assert "".join(o["message"]["content"] for o in objs[:-1])
        r = h.post("/api/chat", json={"model": "no-such-model", "messages": MSG})
        assert r.status_code == 404 and isinstance(r.json()["error"], str)
        r = h.post("/api/generate", json={"model": SMOL, "prompt": "x", "options": {"temperature": -2}})
        assert r.status_code == 400 and "temperature" in r.json()["error"]


def counter(h: httpx.Client, name: str) -> int:
    line = next(x for x in h.get("/metrics").text.splitlines() if x.startswith(f"localllm_{name} "))
    return int(line.split()[-1])


REPEATS = "The cat sat on the mat.\n" * 4  # greedy continues the pattern: n-gram drafts get proposed and kept


def test_speculative_per_request_same_tokens_drafts_only_when_on(smol, client):
    with http(smol) as h:
        replies = {}
        for mode in ("off", "ngram"):
            before = counter(h, "draft_tokens_total")
            r = client.completions.create(
                model=SMOL, prompt=REPEATS, temperature=0, max_tokens=24, extra_body={"speculative": mode}
            )
            drafted = counter(h, "draft_tokens_total") - before
            d = r.usage.completion_tokens_details
            replies[mode] = r.choices[0].text
            if mode == "off":
                assert drafted == 0 and d.accepted_prediction_tokens == 0 and d.rejected_prediction_tokens == 0
            else:
                assert drafted == d.accepted_prediction_tokens + d.rejected_prediction_tokens
                assert d.accepted_prediction_tokens > 0
        assert replies["off"] == replies["ngram"] and r.usage.completion_tokens == 24
        streamed = {}
        for mode in ("off", "ngram"):
            body = {"model": SMOL, "prompt": REPEATS, "raw": True, "options": {"temperature": 0, "num_predict": 24}}
            body["options"]["speculative"] = mode
            before = counter(h, "draft_tokens_total")
            with h.stream("POST", "/api/generate", json=body) as resp:
                objs = [json.loads(line) for line in resp.iter_lines() if line]
            streamed[mode] = ("".join(o["response"] for o in objs), counter(h, "draft_tokens_total") - before)
        assert streamed["off"][0] == streamed["ngram"][0] == replies["off"]
        assert streamed["off"][1] == 0 and streamed["ngram"][1] > 0
        for stream in (False, True):
            r = h.post("/v1/chat/completions", json={"messages": MSG, "speculative": "eagle", "stream": stream})
            assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
            assert "'ngram'" in r.json()["error"]["message"]
            r = h.post("/v1/chat/completions", json={"messages": MSG, "speculative": "draft", "stream": stream})
            assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"  # no draft model here
            assert "draft model" in r.json()["error"]["message"]
            r = h.post("/v1/completions", json={"prompt": "x", "speculative": 3, "stream": stream})
            assert r.status_code == 400 and r.json()["error"]["param"] == "speculative"
            r = h.post(
                "/api/generate", json={"model": SMOL, "prompt": "x", "options": {"speculative": "on"}, "stream": stream}
            )
            assert r.status_code == 400 and "speculative" in r.json()["error"]


def test_tokenize_detokenize_metrics(smol):
    with http(smol) as h:
        ids = h.post("/tokenize", json={"content": "Hello world"}).json()["tokens"]
        assert h.post("/detokenize", json={"tokens": ids}).json()["content"] == "Hello world"
        assert h.post("/detokenize", json={"tokens": [10**9]}).status_code == 400
        text = h.get("/metrics").text
    for name in (
        "localllm_generation_tokens_total",
        "localllm_blocks_used",
        "localllm_time_to_first_token_seconds_bucket",
        "localllm_draft_tokens_total",
        "localllm_draft_accepted_tokens_total",
    ):
        assert name in text


def test_a_model_without_fim_tokens_refuses_a_suffix(client):
    with pytest.raises(openai.BadRequestError, match="fill-in-the-middle"):
        client.completions.create(model=SMOL, prompt="def f(", suffix="\n", max_tokens=4)


@pytest.fixture(scope="module")
def qwen():
    with live_server(str(model_file(QWEN))) as (url, app):
        yield url, app


def test_fill_in_the_middle_and_infill(qwen):
    c = openai.OpenAI(base_url=qwen[0] + "/v1", api_key="none", max_retries=0)
    r = c.completions.create(
        model=QWEN, prompt="def add(a, b):\n    return ", suffix="\n\nprint(add(1, 2))\n", temperature=0, max_tokens=8
    )
    assert r.choices[0].text.startswith("a + b")
    with httpx.Client(base_url=qwen[0], timeout=60) as h:
        j = h.post(
            "/infill",
            json={
                "input_prefix": "def add(a, b):\n",
                "prompt": "    return ",
                "input_suffix": "\n",
                "n_predict": 8,
                "temperature": 0,
                "input_extra": [{"filename": "util.py", "text": "X = 1\n"}],
            },
        ).json()
    assert j["content"].startswith("a + b") and j["tokens_predicted"] <= 8
    with httpx.Client(base_url=qwen[0], timeout=60) as h:
        body = {
            "input_prefix": "x = [1, 2, 3, 1, 2, 3, 1, 2, 3, ",
            "input_suffix": "]\n",
            "n_predict": 12,
            "temperature": 0,
        }
        off = h.post("/infill", json={**body, "speculative": "off"}).json()
        on = h.post("/infill", json={**body, "speculative": "ngram"}).json()
        bad = h.post("/infill", json={**body, "speculative": "eagle", "stream": True})
    assert off["content"] == on["content"] and off["timings"]["draft_n"] == 0 and on["timings"]["draft_n"] > 0
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "speculative"


def test_tool_calls_come_back_as_tool_calls(qwen):
    c = openai.OpenAI(base_url=qwen[0] + "/v1", api_key="none", max_retries=0)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    r = c.chat.completions.create(model=QWEN, messages=msgs, tools=tools, temperature=0, max_tokens=60)
    call = r.choices[0].message.tool_calls[0]
    assert r.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    deltas = [
        ch.choices[0].delta
        for ch in c.chat.completions.create(
            model=QWEN, messages=msgs, tools=tools, temperature=0, max_tokens=60, stream=True
        )
        if ch.choices
    ]
    streamed = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert streamed and streamed[0].function.name == "get_weather"
