"""`serve` under hostile and heavy traffic: request bodies fuzzed from the app's own OpenAPI schema never get a
5xx and every error has its documented shape; 32 streaming clients, a quarter of them hanging up at random,
leave every stream well-formed and the KV pool with nothing but cached blocks."""

from __future__ import annotations

import contextlib
import json
import random
import threading

import httpx
import pytest
from conftest import model_file
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from live_server import live_server

pytestmark = pytest.mark.model
SMOL = "smollm2-135m-instruct-q4_1"
SMALL_INTS = ("max_tokens", "max_completion_tokens", "num_predict", "n_predict", "top_logprobs", "logprobs", "n")


@pytest.fixture(scope="module")
def server():
    # a small context bounds every fuzzed request's work
    with live_server(str(model_file(SMOL)), ctx_size=128, parallel=4) as (url, app):
        yield url, app


def _json_values(depth: int = 2):
    leaves = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=20)
    )
    if depth == 0:
        return leaves
    inner = _json_values(depth - 1)
    return st.one_of(leaves, st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3))


def _text(min_size: int, max_size: int):
    return st.text(st.characters(codec="utf-8"), min_size=min_size, max_size=max_size)


def _options():
    return st.fixed_dictionaries(
        {}, optional={"temperature": st.floats(0, 2), "num_predict": st.integers(1, 6), "seed": st.integers(0, 99)}
    )


# Clean values: valid by construction, so a clean body reaches the engine (or a refusal about the model itself, such
# as /infill on a model without fill-in-the-middle tokens). A field not named here is left out of a clean body.
CLEAN = {
    "model": st.just(SMOL),
    "prompt": _text(1, 40),
    "input": _text(1, 40),
    "content": _text(0, 40),
    "tokens": st.lists(st.integers(0, 1000), max_size=5),
    "max_tokens": st.integers(1, 6),
    "max_completion_tokens": st.integers(1, 6),
    "n_predict": st.integers(1, 6),
    "n": st.just(1),
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0.05, 1),
    "top_k": st.integers(0, 50),
    "min_p": st.floats(0, 1),
    "seed": st.integers(0, 2**31 - 1),
    "repeat_penalty": st.floats(0.5, 2),
    "repetition_penalty": st.floats(0.5, 2),
    "frequency_penalty": st.floats(-2, 2),
    "presence_penalty": st.floats(-2, 2),
    "stop": st.lists(_text(1, 4), max_size=2),
    "echo": st.booleans(),
    "options": _options(),
}
# what a valid body may still be refused for: the model has no FIM tokens; a prompt (bytes of rare characters take a
# token each) or a text to embed (not truncated on /v1/embeddings) longer than the context of 128
MODEL_LIMITS = ("has no fill-in-the-middle tokens", "exceed the context size", "do not fit the context")
# fields a route cannot do without although its schema leaves them optional (a prompt to complete, a text to embed)
NEEDED = ("model", "messages", "prompt", "input", "content", "tokens")


def _clean(path: str, name: str):
    if name == "messages":
        anthropic = path.startswith("/v1/messages")
        role = st.sampled_from(["user", "assistant"] if anthropic else ["user", "system", "assistant"])
        first = st.fixed_dictionaries({"role": st.just("user"), "content": _text(1, 30)})
        rest = st.lists(st.fixed_dictionaries({"role": role, "content": _text(1, 30)}), max_size=2)
        return st.tuples(first, rest).map(lambda fr: [fr[0], *fr[1]])
    if name not in CLEAN:
        raise KeyError(f"{path} requires {name!r}: give it a clean value in CLEAN")
    return CLEAN[name]


def _value(name: str, schema: dict):
    """A value of the declared type, or sometimes anything at all."""
    if name in SMALL_INTS:
        typed = st.integers(-3, 6)
    elif name == "messages":
        role = st.sampled_from(["user", "system", "tool", "bogus"])
        typed = st.lists(st.fixed_dictionaries({"role": role, "content": st.text(max_size=30)}), max_size=3)
    elif name in ("prompt", "content", "input_prefix", "input_suffix", "suffix", "system"):
        typed = st.text(max_size=40)
    elif name == "model":
        typed = st.sampled_from([None, SMOL, "nope", ""])
    elif name == "stop":
        typed = st.text(max_size=4)
    elif name == "tokens":
        typed = st.lists(st.integers(-5, 10**6), max_size=5)
    else:
        kinds = {s.get("type") for s in schema.get("anyOf", [schema])}
        typed = st.one_of(
            *(
                {
                    "number": st.floats(-3, 3),
                    "integer": st.integers(-3, 300),
                    "boolean": st.booleans(),
                    "string": st.text(max_size=10),
                    "array": st.lists(st.text(max_size=5), max_size=2),
                }.get(k, st.none())
                for k in kinds
            )
        )
    return st.one_of(typed, typed, typed, _json_values())


def _body(path: str, props: dict, required: tuple, clean: bool):
    if clean:
        need = {k: _clean(path, k) for k in props if k in required or k in NEEDED}
        rest = {k: _clean(path, k) for k in props if k not in need and k in CLEAN}
        body = st.fixed_dictionaries(need, optional=rest)
    else:
        body = st.fixed_dictionaries({}, optional={k: _value(k, v) for k, v in props.items()})
    return st.tuples(st.just(path), body.map(lambda d: {**d, "stream": d.get("stream") is True}), st.just(clean))


def _bodies(spec: dict):
    routes = []
    for path, ops in spec["paths"].items():
        post = ops.get("post")
        if not post or "requestBody" not in post:
            continue
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
        schema = spec["components"]["schemas"][ref]
        routes.append((path, schema.get("properties", {}), tuple(schema.get("required", ()))))
    # half of the bodies fuzzed, half clean (the clean ones are what reaches the engine)
    return st.tuples(st.sampled_from(routes), st.booleans()).flatmap(lambda rc: _body(*rc[0], clean=rc[1]))


def _check_error_shape(path: str, r: httpx.Response) -> None:
    body = r.json()
    if path.startswith("/api/"):
        assert isinstance(body["error"], str) and body["error"]
    elif path.startswith("/v1/messages"):  # Anthropic's shape
        assert body["type"] == "error" and {"type", "message"} <= set(body["error"]) and body["error"]["message"]
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["message"]


def test_fuzzed_bodies_never_get_a_5xx(server):
    url, app = server
    spec = httpx.get(url + "/openapi.json").json()
    client = httpx.Client(base_url=url, timeout=60)
    outcomes: list[bool] = []

    # Half of the bodies are clean (valid by construction) and each of those is checked to be served, so the count
    # below holds whatever the draw (random draws served 35-51 of 100; when most bodies were fuzzed, 7-25). Derandomized
    # so that a failure shows again on the next run of the same code.
    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(_bodies(spec))
    def check(case):
        path, body, clean = case
        try:
            content = json.dumps(body, allow_nan=True)
        except (TypeError, ValueError):
            return
        r = client.post(path, content=content, headers={"content-type": "application/json"})
        outcomes.append(r.status_code < 400)
        assert r.status_code < 500, (path, body, r.text)
        # a clean body is served, or refused for what the model cannot do (no fill-in-the-middle tokens, a context
        # of 128), never by a validator
        assert not clean or r.status_code < 400 or any(m in r.text for m in MODEL_LIMITS), (path, body, r.text)
        if r.status_code >= 400:
            _check_error_shape(path, r)

    try:
        check()
    finally:
        client.close()
    assert sum(outcomes) >= 10, sum(outcomes)  # the fuzz reaches the engine, not only the validators
    stats = app.state.host.resident()[0].llm.pool_stats()
    assert stats["blocks_used"] == 0 and stats["running"] == 0


def test_many_streaming_clients_some_hanging_up(server):
    url, app = server
    rng = random.Random(7)
    plans = [rng.random() < 0.25 for _ in range(32)]  # True: hang up after a few events
    problems: list[str] = []

    def client(i: int, hang_up: bool) -> None:
        body = {
            "messages": [{"role": "user", "content": f"Count to {i}."}],
            "max_tokens": 12,
            "stream": True,
            "temperature": 0.7,
            "seed": i,
        }
        try:
            with httpx.Client(base_url=url, timeout=120) as h, h.stream("POST", "/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    problems.append(f"{i}: status {r.status_code}")
                    return
                events = []
                for line in r.iter_lines():
                    if not line:
                        continue
                    events.append(line)
                    if hang_up and len(events) >= 3:
                        return
                if events[-1] != "data: [DONE]":
                    problems.append(f"{i}: no [DONE]")
                chunks = [json.loads(e[6:]) for e in events[:-1]]
                if chunks[-1]["choices"][0]["finish_reason"] not in ("stop", "length"):
                    problems.append(f"{i}: bad finish {chunks[-1]}")
        except Exception as e:
            problems.append(f"{i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client, args=(i, h)) for i, h in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not problems
    import time

    end = time.monotonic() + 10
    while True:
        stats = app.state.host.resident()[0].llm.pool_stats()
        if stats["blocks_used"] == 0 or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert stats == {**stats, "running": 0, "waiting": 0, "blocks_used": 0}


def test_a_full_queue_is_503_with_retry_after_and_a_large_body_413():
    host, app_kwargs = {"max_queue": 1}, {"max_body_bytes": 4096, "cors_origins": ["http://localhost:3000"]}
    with (
        live_server(str(model_file(SMOL)), host_kwargs=host, app_kwargs=app_kwargs, ctx_size=512) as (url, _app),
        httpx.Client(base_url=url, timeout=60) as h,
    ):
        body = {
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 400,
            "stream": True,
            "ignore_eos": True,
        }
        with h.stream("POST", "/v1/chat/completions", json=body) as first:
            lines = first.iter_lines()  # kept: a dropped iterator closes the response (a disconnect)
            next(lines)
            r = h.post("/v1/chat/completions", json={**body, "stream": False})
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["type"] == "server_busy"
        r = h.post("/v1/completions", json={"prompt": "x" * 5000})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        chunked = (part for part in [b'{"prompt": "', b"x" * 5000, b'"}'])  # no content-length: counted as it comes
        r = h.post("/v1/completions", content=chunked, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        r = h.post("/api/generate", content=iter([b'{"model": "x", "prompt": "', b"y" * 5000, b'"}']))
        assert r.status_code == 413 and "larger than 4096 bytes" in r.json()["error"]
        pre = h.options(
            "/v1/models", headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "GET"}
        )
        assert pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = h.get("/v1/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers


def _in_flight(app) -> int:
    return sum(e.in_flight for e in app.state.host.resident())


@pytest.mark.parametrize(
    "route,body",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "stream": True}),
        ("/api/generate", {"prompt": "Hi", "stream": True, "options": {"num_predict": 40}}),
    ],
)
def test_a_client_gone_before_the_stream_starts_releases_the_model(server, route, body):
    """The response of a streaming request is called after its client has gone: sending the headers fails, so
    the body is never iterated (an async generator that never started runs no finally). The model's lease (the
    in-flight count behind the 503 limit and idle unloading) and the engine request must end all the same."""
    import asyncio
    import time

    url, app = server
    httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 1}, timeout=60)  # the server's loop
    payload = json.dumps({"model": str(model_file(SMOL)), **body}).encode()
    sends = []

    async def call():
        got = False

        async def receive():
            nonlocal got
            if not got:
                got = True
                return {"type": "http.request", "body": payload, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            sends.append((message["type"], message.get("status")))
            if message["type"] == "http.response.start":
                raise OSError("the client has gone")

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": route,
            "raw_path": route.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        with contextlib.suppress(Exception):
            await app(scope, receive, send)

    asyncio.run_coroutine_threadsafe(call(), app.state.host._loop).result(60)
    assert sends == [("http.response.start", 200)]  # the headers failed: the body was never read
    llm = app.state.host.resident()[0].llm
    end = time.monotonic() + 20
    while time.monotonic() < end:
        p = llm.pool_stats()
        if _in_flight(app) == 0 and p["running"] == 0 and p["waiting"] == 0 and p["blocks_used"] == 0:
            break
        time.sleep(0.05)
    assert _in_flight(app) == 0, f"{route}: the lease is still held"
    p = llm.pool_stats()
    assert p["running"] == 0 and p["waiting"] == 0 and p["blocks_used"] == 0, p
