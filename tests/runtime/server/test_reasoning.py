"""Reasoning kept out of content (text/reasoning.py): the splitter over every way a reply can be cut into deltas,
and through serve a reply that thinks (forced by a GBNF grammar, since the test models do not think on their own)
comes back with OpenAI's reasoning_content, whole and streamed."""

from __future__ import annotations

import openai
import pytest
from conftest import model_file
from hypothesis import given
from hypothesis import strategies as st
from live_server import live_server
from localllm.text.reasoning import ReasoningSplitter

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


@pytest.mark.model
def test_anthropic_thinking_blocks_whole_and_streamed(client):
    anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK (a test extra) is not installed")
    a = anthropic.Anthropic(base_url=str(client.base_url).removesuffix("/v1/"), api_key="none", max_retries=0)
    ask = [{"role": "user", "content": "Is the sky blue? Think first."}]
    extra = {"grammar": THINKS, "temperature": 0}
    msg = a.messages.create(model="m", max_tokens=40, messages=ask, extra_body=extra)
    assert [b.type for b in msg.content] == ["thinking", "text"], msg
    assert msg.content[1].text in ("yes", "no") and msg.content[0].thinking
    with a.messages.stream(model="m", max_tokens=40, messages=ask, extra_body=extra) as s:
        final = s.get_final_message()
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in final.content] == [
        (b.type, getattr(b, "thinking", None) or getattr(b, "text", None)) for b in msg.content
    ]


@pytest.mark.model
def test_responses_reasoning_item_whole_and_streamed(client):
    extra = {"grammar": THINKS}
    r = client.responses.create(model="m", input="Is the sky blue? Think first.", temperature=0, extra_body=extra)
    assert [o.type for o in r.output] == ["reasoning", "message"], r.output
    assert r.output[0].content[0].text and r.output_text in ("yes", "no")
    kinds, final = [], None
    for e in client.responses.create(
        model="m", input="Is the sky blue? Think first.", temperature=0, extra_body=extra, stream=True
    ):
        kinds.append(e.type)
        if e.type == "response.completed":
            final = e.response
    assert "response.reasoning_text.delta" in kinds and kinds.index("response.reasoning_text.done") < kinds.index(
        "response.output_text.delta"
    )
    assert final.output[0].content[0].text == r.output[0].content[0].text and final.output_text == r.output_text
