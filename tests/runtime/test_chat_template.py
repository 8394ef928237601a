"""Chat templates: the real models' templates against llama.cpp's reference, HF's environment, clear errors."""

from __future__ import annotations

import json
import warnings
from datetime import datetime

import pytest
from conftest import model_file, reference
from localllm.model.gguf import GGUFFile
from localllm.text.chat_template import CHATML, ChatTemplate, ChatTemplateError

CHAT_MODELS = ["smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"]
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]


def model_template(name: str) -> ChatTemplate:
    path = model_file(name)
    with GGUFFile(path) as f:
        source = f.metadata["tokenizer.chat_template"]
    return ChatTemplate(source, model=str(path), eos_token="<|im_end|>")


def tmpl(source: str, **kw) -> ChatTemplate:
    return ChatTemplate(source, model="test-model.gguf", **kw)


@pytest.mark.parametrize("name", CHAT_MODELS)
def test_reference_render(name):
    chat = reference(name)["chat"]
    assert model_template(name).render(chat["messages"], add_generation_prompt=True) == chat["rendered"]


def test_qwen_without_system_and_without_generation_prompt():
    t = model_template("qwen2.5-coder-0.5b-instruct-q4_k_m")
    out = t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert out == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )


def test_qwen_tools_use_hf_tojson():
    t = model_template("qwen2.5-coder-0.5b-instruct-q4_k_m")
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Température <°C> & vent",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    out = t.render([{"role": "user", "content": "Weather?"}], tools=[tool])
    assert "<tools>\n" + json.dumps(tool, ensure_ascii=False) + "\n</tools>" in out  # no HTML escaping, UTF-8 kept
    assert out.endswith("<|im_start|>assistant\n")
    assert "<tools>" not in t.render([{"role": "user", "content": "Weather?"}])


def test_qwen_tool_call_round():
    t = model_template("qwen2.5-coder-0.5b-instruct-q4_k_m")
    msgs = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    out = t.render(msgs)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in out
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>" in out


def test_chatml_fallback_warns():
    with pytest.warns(UserWarning, match="no-template.gguf.*ChatML"):
        t = ChatTemplate(None, model="no-template.gguf")
    assert t.is_fallback and t.source == CHATML
    assert t.render(MESSAGES) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert t.end_of_turn() == "<|im_end|>\n"


def test_syntax_error_at_load_names_the_model():
    with pytest.raises(
        ChatTemplateError,
        match=r"test-model.gguf: tokenizer.chat_template has a syntax error "
        r"at line 2",
    ):
        tmpl("{% for m in messages %}\n{{ m.content }\n{% endfor %}")


def test_raise_exception_names_the_model():
    t = tmpl(
        "{% if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with user') }}{% endif %}ok"
    )
    assert t.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(ChatTemplateError, match="test-model.gguf.*Conversations must start with user"):
        t.render(MESSAGES)


@pytest.mark.parametrize("messages", ["hello", [{"content": "no role"}], ["not a dict"], None, 5])
def test_bad_messages(messages):
    with pytest.raises(ChatTemplateError, match="test-model.gguf"):
        tmpl(CHATML).render(messages)


def test_render_errors_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match="test-model.gguf"):
        tmpl("{{ messages[0].content + 1 }}").render(MESSAGES)
    with pytest.raises(ChatTemplateError, match="test-model.gguf"):  # list content in ChatML: str + list
        tmpl(CHATML).render([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])


def test_sandbox_is_immutable():
    with pytest.raises(ChatTemplateError, match="test-model.gguf"):
        tmpl("{{ messages.append(1) }}").render(MESSAGES)
    with pytest.raises(ChatTemplateError):
        tmpl("{{ ''.__class__.__mro__[1].__subclasses__() }}").render(MESSAGES)


def test_tojson_options():
    t = tmpl(
        "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(sort_keys=true) }}|"
        "{{ x | tojson(separators=(',', ':')) }}"
    )
    x = {"b": "é<&>", "a": [1, None, True]}
    out = t.render(MESSAGES, x=x).split("|")
    assert out == [
        json.dumps(x, ensure_ascii=False),
        json.dumps(x, ensure_ascii=False, indent=2),
        json.dumps(x, ensure_ascii=False, sort_keys=True),
        json.dumps(x, ensure_ascii=False, separators=(",", ":")),
    ]


def test_globals_and_context():
    t = tmpl(
        "{{ bos_token }}{{ strftime_now('%Y') }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
        "{{ add_generation_prompt }}",
        bos_token="<s>",
        eos_token="</s>",
    )
    assert t.render(MESSAGES) == f"<s>{datetime.now().year}|</s>|True|True|True"
    assert t.render(MESSAGES, add_generation_prompt=False).endswith("False")


def test_trim_blocks_and_loop_controls():
    t = tmpl(
        "{% for m in messages %}\n  {% if m.role == 'system' %}{% continue %}{% endif %}\n"
        "[{{ m.content }}]\n{% break %}\n{% endfor %}"
    )
    assert t.render(MESSAGES) == "[Hi]\n"


def test_generation_block():
    t = tmpl("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %};{% endfor %}")
    assert t.render(MESSAGES) == "You are terse.;Hi;"


def test_end_of_turn():
    t = model_template("qwen2.5-coder-0.5b-instruct-q4_k_m")
    assert t.end_of_turn() == "<|im_end|>\n"
    gemma = tmpl("{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}")
    assert gemma.end_of_turn() == "<end_of_turn>\n"
    strict = tmpl("{{ raise_exception('no') }}")
    with pytest.warns(UserWarning, match=r"test-model\.gguf: the chat template refused these messages: no"):
        assert strict.end_of_turn() is None


def test_messages_are_not_mutated():
    msgs = [{"role": "user", "content": "Hi"}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ChatTemplate(None, model="m").render(msgs)
    assert msgs == [{"role": "user", "content": "Hi"}]


@pytest.mark.parametrize(
    "source, what",
    [
        ("{{ 'x' * 100000000 }}", "'*' would build"),
        ("{{ [1] * 100000000 }}", "'*' would build"),
        ("{{ 9 ** 100000 }}", "'**' would build"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "loops and calls went past",
        ),
        ("{% for i in range(100000) %}{{ messages[0]['content'] }}{% endfor %}", "the prompt would pass"),
    ],
)
def test_rendering_is_bounded(source, what):
    import re

    from localllm.text.chat_template import ChatTemplate, ChatTemplateError

    t = ChatTemplate(source, model="evil.gguf")
    with pytest.raises(
        ChatTemplateError, match=re.escape(f"evil.gguf: the chat template went past its bounds: {what}")
    ):
        t.render([{"role": "user", "content": "y" * 1000}])


def test_bounded_operators_still_compute():
    from localllm.text.chat_template import ChatTemplate

    t = ChatTemplate(
        "{{ '=' * 3 }}{{ 2 ** 10 }}{{ 'a' + 'b' }}{{ 1 + 2 }}{{ 3 * 4 }}{% for i in range(3) %}{{ i }}{% endfor %}",
        model="m",
    )
    assert t.render([{"role": "user", "content": "hi"}]) == "===1024ab312012"
