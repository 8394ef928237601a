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


def test_a_reply_that_cannot_be_a_bare_call_streams_at_once():
    """Issue 33 item 5: with tools, a reply opening with a code fence or `{` was held to its end. A fence now streams
    as it comes (nothing is retracted); `{` and what follows a fence are held only while they may still be a bare
    JSON call naming a tool."""
    code = ToolCallBuffer({"weather"})
    assert code.push("``") == "" and code.push("`py") == "```py"
    assert code.push("thon\nx = 1\n") == "thon\nx = 1\n"
    other = ToolCallBuffer({"weather"})
    assert other.push('{"na') == "" and other.push('me": "wea') == ""  # still a call's prefix
    assert other.push('ther", "arguments": {"city": "Paris"}}') == ""  # a call: held to the end and parsed
    assert other.finish() == ("", [{"name": "weather", "arguments": '{"city": "Paris"}'}])
    data = ToolCallBuffer({"weather"})
    assert data.push('{"na') == "" and data.push('me": "Bob", "age": 3}') == '{"name": "Bob", "age": 3}'
    fenced = ToolCallBuffer({"weather"})
    assert (
        fenced.push("```") == "```"
        and fenced.push("json\n") == "json\n"
        and fenced.push('{"city": 1}') == '{"city": 1}'
    )
    call = ToolCallBuffer({"weather"})
    assert call.push("```json\n") == "```json\n"  # shown: a fenced call keeps its fence in the content
    assert call.push('{ "name" : "weather", "arguments": {}}\n```') == ""
    assert call.finish() == ("", [{"name": "weather", "arguments": "{}"}])
    prose = ToolCallBuffer({"weather"})
    assert prose.push("  ") == "" and prose.push("It is") == "  It is"
