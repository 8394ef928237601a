"""The bounded template sandbox: a corpus of hostile chat templates, each refused with a ChatTemplateError
naming the model, quickly and in little memory; the real models' templates render exactly as in an
unbounded Hugging Face environment, long conversations and tools included."""

from __future__ import annotations

import json
import time
import tracemalloc

import jinja2.ext
import pytest
from conftest import model_file
from jinja2.sandbox import ImmutableSandboxedEnvironment
from localllm.model.gguf import GGUFFile
from localllm.text.chat_template import ChatTemplate, ChatTemplateError
from localllm.text.template_sandbox import MAX_STEPS, MAX_VALUE_CHARS

MESSAGES = [{"role": "user", "content": "hi"}]
NS = "{% set ns = namespace(a=['x'], b=['x'], s='x', n=2, l=[]) %}"
X = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"

# Each ends in ChatTemplateError: loops, growth, widths, sharing, captured output, recursion.
HOSTILE = [
    # every loop iteration counts, whatever it iterates
    "{% for a in 'x'*100000 %}{% for b in 'x'*100000 %}{% endfor %}{% endfor %}",
    "{% for a in 'x'*100000 %}{% for b in 'x'*100000 if false %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for a in [0]*1000 %}{% for b in [0]*1000 %}{% for c in [0]*1000 %}{% endfor %}{% endfor %}{% endfor %}",
    "{% for a in messages * 100000 %}{% for b in messages * 100000 %}{% endfor %}{% endfor %}",
    "{{ [1] | slice(1000000000) | list | length }}",
    "{{ range(100000) | map('string') | join | length }}",
    "{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}",
    "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    # widths and precisions
    "{{ '%1000000000s' % 'x' }}",
    "{{ '%*s' % (1000000000, 'x') }}",
    "{{ '%.1000000000f' % 1.0 }}",
    "{{ '%(a)500000000s' % {'a': 'x'} }}",
    "{{ '%1000000000s' | format('x') }}",
    "{{ '{:>1000000000}'.format('x') }}",
    "{{ '{:{}}'.format('x', 999999999) }}",
    "{{ '{a:>999999999}'.format_map({'a': 'x'}) }}",
    "{{ ('{0}' * 1000000).format('x' * 1000000) }}",
    "{{ 'x'.center(1000000000) }}",
    "{{ 'x'.ljust(1000000000) }}",
    "{{ 'x'.rjust(1000000000) }}",
    "{{ 'x'.zfill(1000000000) }}",
    "{{ '\t\t'.expandtabs(1000000000) }}",
    "{{ 'x' | center(1000000000) }}",
    "{{ 'a\nb\nc' | indent(1000000000) }}",
    "{{ ('x\n' * 1000000) | indent(1000) }}",
    "{{ messages | tojson(indent=1000000000) }}",
    "{{ messages | tojson(separators=(' ' * 100000000, ':')) }}",
    "{{ strftime_now('%c' * 1000000) }}",
    # growth of strings, lists and integers
    "{{ 'x' * 10000000000 }}",
    "{{ messages[0].content * 1000000000 }}",
    NS + "{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
    NS + "{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}",
    "{{ ('x' * 2000000) ~ ('x' * 2000000) ~ ('x' * 2000000) }}",
    "{% set a = 'x' * 4000000 %}{% for i in range(10000) %}{% set b = a ~ i %}{% endfor %}",
    "{% for i in range(100000) %}{% set b = ('x' * 4000000) | upper %}{% endfor %}",
    NS + "{% for i in range(100000) %}{% set ns.l = ns.l + ['x' * 1000] %}{% endfor %}{{ ns.l | length }}",
    NS + "{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}{{ ns.n }}",
    NS + "{% for i in range(100000) %}{% set ns.n = ns.n + ns.n %}{% endfor %}{{ ns.n }}",
    "{{ 7 ** 1000000 }}",
    "{{ '{:,}'.format(10 ** 1200) * 100000 }}",
    "{{ (1).to_bytes(1000000000, 'big') }}",
    "{{ ('x' * 1000000).replace('', 'y' * 1000) }}",
    "{{ ('x' * 1000000) | replace('x', 'y' * 1000) }}",
    "{{ ('x' * 1000000).translate({120: 'y' * 1000}) }}",
    "{{ ('x' * 100000) | wordwrap(1, wrapstring='y' * 10000) }}",
    "{{ (['x' * 1000000] * 1000) | join('y' * 1000000) }}",
    "{{ ('y' * 1000000).join(['x' * 1000000] * 1000) }}",
    "{{ [1] | batch(1000000000, 0) | list }}",
    "{{ ([[0] * 1000] * 1000) | sum(start=[]) | length }}",
    "{{ ('x' * 4000000) | list | length }}",
    "{{ lipsum(1000000) }}",
    "{{ lipsum(10, max=100000000) }}",
    # sharing: a value's size as text counts every reference
    NS + "{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% endfor %}{{ ns.a }}",
    NS + "{% for i in range(40) %}{% set ns.a = [ns.a] * 2 %}{% endfor %}{{ ns.a | length }}",
    NS + "{% for i in range(40) %}{% set ns.a = dict(p=ns.a, q=ns.a) %}{% endfor %}{{ ns.a | tojson }}",
    NS + "{% for i in range(40) %}{% set ns.a = (ns.a, ns.a) %}{% endfor %}{{ ns.a | pprint }}",
    "{% set ns = namespace(a=namespace(x=1)) %}{% for i in range(40) %}"
    "{% set ns.a = namespace(p=ns.a, q=ns.a) %}{% endfor %}{{ ns.a }}",
    NS + "{% for i in range(40) %}{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}"
    "{{ ns.a == ns.b }}",
    "{% set s = 'x' * 1000000 %}{{ (s, s, s, s, s) }}",
    "{{ (['x' * 1000] * 4000) | pprint }}",
    # captured output: {% set %} blocks, macros, filter blocks
    NS + "{% for i in range(64) %}{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}{% endfor %}{{ ns.s | length }}",
    NS + "{% for i in range(100000) %}{% set ns.s %}{{ ns.s }}" + X + "{% endset %}{% endfor %}",
    "{% filter upper %}{% for i in range(100000) %}" + X + "{% endfor %}{% endfilter %}",
    "{% macro f(s, n) %}{% if n %}{{ f(s ~ ('x' * 4000000), n - 1) }}{% endif %}{% endmacro %}{{ f('', 900) }}",
    "{% macro f(n) %}{% set big = 'x' * 4000000 %}{% if n %}{{ f(n - 1) }}{% endif %}{{ big | length }}"
    "{% endmacro %}{{ f(900) }}",
    # the prompt itself
    "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
    # the sandbox's own refusals stay
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% for i in range(1000000) %}{% endfor %}",
]


@pytest.mark.parametrize("source", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_template_is_refused_quickly_in_little_memory(source):
    t = ChatTemplate(source, model="evil.gguf")
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match=r"^evil\.gguf: "):
        t.render(MESSAGES)
    assert time.monotonic() - start < 2.0  # generous: the bounds stop each in well under a second
    tracemalloc.start()  # a second render, traced (tracing slows it, so it is not timed)
    try:
        with pytest.raises(ChatTemplateError):
            t.render(MESSAGES)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 << 20


def test_messages_name_the_bound():
    def error(source: str) -> str:
        with pytest.raises(ChatTemplateError) as e:
            ChatTemplate(source, model="evil.gguf").render(MESSAGES)
        return str(e.value)

    bounds = "evil.gguf: the chat template went past its bounds: "
    assert error(HOSTILE[0]) == bounds + f"loops and calls went past {MAX_STEPS} steps"
    assert error("{{ 'x'.center(1000000000) }}") == (
        bounds + f"str.center would build 1000000000 characters (at most {MAX_VALUE_CHARS})"
    )
    assert error("{{ '%1000000000s' % 'x' }}") == bounds + "a format width or precision of 10 digits"
    assert error("{{ 7 ** 1000000 }}") == bounds + "'**' would build an integer of about 3000000 bits (at most 4096)"


def test_a_huge_template_source_is_refused_at_load():
    with pytest.raises(ChatTemplateError, match=r"evil\.gguf: tokenizer.chat_template is \d+ characters long"):
        ChatTemplate("x" * (2 << 20), model="evil.gguf")


def test_bounded_operations_still_compute():
    t = ChatTemplate(
        "{{ '%-5s|' % 'ab' }}{{ '{:>4}|{:.2f}'.format('x', 1.5) }}{{ 'x'.center(5) }}|{{ 'a\tb'.expandtabs(4) }}|"
        "{{ 'ab' | center(6) }}|{{ 'a\nb' | indent(2) }}|{{ [1, 2] | batch(3, 0) | list }}|"
        "{{ ['a', 'b'] | join(', ') }}|{{ ', '.join(['c', 'd']) }}|{{ 'aXa' | replace('X', 'yy') }}|"
        "{{ [[1], [2]] | sum(start=[]) }}|{{ [1] * 3 + [2] }}|{{ (2 ** 10) * 3 }}|{{ 'a' ~ 1 ~ [2] }}|"
        "{% set ns = namespace(s='') %}{% for i in 'abc' if i != 'b' %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.s }}|"
        "{% set c %}{% for m in messages %}[{{ m.content }}]{% endfor %}{% endset %}{{ c }}|{{ lipsum(1, False, 3, 4) | length > 0 }}",
        model="m",
    )
    assert t.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]) == (
        "ab   |   x|1.50  x  |a   b|  ab  |a\n  b|[[1, 2, 0]]|a, b|c, d|ayya|[1, 2]|[1, 1, 1, 2]|3072|a1[2]|ac|"
        "[hi][yo]|True"
    )


# -- the real templates: unchanged, long conversations included ---------------------------------------
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Température <°C> & vent",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def conversation(turns: int, size: int) -> list[dict]:
    msgs = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": f"question {i}: " + "q" * size})
        if i % 3 == 0:
            call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
            msgs += [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "sunny"}]
        msgs.append({"role": "assistant", "content": f"answer {i}: " + "a" * size})
    return msgs


def hf_render(source: str, messages, tools) -> str:
    """Hugging Face's environment, unbounded: the reference."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
    )
    return env.from_string(source).render(
        messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token="<|im_end|>", documents=None
    )


@pytest.mark.parametrize(
    "name", ["smollm2-135m-instruct-q4_1", "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"]
)
@pytest.mark.parametrize("turns, size, tools", [(3000, 20, [TOOL]), (40, 50000, [TOOL] * 20), (2, 900000, None)])
def test_real_templates_render_long_conversations_unchanged(name, turns, size, tools):
    path = model_file(name)
    with GGUFFile(path) as f:
        source = f.metadata["tokenizer.chat_template"]
    messages = conversation(turns, size)
    out = ChatTemplate(source, model=str(path), eos_token="<|im_end|>").render(messages, tools=tools)
    assert len(out) > 100_000
    assert out == hf_render(source, messages, tools)
