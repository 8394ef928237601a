"""The model's tool calls out of its text: well-formed Hermes / Qwen blocks become calls, anything else stays text."""

from __future__ import annotations

import json

from localllm.server.tool_calls import ToolCallBuffer, parse_tool_calls

CALL = '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'


def test_blocks_become_calls_and_the_text_before_stays():
    content, calls = parse_tool_calls("Let me check.\n" + CALL + "\n" + CALL.replace('"x": 1', '"x": 2'))
    assert content == "Let me check."
    assert [json.loads(c["arguments"]) for c in calls] == [{"x": 1}, {"x": 2}] and calls[0]["name"] == "f"


def test_malformed_output_is_text():
    for text in (
        "<tool_call>{not json}</tool_call>",
        "<tool_call>[1, 2]</tool_call>",
        CALL + " trailing words",
        '<tool_call>{"name": "f"',
        '{"name": "g", "arguments": {}}',
    ):
        assert parse_tool_calls(text, {"f"}) == (text, [])


def test_a_bare_json_call_counts_only_for_a_declared_tool():
    bare = '```json\n{"name": "f", "arguments": {"x": 1}}\n```'
    assert parse_tool_calls(bare, {"f"})[1][0]["name"] == "f"
    assert parse_tool_calls(bare) == (bare, [])


def test_streaming_holds_back_from_the_first_tag():
    buf = ToolCallBuffer({"f"})
    shown = "".join(
        buf.push(p) for p in ["Sure", ". <tool", "_call>", '{"name": "f", "arguments": {}}', "</tool_call>"]
    )
    assert shown == "Sure. "
    assert buf.finish() == ("", [{"name": "f", "arguments": "{}"}])
    plain = ToolCallBuffer({"f"})
    assert "".join(plain.push(p) for p in ["a <", "b"]) + plain.finish()[0] == "a <b"
