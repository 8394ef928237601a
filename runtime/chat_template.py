"""Chat templates: `tokenizer.chat_template` (Jinja2) rendered the way Hugging Face transformers does.

    tmpl = ChatTemplate(source, model="qwen2.5-coder-0.5b.gguf", bos_token="", eos_token="<|im_end|>")
    prompt = tmpl.render(messages, add_generation_prompt=True, tools=None)   # -> str
    ids = tok.encode(prompt, parse_special=True)   # or tok.encode_chat(messages): no doubled BOS

The environment is HF's: `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with
loop controls and the `{% generation %}` block; the globals `raise_exception(msg)` and
`strftime_now(fmt)`; a `tojson` filter with HF's semantics (json.dumps, non-ASCII kept, no HTML
escaping, optional indent / separators / sort_keys). The render context is `messages`, `tools`,
`documents`, `add_generation_prompt`, `bos_token`, `eos_token` and any extra keyword.

A model without a template gets CHATML (below), the most common chat format among GGUF models, and a
warning naming the model.

Every failure is a ChatTemplateError (a ValueError) naming the model: a syntax error when the
template is loaded, and at render time a bad message list, `raise_exception` from the template, or
any error the template hits.

A template is code from a downloaded file, so rendering is bounded: `+`, `*` and `**` may not build a
value over MAX_RENDER_CHARS items (or an integer over 4096 bits), `range()` loops take at most
MAX_RANGE_STEPS steps per render in all, and the prompt may not exceed MAX_RENDER_CHARS characters.
(Jinja's `~` concatenation is not interceptable: doubling a string with it in a bounded loop can still
allocate a lot before the prompt bound is checked.)
"""

from __future__ import annotations

import contextvars
import json
import operator
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# content markers for end_of_turn(): the text a template puts right after an assistant message
_PROBE_USER = "localllm-probe-question"
_PROBE_ASSISTANT = "localllm-probe-answer"


MAX_RENDER_CHARS = 1 << 24  # a rendered prompt (16 Mi characters: far past any context) or a built value
MAX_RANGE_STEPS = 1 << 20  # range() iterations per render, all loops together
_steps: contextvars.ContextVar[list[int]] = contextvars.ContextVar("chat_template_range_steps")


class ChatTemplateError(ValueError):
    """A chat template that cannot be loaded or rendered; the message names the model."""


class _TemplateRaised(Exception):
    """raise_exception() called by the template itself."""


class _Generation(jinja2.ext.Extension):
    """HF's `{% generation %}...{% endgeneration %}` (marks assistant text for training masks): renders its body."""

    tags = frozenset({"generation"})

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateTooBig(Exception):
    """A render that would go past the bounds in the module docstring."""


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset(["*", "**", "+"])

    def call_binop(self, context, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "+":
            if (
                isinstance(left, (str, list, tuple))
                and isinstance(right, (str, list, tuple))
                and len(left) + len(right) > MAX_RENDER_CHARS
            ):
                raise _TemplateTooBig(f"'+' would build {len(left) + len(right)} items")
            return operator.add(left, right)
        if operator_name == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_RENDER_CHARS:
                    raise _TemplateTooBig(f"'*' would build {len(seq) * n} items")
            return operator.mul(left, right)
        if isinstance(left, int) and isinstance(right, int) and right > 0 and left.bit_length() * right > 4096:
            raise _TemplateTooBig(f"'**' would build an integer of about {left.bit_length() * right} bits")
        return operator.pow(left, right)


def _range(*args: int):
    r = safe_range(*args)  # the sandbox's own cap: 100000 per range
    steps = _steps.get(None)
    if steps is not None:
        steps[0] += len(r)
        if steps[0] > MAX_RANGE_STEPS:
            raise _TemplateTooBig(f"range() loops went past {MAX_RANGE_STEPS} steps")
    return r


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation])
    env.globals["range"] = _range
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """One model's chat template, compiled once.

    source: the Jinja2 text, or None for the CHATML fallback (with a warning); model: a name for
    messages (the GGUF path); bos_token / eos_token: token texts the template may insert.
    """

    def __init__(self, source: str | None, *, model: str, bos_token: str = "", eos_token: str = ""):
        self.model = model
        self.is_fallback = source is None
        if source is None:
            warnings.warn(f"{model}: no tokenizer.chat_template in the model; using ChatML", stacklevel=2)
            source = CHATML
        if not isinstance(source, str):
            raise ChatTemplateError(f"{model}: tokenizer.chat_template must be a string, got {type(source).__name__}")
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(
                f"{model}: tokenizer.chat_template has a syntax error at line {e.lineno}: {e.message}"
            ) from None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for messages ([{"role": ..., "content": ...}, ...]); special tokens stay as text."""
        if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
            raise ChatTemplateError(
                f"{self.model}: messages must be a list of "
                f"{{'role': ..., 'content': ...}} objects, got {type(messages).__name__}"
            )
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping):
                raise ChatTemplateError(
                    f"{self.model}: messages[{i}] must be an object with 'role' and 'content', got {type(m).__name__}"
                )
            if not isinstance(m.get("role"), str):
                raise ChatTemplateError(f"{self.model}: messages[{i}] has no 'role' string")
        context = {
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "documents": None,
            **extra,
            "messages": [dict(m) for m in messages],
            "tools": None if tools is None else list(tools),
            "add_generation_prompt": bool(add_generation_prompt),
        }
        token = _steps.set([0])
        try:
            parts, n = [], 0
            for part in self._template.generate(**context):
                n += len(part)
                if n > MAX_RENDER_CHARS:
                    raise _TemplateTooBig(f"the prompt would pass {MAX_RENDER_CHARS} characters")
                parts.append(part)
            return "".join(parts)
        except _TemplateTooBig as e:
            raise ChatTemplateError(f"{self.model}: the chat template went past its bounds: {e}") from None
        except _TemplateRaised as e:
            raise ChatTemplateError(f"{self.model}: the chat template refused these messages: {e}") from None
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"{self.model}: chat template error: {e}") from None
        except Exception as e:  # a template is code: any error it hits is reported, never a traceback
            raise ChatTemplateError(f"{self.model}: chat template error: {type(e).__name__}: {e}") from None
        finally:
            _steps.reset(token)

    def end_of_turn(self) -> str | None:
        """The text the template puts right after an assistant message (e.g. "<|im_end|>\\n"), or None
        when a probe conversation does not render (the caller matches it against special tokens)."""
        probe = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
        try:
            text = self.render(probe, add_generation_prompt=False)
        except ChatTemplateError:
            return None
        at = text.rfind(_PROBE_ASSISTANT)
        return None if at < 0 else text[at + len(_PROBE_ASSISTANT) :]
