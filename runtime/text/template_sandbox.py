"""The bounded Jinja2 sandbox chat templates run in: a template is code from a downloaded file, so one render
gets a fixed allowance of steps, bytes and time, and every way a template can loop or grow a value passes
through a counted hook that refuses before the allowance is spent.

    env = bounded_environment(filters={...}, globals={...})   # an ImmutableSandboxedEnvironment
    with Budget():                                            # one per compile and per render
        tmpl = env.from_string(source)                        # (contextvar: renders in threads are separate)
        text = "".join(tmpl.generate(**context))              # TemplateBoundsError past any bound

Bounds (per render):
- MAX_STEPS loop iterations, calls and filter applications together: every `{% for %}` iteration (over any
  iterable, recursive loops and `if` filters included), every item an iterator made by a filter or call
  yields, every `range()` item, every call of a method, macro or global.
- MAX_SECONDS of wall-clock time, checked in every counted hook: with each hook bounded, no render outlives
  it by more than one operation.
- MAX_VALUE_CHARS characters in any one value built (a string, or a list / dict as text: sharing cannot
  hide size, `[a, a]` counts `a` twice), the same as the prompt's bound in chat_template.py.
- MAX_BUILT_BYTES bytes in all values built by `+ * ** % ~`, literals, calls, filters and captured output
  (`{% set %}` blocks, macros), counted before the operation where its size follows from the arguments
  (`*`, `**`, `+`, `~`, `%` and str.format widths and precisions, center / ljust / rjust / zfill /
  expandtabs / replace / translate / join / to_bytes, the filters center, indent, format, batch, join,
  replace, wordwrap, sum, pprint, tojson, lipsum) and right after it otherwise (a result is at most a
  small multiple of arguments already counted).
- MAX_INT_BITS bits in an integer made by `*`, `**` or `+`.

Constant folding is off (optimized=False), so nothing a template computes runs unbounded at compile time.
"""

from __future__ import annotations

import contextvars
import functools
import json
import operator
import re
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import jinja2.nodes as nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import markup_join, str_join
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter, safe_range
from jinja2.utils import Namespace, _PassArg, generate_lorem_ipsum
from markupsafe import EscapeFormatter, Markup

MAX_STEPS = 1 << 18  # loop iterations + calls per render (a 5,000-message conversation takes ~50k)
MAX_SECONDS = 1.0  # wall clock per render (real templates take milliseconds)
MAX_VALUE_CHARS = 1 << 22  # one built value as text (4 Mi characters: a prompt of ~1M tokens)
MAX_BUILT_BYTES = 1 << 25  # everything built in one render (32 MiB)
MAX_INT_BITS = 4096

_current: contextvars.ContextVar[Budget] = contextvars.ContextVar("template_budget")


class TemplateBoundsError(Exception):
    """A render that would go past one of the bounds in the module docstring."""


class Budget:
    """One compile's or render's allowance; `with Budget():` makes it the current one.

    steps, built: spent so far; deadline: time.monotonic() past which every hook refuses."""

    def __init__(self) -> None:
        self.steps = 0
        self.built = 0
        self.deadline = time.monotonic() + MAX_SECONDS
        self._sizes: dict[int, tuple[int, int, Any]] = {}  # id -> (chars, depth, the object, kept alive)

    def __enter__(self) -> Budget:
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _current.reset(self._token)
        self._sizes.clear()

    def tick(self, n: int = 1) -> None:
        self.steps += n if n > 0 else 0
        if self.steps > MAX_STEPS:
            raise TemplateBoundsError(f"loops and calls went past {MAX_STEPS} steps")
        if time.monotonic() > self.deadline:
            raise TemplateBoundsError(f"rendering took more than {MAX_SECONDS:g} s")

    def reserve(self, nbytes: int, what: str) -> None:
        """Refuses when nbytes more would pass MAX_BUILT_BYTES (spends nothing)."""
        if self.built + nbytes > MAX_BUILT_BYTES:
            raise TemplateBoundsError(
                f"{what} would take the values built past {MAX_BUILT_BYTES >> 20} MiB (about {nbytes} bytes more)"
            )

    def charge(self, nbytes: int, what: str) -> None:
        if nbytes > 0:
            self.reserve(nbytes, what)
            self.built += nbytes
        self.tick()

    def chars(self, n: int, what: str) -> None:
        """Refuses a value of n characters before it is built, else charges it."""
        if n > MAX_VALUE_CHARS:
            raise TemplateBoundsError(f"{what} would build {n} characters (at most {MAX_VALUE_CHARS})")
        self.charge(n, what)

    # -- sizes -----------------------------------------------------------------------------------------
    def measure(self, v: Any) -> tuple[int, int]:
        """(characters, nesting depth) of v as text, about len(str(v)); refuses past MAX_VALUE_CHARS.
        Lists, tuples and dicts are immutable in the sandbox, so their sizes are remembered per render."""
        return self._measure(v, 0)[:2]

    def remember(self, v: Any, chars: int, depth: int) -> None:
        """Records the size of a container built from measured parts (`+`, `*`), so it is not walked again."""
        if chars > MAX_VALUE_CHARS:
            raise TemplateBoundsError(f"a value would be over {MAX_VALUE_CHARS} characters as text")
        self._sizes[id(v)] = (chars, depth, v)

    def _measure(self, v: Any, level: int) -> tuple[int, int, bool]:  # (chars, depth, cacheable)
        t = type(v)
        if t is str:
            return len(v) + 2, 0, True
        if t is int:
            return v.bit_length() // 3 + 2, 0, True
        if v is None or t is bool or t is float:
            return 24, 0, True
        hit = self._sizes.get(id(v))
        if hit is not None:
            return hit[0], hit[1], True
        if isinstance(v, Namespace):
            items, cacheable = [v._Namespace__attrs], False  # mutable: `{% set ns.x = ... %}`
        elif isinstance(v, Mapping):
            items, cacheable = [x for kv in v.items() for x in kv], isinstance(v, dict)
        elif isinstance(v, (list, tuple, set, frozenset)):
            items, cacheable = v, True
        elif isinstance(v, str):  # Markup
            return len(v) + 2, 0, True
        else:
            return 64, 0, True  # a macro, a loop, a generator: a short repr
        if level > 256:
            raise TemplateBoundsError("a value nests deeper than 256 levels")
        self.tick()  # a walk is counted per container: namespaces are walked afresh each time
        if 4 * len(items) > MAX_VALUE_CHARS:  # each item takes 4 characters at least ("'', ")
            raise TemplateBoundsError(f"a value would be over {MAX_VALUE_CHARS} characters as text")
        total, depth = 2, 0
        for x in items:
            t = type(x)
            if t is str:
                total += len(x) + 4
            elif t is int:
                total += x.bit_length() // 3 + 4
            else:
                c, d, ok = self._measure(x, level + 1)
                total += c + 2
                if d >= depth:
                    depth = d + 1
                cacheable = cacheable and ok
                if total > MAX_VALUE_CHARS:
                    break
        if items and depth == 0:
            depth = 1
        if total > MAX_VALUE_CHARS:
            raise TemplateBoundsError(f"a value would be over {MAX_VALUE_CHARS} characters as text")
        if cacheable:
            self._sizes[id(v)] = (total, depth, v)
        return total, depth, cacheable

    def text_len(self, v: Any) -> int:
        """len(str(v)), exact for strings, an estimate for the rest."""
        return len(v) if isinstance(v, str) else self.measure(v)[0]

    def account(self, v: Any, args: tuple = (), what: str = "a call") -> Any:
        """A value a call, filter or operator returned: charged (unless it is one of args, nothing new) and,
        for an iterator, made counted."""
        for a in args:
            if v is a:
                return v
        if isinstance(v, str):
            if len(v) > MAX_VALUE_CHARS:
                raise TemplateBoundsError(f"{what} built {len(v)} characters (at most {MAX_VALUE_CHARS})")
            self.charge(sys.getsizeof(v), what)
        elif isinstance(v, (list, tuple, dict, set, frozenset, Namespace)):
            self.measure(v)
            self.charge(sys.getsizeof(v), what)
        elif isinstance(v, Iterator):
            return self.counted(v, what)
        return v

    def counted(self, it: Iterator, what: str):
        for x in it:
            self.tick()
            yield self.account(x, (), what)


def budget() -> Budget:
    b = _current.get(None)
    if b is None:
        raise TemplateBoundsError("a template ran outside a bounded render")
    return b


# -- sizes of operations from their arguments ------------------------------------------------------------
_PERCENT = re.compile(r"%(\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+)?)?[hlL]?(.)?", re.S)
_DIGITS = re.compile(r"\d+")


def _number(text: str) -> int:
    if len(text) > 9:
        raise TemplateBoundsError(f"a format width or precision of {len(text)} digits")
    return int(text)


def _percent_chars(b: Budget, fmt: str, args: Any) -> int:
    """An upper bound on len(fmt % args): each directive's width and precision plus its widest argument."""
    values = list(args) if isinstance(args, tuple) else list(args.values()) if isinstance(args, Mapping) else [args]
    widest = max((b.text_len(v) for v in values), default=0)
    stars = sum(abs(v) for v in values if isinstance(v, int))
    total = len(fmt)
    for m in _PERCENT.finditer(fmt):
        for g in (m[2], m[3]):
            if g == "*":
                total += stars
            elif g:
                total += _number(g)
        if m[4] != "%":
            total += widest
        if total > MAX_VALUE_CHARS:
            break
    return total


def _percent(b: Budget, fmt: str, args: Any) -> str:
    b.chars(_percent_chars(b, fmt, args), "'%' formatting")
    return fmt % args


def _spec_chars(spec: str) -> int:
    return sum(_number(d) for d in _DIGITS.findall(spec))


class _BoundedFormatter(SandboxedFormatter):
    """str.format / format_map: each field's width and precision and value counted before it is formatted."""

    def vformat(self, format_string, args, kwargs):
        self._chars = len(format_string)
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> Any:
        b = budget()
        self._chars += _spec_chars(format_spec) + b.text_len(value)
        b.chars(self._chars, "str.format")
        return super().format_field(value, format_spec)


class _BoundedEscapeFormatter(_BoundedFormatter, EscapeFormatter):
    pass


def _str_method_chars(b: Budget, s: str, name: str, args: tuple, kwargs: dict) -> int | None:
    """Result length of s.<name>(*args) for the str methods that size their result from an argument."""
    a = list(args) + list(kwargs.values())
    if name in ("center", "ljust", "rjust", "zfill") and a and isinstance(a[0], int):
        return max(len(s), a[0])
    if name == "expandtabs":
        return len(s) + s.count("\t") * max(a[0] if a and isinstance(a[0], int) else 8, 0)
    if name == "replace" and len(a) >= 2 and isinstance(a[0], str) and isinstance(a[1], str):
        n = len(s) + 1 if a[0] == "" else s.count(a[0])
        if len(a) > 2 and isinstance(a[2], int) and a[2] >= 0:
            n = min(n, a[2])
        return len(s) + n * max(len(a[1]) - len(a[0]), 0)
    if name == "translate" and a:
        table = a[0]
        values = table.values() if isinstance(table, Mapping) else table if isinstance(table, (list, tuple)) else ()
        return len(s) * max([1] + [b.text_len(v) for v in values])
    return None


def _join_chars(b: Budget, sep: str, items: list) -> int:
    return sum(b.text_len(x) for x in items) + len(sep) * max(len(items) - 1, 0)


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _items(value: Any) -> list:
    """A filter's iterable argument as a list (an iterator is drained through its counted wrapper)."""
    return value if isinstance(value, list) else list(value)


# filters: (b, args after any pass-arg, kwargs) -> (args, kwargs), refusing what would be too big
def _center(b, args, kwargs):
    width = _arg(args, kwargs, 1, "width", 80)
    if isinstance(width, int):
        b.chars(max(b.text_len(args[0]), width), "center")
    return args, kwargs


def _indent(b, args, kwargs):
    width = _arg(args, kwargs, 1, "width", 4)
    w = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    s = str(args[0]) if not isinstance(args[0], str) else args[0]
    b.chars(len(s) + (s.count("\n") + 1) * max(w, 0), "indent")
    return args, kwargs


def _format(b, args, kwargs):
    b.chars(_percent_chars(b, str(args[0]), kwargs or tuple(args[1:])), "format")
    return args, kwargs


def _batch(b, args, kwargs):
    linecount = _arg(args, kwargs, 1, "linecount")
    if isinstance(linecount, int) and _arg(args, kwargs, 2, "fill_with") is not None:
        b.charge(8 * max(linecount, 0), "batch")
    return args, kwargs


def _join(b, args, kwargs):
    items = _items(args[0])
    sep = _arg(args, kwargs, 1, "d", "")
    b.chars(_join_chars(b, sep if isinstance(sep, str) else "", items), "join")
    return (items, *args[1:]), kwargs


def _replace(b, args, kwargs):
    s = args[0] if isinstance(args[0], str) else str(args[0])
    n = _str_method_chars(b, s, "replace", tuple(args[1:3]), {})
    if n is not None:
        b.chars(n, "replace")
    return args, kwargs


def _wordwrap(b, args, kwargs):
    s = args[0] if isinstance(args[0], str) else str(args[0])
    wrap = _arg(args, kwargs, 3, "wrapstring") or "\n"
    b.chars(len(s) + (len(s) + 1) * len(wrap), "wordwrap")
    return args, kwargs


def _sum(b, args, kwargs):
    start = _arg(args, kwargs, 2, "start", 0)
    if isinstance(start, (str, list, tuple)):  # sequences: each step copies the sum so far
        items = _items(args[0])
        total = len(start) + sum(len(x) if isinstance(x, (str, list, tuple)) else 1 for x in items)
        b.charge(8 * total * (len(items) + 1) // 2, "sum")
        args = (items, *args[1:])
    return args, kwargs


def _pprint(b, args, kwargs):
    chars, depth = b.measure(args[0])
    b.chars(chars * (depth + 1), "pprint")
    return args, kwargs


_FILTER_SIZES = {
    "center": _center,
    "indent": _indent,
    "format": _format,
    "batch": _batch,
    "join": _join,
    "replace": _replace,
    "wordwrap": _wordwrap,
    "sum": _sum,
    "pprint": _pprint,
}


def _bounded_filter(name: str, f):
    size = _FILTER_SIZES.get(name)
    skip = 1 if _PassArg.from_obj(f) is not None else 0  # context / eval_ctx / environment comes first

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        b = budget()
        b.tick()
        if size is not None and len(args) > skip:
            rest, kwargs = size(b, args[skip:], kwargs)
            args = (*args[:skip], *rest)
        return b.account(f(*args, **kwargs), args, f"the filter {name}")

    return bounded


# -- globals -------------------------------------------------------------------------------------------
def bounded_range(*args: int) -> range:
    r = safe_range(*args)  # the sandbox's own cap: 100000 per range
    budget().tick(len(r))
    return r


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    b = budget()
    words = n * (1 + abs(min) + abs(max))  # n paragraphs of min..max words
    b.tick(words)
    b.chars(20 * n + 12 * words, "lipsum")
    return generate_lorem_ipsum(n, html, min, max)


def tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """HF's tojson (json.dumps, non-ASCII kept, no HTML escaping), its size estimated before it runs."""
    b = budget()
    chars, depth = b.measure(value)
    width = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    seps = sum(len(s) for s in separators) if separators and all(isinstance(s, str) for s in separators) else 2
    b.reserve(12 * chars + (chars // 2 + 1) * (max(width, 0) * (depth + 1) + seps + 2), "tojson")
    out = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    return b.account(out, (), "tojson")


def strftime_now(fmt: str) -> str:
    budget().chars(len(fmt) + 64 * str(fmt).count("%"), "strftime_now")
    return datetime.now().strftime(fmt)


# -- the environment -------------------------------------------------------------------------------------
class _BoundedBuffer(list):
    """Output captured by `{% set %}...{% endset %}`, macros, call and filter blocks: counted as it grows."""

    __slots__ = ("chars",)

    def __init__(self) -> None:
        self.chars = 0

    def append(self, s: str) -> None:
        self.chars += len(s)
        if self.chars > MAX_VALUE_CHARS:
            raise TemplateBoundsError(f"captured output would pass {MAX_VALUE_CHARS} characters")
        budget().charge(sys.getsizeof(s), "captured output")
        list.append(self, s)

    def extend(self, parts) -> None:
        for s in parts:
            self.append(s)


_LOOP_STEP = "loop_step"


def _bounded_literal(visit):
    """A literal's visitor wrapped: `[a, b]` compiles to `environment.bounded_literal([a, b])` (loads only)."""

    def visitor(self, node, frame):
        if getattr(node, "ctx", "load") != "load":
            return visit(self, node, frame)
        self.write("environment.bounded_literal(")
        visit(self, node, frame)
        self.write(")")

    return visitor


class _BoundedCodeGenerator(CodeGenerator):
    """Jinja's code generator with the hooks the sandbox lacks: every loop iteration ticks, `~` and
    literals are counted, and captured output goes into a bounded buffer."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        for loop in node.find_all(nodes.For):
            loop.body = [nodes.ExprStmt(nodes.EnvironmentAttribute(_LOOP_STEP)), *loop.body]
            if loop.test is not None:  # `{% for x in xs if test %}`: the items skipped count too
                loop.test = nodes.And(nodes.EnvironmentAttribute(_LOOP_STEP), loop.test)
        super().visit_Template(node, frame)

    def visit_EnvironmentAttribute(self, node: nodes.EnvironmentAttribute, frame: Frame) -> None:
        # Jinja allows no new node types: the loop step is this attribute, called (a plain call, not the
        # sandbox's call(): it runs once per iteration of every loop)
        super().visit_EnvironmentAttribute(node, frame)
        if node.name == _LOOP_STEP:
            self.write("()")

    def buffer(self, frame: Frame) -> None:
        frame.buffer = self.temporary_identifier()
        self.writeline(f"{frame.buffer} = environment.bounded_buffer()")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat(context.eval_ctx, (")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    visit_List = _bounded_literal(CodeGenerator.visit_List)
    visit_Tuple = _bounded_literal(CodeGenerator.visit_Tuple)
    visit_Dict = _bounded_literal(CodeGenerator.visit_Dict)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """HF's ImmutableSandboxedEnvironment with the bounds of the module docstring."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def loop_step(self) -> bool:
        _current.get().tick()
        return True

    def bounded_buffer(self) -> list:
        return _BoundedBuffer()

    def bounded_literal(self, v: Any) -> Any:
        return budget().account(v, (), "a literal")

    def bounded_concat(self, eval_ctx, parts: tuple) -> str:
        b = budget()
        n = sum(b.text_len(p) for p in parts)
        b.chars(6 * n if eval_ctx.autoescape else n, "'~'")
        return markup_join(parts) if eval_ctx.autoescape else str_join(parts)

    def call_binop(self, context, operator_name: str, left: Any, right: Any) -> Any:
        b = budget()
        b.tick()
        if operator_name == "%":
            return _percent(b, left, right) if isinstance(left, str) else operator.mod(left, right)
        if operator_name == "+":
            if isinstance(left, str) and isinstance(right, str):
                b.chars(len(left) + len(right), "'+'")
            elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
                (lc, ld), (rc, rd) = b.measure(left), b.measure(right)
                if lc + rc > MAX_VALUE_CHARS:
                    raise TemplateBoundsError(f"'+' would build over {MAX_VALUE_CHARS} characters")
                b.charge(8 * (len(left) + len(right)), "'+'")
                out = operator.add(left, right)
                b.remember(out, lc + rc, max(ld, rd))
                return out
            elif isinstance(left, int) and isinstance(right, int):
                self._bits(max(left.bit_length(), right.bit_length()) + 1, "'+'")
            return operator.add(left, right)
        if operator_name == "*":
            if isinstance(left, int) and isinstance(right, int):
                self._bits(left.bit_length() + right.bit_length(), "'*'")
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and not isinstance(n, bool):
                    count = len(seq) * n
                    if count > MAX_VALUE_CHARS:
                        raise TemplateBoundsError(f"'*' would build {count} items")
                    if isinstance(seq, str):
                        b.chars(count, "'*'")
                    else:
                        chars, depth = b.measure(seq)
                        b.chars(chars * max(n, 0), "'*'")
                        b.charge(8 * count, "'*'")
                        out = operator.mul(left, right)
                        b.remember(out, chars * max(n, 0), depth)
                        return out
            return operator.mul(left, right)
        if isinstance(left, int) and isinstance(right, int) and right > 0:
            self._bits(left.bit_length() * right, "'**'")
        return operator.pow(left, right)

    @staticmethod
    def _bits(bits: int, what: str) -> None:
        if bits > MAX_INT_BITS:
            raise TemplateBoundsError(f"{what} would build an integer of about {bits} bits (at most {MAX_INT_BITS})")

    def wrap_str_format(self, value: Any):
        if not (
            isinstance(getattr(value, "__self__", None), str)
            and getattr(value, "__name__", "") in ("format", "format_map")
        ):
            return None
        f_self = value.__self__
        formatter = (
            _BoundedEscapeFormatter(self, escape=f_self.escape)
            if isinstance(f_self, Markup)
            else _BoundedFormatter(self)
        )
        is_map = value.__name__ == "format_map"

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                args, kwargs = (), args[0]
            return type(f_self)(formatter.vformat(f_self, args, kwargs))

        return functools.update_wrapper(wrapper, value)

    def call(__self, __context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        b = budget()
        b.tick()
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        if isinstance(owner, str):
            if name == "join" and args:
                args = (_items(args[0]), *args[1:])
                b.chars(_join_chars(b, owner, args[0]), "str.join")
            else:
                n = _str_method_chars(b, owner, name, args, kwargs)
                if n is not None:
                    b.chars(n, f"str.{name}")
        elif isinstance(owner, int) and name == "to_bytes":
            length = _arg(args, kwargs, 0, "length", 1)
            if isinstance(length, int):
                b.charge(max(length, 0), "int.to_bytes")
        result = super().call(__context, __obj, *args, **kwargs)
        return b.account(result, (owner, *args), f"{name or 'a call'}()")


def bounded_environment(**options: Any) -> BoundedSandbox:
    """A BoundedSandbox with every filter counted; options go to the environment (trim_blocks, ...)."""
    env = BoundedSandbox(optimized=False, **options)
    env.globals["range"] = bounded_range
    env.globals["lipsum"] = bounded_lipsum
    env.filters["tojson"] = tojson
    env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
    return env
