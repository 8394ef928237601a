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

A template is code from a downloaded file, so it is compiled and rendered in template_sandbox.py's
bounded sandbox: loops, calls, built values and time are counted per render, and the prompt may not pass
MAX_RENDER_CHARS characters; going past a bound is a ChatTemplateError like any other. A template source
over MAX_SOURCE_CHARS is refused at load. A model whose template cannot be loaded or rendered is still
usable: Tokenizer warns at load and builds ChatTemplate.unusable(), whose render() raises the error.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes

from .template_sandbox import MAX_VALUE_CHARS, Budget, TemplateBoundsError, bounded_environment, strftime_now

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# content markers for end_of_turn(): the text a template puts right after an assistant message
_PROBE_USER = "localllm-probe-question"
_PROBE_ASSISTANT = "localllm-probe-answer"


MAX_RENDER_CHARS = MAX_VALUE_CHARS  # a rendered prompt: 4 Mi characters, past any context
MAX_SOURCE_CHARS = 1 << 20  # a template's source (real ones are a few KB)


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


def _environment() -> jinja2.Environment:
    env = bounded_environment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = strftime_now
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
        if len(source) > MAX_SOURCE_CHARS:
            raise ChatTemplateError(
                f"{model}: tokenizer.chat_template is {len(source)} characters long (at most {MAX_SOURCE_CHARS})"
            )
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.error: ChatTemplateError | None = None
        try:
            with Budget():
                self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(
                f"{model}: tokenizer.chat_template has a syntax error at line {e.lineno}: {e.message}"
            ) from None
        except Exception as e:  # compiling is bounded too; whatever else goes wrong is the template's
            raise ChatTemplateError(f"{model}: tokenizer.chat_template cannot be compiled: {e}") from None

    @property
    def takes_tools(self) -> bool:
        """Whether the template reads the `tools` variable (renders a request's tool definitions): what /api/show
        reports as the "tools" capability."""
        if self.source is None or self.is_fallback:
            return False
        try:
            return "tools" in jinja2.meta.find_undeclared_variables(_environment().parse(self.source))
        except jinja2.TemplateError:
            return False

    @classmethod
    def unusable(cls, error: ChatTemplateError, *, model: str) -> ChatTemplate:
        """A stand-in for a template that failed to load: render() raises error (which names the model)."""
        self = cls.__new__(cls)
        self.model, self.is_fallback, self.source, self.error = model, False, None, error
        self.bos_token = self.eos_token = ""
        return self

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **extra: Any,
    ) -> str:
        """The prompt text for messages ([{"role": ..., "content": ...}, ...]); special tokens stay as text."""
        if self.error is not None:
            raise ChatTemplateError(str(self.error))
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
        try:
            with Budget():
                parts, n = [], 0
                for part in self._template.generate(**context):
                    n += len(part)
                    if n > MAX_RENDER_CHARS:
                        raise TemplateBoundsError(f"the prompt would pass {MAX_RENDER_CHARS} characters")
                    parts.append(part)
                return "".join(parts)
        except TemplateBoundsError as e:
            raise ChatTemplateError(f"{self.model}: the chat template went past its bounds: {e}") from None
        except _TemplateRaised as e:
            raise ChatTemplateError(f"{self.model}: the chat template refused these messages: {e}") from None
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"{self.model}: chat template error: {e}") from None
        except Exception as e:  # a template is code: any error it hits is reported, never a traceback
            raise ChatTemplateError(f"{self.model}: chat template error: {type(e).__name__}: {e}") from None

    def end_of_turn(self) -> str | None:
        """The text the template puts right after an assistant message (e.g. "<|im_end|>\\n"), or None
        when a probe conversation does not render, with a warning naming the problem (the caller matches
        it against special tokens)."""
        if self.error is not None:
            return None
        probe = [{"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
        try:
            text = self.render(probe, add_generation_prompt=False)
        except ChatTemplateError as e:
            warnings.warn(f"{e} (rendering a user / assistant exchange; chat prompts may fail)", stacklevel=2)
            return None
        at = text.rfind(_PROBE_ASSISTANT)
        return None if at < 0 else text[at + len(_PROBE_ASSISTANT) :]
