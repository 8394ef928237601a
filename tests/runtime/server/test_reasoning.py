"""Reasoning kept out of content (server/reasoning.py): the splitter over every way a reply can be cut into deltas,
and through serve a reply that thinks (forced by a GBNF grammar, since the test models do not think on their own)
comes back with OpenAI's reasoning_content, whole and streamed."""

from __future__ import annotations

import openai
import pytest
from conftest import model_file
from hypothesis import given
from hypothesis import strategies as st
from live_server import live_server
from localllm.server.reasoning import ReasoningSplitter

CASES = [
    ("<think>\nLet me see.\n</think>\n\nParis.", False, "Let me see.\n", "Paris."),
    ("  <think>a</think>b", False, "a", "b"),
    ("No thinking here, <think> is a tag.", False, "", "No thinking here, <think> is a tag."),
    ("Let me see.\n</think>\n\nParis.", True, "Let me see.\n", "Paris."),  # the prompt opened it
    ("<think>never closed", False, "never closed", ""),
    ("<thi", False, "", "<thi"),  # a reply that only looked like the tag
    ("", False, "", ""),
]


def split_all(text: str, inside: bool, cuts: list[int]) -> tuple[str, str]:
    s = ReasoningSplitter(inside)
    r = c = ""
    prev = 0
    for cut in sorted(set(cuts)) + [len(text)]:
        dr, dc = s.push(text[prev:cut])
        r, c, prev = r + dr, c + dc, cut
    dr, dc = s.finish()
    return r + dr, c + dc


@pytest.mark.parametrize(("text", "inside", "reasoning", "content"), CASES)
def test_whole_replies_split(text, inside, reasoning, content):
    assert split_all(text, inside, []) == (reasoning, content)


@given(data=st.data())
def test_any_cut_into_deltas_splits_the_same(data):
    text, inside, reasoning, content = data.draw(st.sampled_from(CASES))
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=8))
    assert split_all(text, inside, cuts) == (reasoning, content)


QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"
THINKS = 'root ::= "<think>" [a-z ]{3,30} "</think>" "\\n\\n" ("yes" | "no")'


@pytest.fixture(scope="module")
def client():
    with live_server(str(model_file(QWEN)), parallel=2, host_kwargs={"fallback": True}) as (url, _app):
        yield openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


@pytest.mark.model
def test_reasoning_content_whole_and_streamed(client):
    ask = [{"role": "user", "content": "Is the sky blue? Think first."}]
    done = client.chat.completions.create(
        model="m", messages=ask, temperature=0, max_tokens=40, extra_body={"grammar": THINKS}
    )
    msg = done.choices[0].message
    assert msg.content in ("yes", "no"), msg
    assert msg.reasoning_content and "<think>" not in msg.reasoning_content, msg
    reasoning = content = ""
    for chunk in client.chat.completions.create(
        model="m", messages=ask, temperature=0, max_tokens=40, extra_body={"grammar": THINKS}, stream=True
    ):
        if chunk.choices:
            d = chunk.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    assert (reasoning, content) == (msg.reasoning_content, msg.content)
    flat = client.chat.completions.create(
        model="m",
        messages=ask,
        temperature=0,
        max_tokens=40,
        extra_body={"grammar": THINKS, "reasoning_format": "none"},
    )
    assert flat.choices[0].message.content.startswith("<think>")
