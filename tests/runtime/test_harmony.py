"""gpt-oss's harmony format (text/harmony.py, text/reasoning.py): the tokenizer renders the header markers and ends a
reply at <|return|> or <|call|>, not <|end|> (llama.cpp's vocab rules); the splitter turns the channels into
reasoning, content and tool calls, whatever the cut into deltas and token by token; the harmony template renders a
conversation with a tool call; and through serve, a harmony reply (forced by a grammar: the synthetic model's weights
are random) comes back apart in the OpenAI, Anthropic and Ollama shapes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import model_cache
from hypothesis import given
from hypothesis import strategies as st
from localllm.text.harmony import HarmonySplitter
from localllm.text.reasoning import ReasoningSplitter, reply_splitter
from localllm.text.tokenizer import Tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
from synthetic_arch import ARCHS, write

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
# (reply as the model writes it after the prompt's "<|start|>assistant", reasoning, content) in mode "split"
CASES = [
    (
        "<|channel|>analysis<|message|>The user greets.<|end|><|start|>assistant<|channel|>final<|message|>Hello!",
        "The user greets.",
        "Hello!",
    ),
    ("<|channel|>final<|message|>Just this.", "", "Just this."),
    (  # a preamble on the commentary channel is for the user; the call to a function comes out as a tool call
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary<|message|>"
        "Checking.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json"
        '<|message|>{"city": "Paris"}',
        "Need weather.",
        "Checking." + CALL,
    ),
    (  # the recipient after the channel, as gpt-oss also writes it
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}',
        "",
        CALL,
    ),
    ("<|channel|>analysis<|message|>cut off mid-thou", "cut off mid-thou", ""),  # max_tokens inside the analysis
    (  # a built-in tool serve does not run: dropped, as llama.cpp drops it
        '<|channel|>analysis<|message|>a<|end|><|start|>assistant to=browser.search<|channel|>commentary<|message|>{"q": 1}',
        "a",
        "",
    ),
    ("A model ignoring its format <|end|> says this.", "", "A model ignoring its format <|end|> says this."),
    ("to be or not", "", "to be or not"),  # starts like a recipient, is not one
    ("final answer: 4 < 5", "", "final answer: 4 < 5"),
    ("<|channel|>final<|message|>4 <| 5 and <|en", "", "4 <| 5 and <|en"),  # looked like markers, were not
    ("", "", ""),
]


def split_all(text: str, cuts: list[int], mode: str = "split") -> tuple[str, str]:
    s = HarmonySplitter(mode)
    r = c = ""
    prev = 0
    for cut in sorted(set(cuts)) + [len(text)]:
        dr, dc = s.push(text[prev:cut])
        r, c, prev = r + dr, c + dc, cut
    dr, dc = s.finish()
    return r + dr, c + dc


@pytest.mark.parametrize(("text", "reasoning", "content"), CASES)
def test_whole_replies_split(text, reasoning, content):
    assert split_all(text, []) == (reasoning, content)


@given(data=st.data())
def test_any_cut_into_deltas_splits_the_same(data):
    text = data.draw(st.sampled_from(CASES))[0]
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=10))
    mode = data.draw(st.sampled_from(["split", "raw", "hide"]))
    assert split_all(text, cuts, mode) == split_all(text, [], mode)


def test_a_call_without_tools_offered_is_dropped():
    s = HarmonySplitter(calls=False)
    (r1, c1), (r2, c2) = s.push(CASES[2][0]), s.finish()
    assert (r1 + r2, c1 + c2) == ("Need weather.", "Checking.")


def test_raw_keeps_the_analysis_in_content_and_hide_drops_it():
    text = CASES[0][0]
    raw = "<|channel|>analysis<|message|>The user greets.<|end|>Hello!"
    assert split_all(text, [], "raw") == ("", raw)
    assert split_all(text, [], "hide") == ("", "Hello!")
    with pytest.raises(ValueError, match="mode"):
        HarmonySplitter("none")


# -- the synthetic gpt-oss with harmony's tokens and template (models/synthetic_arch.py gpt-oss-chat) ----------------
@pytest.fixture(scope="module")
def harmony_model(tmp_path_factory) -> Path:
    src = model_cache() / f"{ARCHS['gpt-oss-chat']['tokenizer']}.gguf"
    if not src.exists():
        pytest.skip(f"the tokenizer's test model {src.name} is not fetched (models/fetch_test_models.py)")
    path = tmp_path_factory.mktemp("harmony") / "gpt-oss-chat.gguf"
    write(path, "gpt-oss-chat", tokenizer_from=src, wtype="Q8_0")
    return path


@pytest.fixture(scope="module")
def tok(harmony_model) -> Tokenizer:
    return Tokenizer.from_gguf(harmony_model)


def test_replies_end_at_return_and_call_and_the_markers_are_text(tok):
    names = {tok.tokens[i] for i in tok.stop_ids}
    assert {"<|return|>", "<|call|>"} <= names
    assert "<|end|>" not in names  # <|end|> ends a message, not the reply
    ids = tok.encode("<|channel|>final<|message|>Hi<|end|><|return|>", parse_special=True)
    assert tok.decode(ids) == "<|channel|>final<|message|>Hi<|end|>"  # rendered, as llama.cpp renders them
    assert len(ids) == 6  # each marker one token


def test_a_harmony_model_gets_the_harmony_splitter(tok, harmony_model):
    from conftest import model_file

    assert isinstance(reply_splitter(tok, [1]), HarmonySplitter)
    assert isinstance(reply_splitter(tok, [1], "raw"), HarmonySplitter)  # its channels are parsed in every mode
    qwen = Tokenizer.from_gguf(model_file("qwen2.5-coder-0.5b-instruct-q4_k_m"))
    assert isinstance(reply_splitter(qwen, [1]), ReasoningSplitter)
    assert reply_splitter(qwen, [1], "raw") is None


@pytest.mark.parametrize("case", range(4))
def test_a_reply_streamed_token_by_token_splits_as_whole(tok, case):
    text, reasoning, content = CASES[case]
    ids = tok.encode(text, parse_special=True)
    d, s = tok.detokenizer(), HarmonySplitter()
    r = c = ""
    for t in ids:
        dr, dc = s.push(d.push(t))
        r, c = r + dr, c + dc
    dr, dc = s.finish()
    assert (r + dr, c + dc) == (reasoning, content)


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_the_template_renders_a_tool_turn_in_harmony(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "Need the weather.",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    text = tok.decode(tok.encode_chat(messages, tools=[WEATHER], reasoning_effort="high"), special=True)
    assert text.startswith("<|start|>system<|message|>")
    assert "Reasoning: high\n" in text
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n" in text
    assert text.endswith(
        "<|start|>user<|message|>Weather in Paris?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
        '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>'
        '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>'
        "<|start|>assistant"
    )


# -- through serve --------------------------------------------------------------------------------------------------
THINKS = (
    'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,20} "<|end|><|start|>assistant<|channel|>final<|message|>" '
    '("yes" | "no")'
)
CALLS = (
    'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,20} "<|end|><|start|>assistant to=functions.get_weather'
    '<|channel|>commentary json<|message|>{\\"city\\": \\"Paris\\"}"'
)


@pytest.fixture(scope="module")
def server(harmony_model):
    sys.path.insert(0, str(Path(__file__).resolve().parent / "server"))
    from live_server import live_server

    with live_server(str(harmony_model), parallel=2, host_kwargs={"fallback": True}) as (url, _app):
        yield url


@pytest.mark.model
def test_openai_chat_returns_reasoning_content_and_tool_calls(server):
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    ask = [{"role": "user", "content": "Is the sky blue?"}]
    done = client.chat.completions.create(
        model="m", messages=ask, temperature=0, max_tokens=60, extra_body={"grammar": THINKS}
    )
    msg = done.choices[0].message
    assert msg.content in ("yes", "no"), msg
    assert msg.reasoning_content and "<|" not in msg.reasoning_content, msg
    assert done.choices[0].finish_reason == "stop"
    reasoning = content = ""
    for chunk in client.chat.completions.create(
        model="m", messages=ask, temperature=0, max_tokens=60, extra_body={"grammar": THINKS}, stream=True
    ):
        if chunk.choices:
            d = chunk.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    assert (reasoning, content) == (msg.reasoning_content, msg.content)

    call = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
        temperature=0,
        max_tokens=80,
        extra_body={"grammar": CALLS},
    )
    choice = call.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    unasked = client.chat.completions.create(  # the same call with no tools offered: dropped, as llama.cpp drops it
        model="m",
        messages=[{"role": "user", "content": "Weather?"}],
        temperature=0,
        max_tokens=80,
        extra_body={"grammar": CALLS},
    ).choices[0]
    assert unasked.finish_reason == "stop" and not unasked.message.tool_calls and not unasked.message.content
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert choice.message.reasoning_content


@pytest.mark.model
def test_anthropic_gets_thinking_blocks(server):
    anthropic = pytest.importorskip("anthropic", reason="the anthropic SDK is not installed")

    ask = [{"role": "user", "content": "Is the sky blue?"}]
    a = anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)
    reply = a.messages.create(model="m", max_tokens=60, messages=ask, extra_body={"grammar": THINKS, "temperature": 0})
    kinds = [b.type for b in reply.content]
    assert kinds == ["thinking", "text"], reply
    assert reply.content[1].text in ("yes", "no")


@pytest.mark.model
def test_an_ollama_history_keeps_the_thinking_before_a_call(server, tok):
    import ollama

    history = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "Need the weather.",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]
    client = ollama.Client(host=server)

    def prompt_tokens(messages) -> int:
        options = {"temperature": 0, "num_predict": 1}
        return client.chat(
            model="m", messages=messages, tools=[WEATHER], think="high", options=options
        ).prompt_eval_count

    without = [history[0], {**history[1], "thinking": None}, history[2]]
    kept = "<|start|>assistant<|channel|>analysis<|message|>Need the weather.<|end|>"
    assert prompt_tokens(history) - prompt_tokens(without) == len(tok.encode(kept, parse_special=True))


@pytest.mark.model
def test_llm_chat_gives_reasoning_apart_in_every_mode(harmony_model):
    from localllm.engine.constraint import Grammar
    from localllm.llm import LLM

    ask = [{"role": "user", "content": "Is the sky blue?"}]
    with LLM(str(harmony_model), n_threads=2, ctx_size=512) as llm:

        def reply(mode):
            chunks = list(llm.chat(ask, grammar=Grammar.gbnf(THINKS), temperature=0, max_tokens=60, reasoning=mode))
            return "".join(c.reasoning for c in chunks), "".join(c.text for c in chunks), chunks[-1].finish_reason

        reasoning, text, finish = reply("split")
        assert text in ("yes", "no") and finish == "stop"
        assert reasoning and "<|" not in reasoning
        assert reply("hide") == ("", text, "stop")
        raw = f"<|channel|>analysis<|message|>{reasoning}<|end|>{text}"
        assert reply("raw") == ("", raw, "stop")
        with pytest.raises(ValueError, match="reasoning must be one of"):
            llm.chat(ask, reasoning="none")


def test_run_writes_reasoning_to_stderr_and_the_answer_to_stdout(monkeypatch, capsys):
    from localllm.cli import main
    from localllm.engine import Chunk

    class Thinker:  # LLM.chat's shape: reasoning and text apart
        tokenizer = type("T", (), {"chat_template": type("C", (), {"is_fallback": False})()})()
        ctx_size = 512

        def __init__(self, *a, **k):
            self.modes = []

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def chat(self, messages, params=None, reasoning="split"):
            hide = reasoning == "hide"
            return iter([Chunk("", [1], reasoning="" if hide else "hmm"), Chunk("yes", [2], "stop")])

    monkeypatch.setattr("localllm.llm.LLM", Thinker)
    monkeypatch.setattr("localllm.hub.resolve_model", lambda name, pull=False: name)
    assert main(["run", "m.gguf", "Is it?"]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("yes\n", "hmm\n")
    assert main(["run", "m.gguf", "Is it?", "--hide-thinking"]) == 0
    assert capsys.readouterr() == ("yes\n", "")
