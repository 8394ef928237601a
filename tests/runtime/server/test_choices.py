"""Usage details other servers give (issue 35): n > 1 choices decoded together (whole and streamed, seeds seed,
seed + 1, ...), logit_bias, and their refusals, with the openai SDK against a live server on qwen2.5-coder-0.5b."""

from __future__ import annotations

import httpx
import openai
import pytest
from conftest import model_file
from live_server import live_server

pytestmark = pytest.mark.model
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
ASK = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def server():
    with live_server(str(model_file(QWEN)), parallel=4, host_kwargs={"fallback": True}) as (url, _app):
        yield url


def client(url) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_n_choices_are_seeded_apart_and_reproducible(server):
    kw = {"model": "m", "messages": ASK, "n": 3, "temperature": 1.2, "seed": 7, "max_tokens": 12}
    a = client(server).chat.completions.create(**kw)
    b = client(server).chat.completions.create(**kw)
    texts = [c.message.content for c in a.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in b.choices]  # seeds 7, 8, 9 each time
    assert len(set(texts)) > 1, texts
    one = client(server).chat.completions.create(**{**kw, "n": 1, "seed": 8})
    assert one.choices[0].message.content == texts[1]
    per = [client(server).chat.completions.create(**{**kw, "n": 1, "seed": 7 + i}).usage for i in range(3)]
    assert a.usage.completion_tokens == sum(u.completion_tokens for u in per)
    assert a.usage.prompt_tokens == per[0].prompt_tokens


def test_n_choices_stream_with_their_indices(server):
    seen: dict[int, str] = {}
    finished = set()
    stream = client(server).completions.create(
        model="m",
        prompt="def add(a, b):",
        n=2,
        temperature=0,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = None
    for chunk in stream:
        for c in chunk.choices:
            seen[c.index] = seen.get(c.index, "") + c.text
            if c.finish_reason:
                finished.add(c.index)
        usage = chunk.usage or usage
    assert set(seen) == {0, 1} == finished
    assert seen[0] == seen[1]  # greedy: the same text twice
    assert usage is not None and usage.completion_tokens == 16


def test_logit_bias_bans_and_forces_tokens(server):
    c = client(server)
    plain = c.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=1, logprobs=0)
    first = plain.choices[0].text
    tok = httpx.post(server + "/tokenize", json={"content": first}).json()["tokens"]
    banned = c.completions.create(
        model="m", prompt="The capital of France is", temperature=0, max_tokens=1, logit_bias={str(tok[0]): -100}
    )
    assert banned.choices[0].text != first
    forced = c.completions.create(
        model="m", prompt="The capital of France is", temperature=0, max_tokens=3, logit_bias={"17": 100}
    )
    assert forced.choices[0].text == "222"  # token 17 is "2" in Qwen's vocabulary, every time


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"n": 0}, "n"),
        ({"n": 99}, "n"),
        ({"logit_bias": {"abc": 1}}, "logit_bias"),
        ({"logit_bias": {"999999": 1}}, "logit_bias"),
    ],
)
def test_refusals_name_the_field(server, body, param):
    r = httpx.post(server + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, **body}, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text
