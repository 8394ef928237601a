"""The conversation view: a scrolling column of messages, anchored to the bottom while the user is there.

    view = Conversation()
    view.add_user("hi", turn=0)                # -> UserMessage; turn: its index in the conversation sent to the model
    msg = view.add_assistant(raw=False)        # -> AssistantMessage; msg.append("Hel"); msg.append("lo")
    view.add_error("context full")             # a red error line
    view.add_note("stopped")                   # a dim line under a reply
    view.set_raw(True)                         # every assistant message shows its source text instead of Markdown
    view.drop_last_reply()                     # the last assistant message and the notes after it go
    view.drop_from(widget)                     # that message and everything after it go
    await view.clear()

Auto-scroll is Textual's anchor: new content keeps the view at the bottom until the user scrolls up, and it
follows again once they scroll back down.
"""

from __future__ import annotations

import asyncio

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Collapsible, Markdown, Static


class UserMessage(Static):
    def __init__(self, text: str, turn: int | None = None):
        super().__init__(text, markup=False)
        self.text = text
        self.turn = turn  # its index in the conversation sent to the model; None when not in it (a refused turn)
        self.border_title = "you"


class AssistantMessage(Widget):
    """A reply: its source text (self.text) shown as Markdown, or verbatim when raw; a thinking model's reasoning
    (self.reasoning) above it, folded under "Thinking" (a click or Enter on the title unfolds it).

    append() only records the text; a render loop on the event loop catches the Markdown up with it, so a burst
    of fragments costs one Markdown append, however many arrived.
    """

    DEFAULT_CSS = """
    AssistantMessage { height: auto; }
    AssistantMessage > .raw { display: none; }
    AssistantMessage.-raw > .raw { display: block; }
    AssistantMessage.-raw > Markdown { display: none; }
    """

    def __init__(self, text: str = "", raw: bool = False):
        super().__init__()
        self.text = text
        self.reasoning = ""
        self._thinking: Static | None = None  # mounted with the first reasoning
        self._markdown = Markdown()
        self._raw = Static(text, markup=False, classes="raw")
        self._kick = asyncio.Event()
        self.border_title = "assistant"
        self.set_class(raw, "-raw")

    def compose(self):
        yield self._markdown
        yield self._raw

    def on_mount(self) -> None:
        self._kick.set()
        self.run_worker(self._render_loop(), exclusive=True)

    @property
    def raw(self) -> bool:
        return self.has_class("-raw")

    @property
    def rendered(self) -> bool:
        """True when the visible form shows all of self.text."""
        return self.raw or self._markdown.source == self.text

    def append(self, fragment: str) -> None:
        if not fragment:
            return
        self.text += fragment
        if self.raw:
            self._raw.update(self.text)
        else:
            self._kick.set()

    def append_reasoning(self, fragment: str) -> None:
        if not fragment:
            return
        self.reasoning += fragment
        if self._thinking is None:
            self._thinking = Static(self.reasoning, markup=False, classes="thinking")
            self.mount(Collapsible(self._thinking, title="Thinking", collapsed=True), before=self._markdown)
        else:
            self._thinking.update(self.reasoning)

    def set_raw(self, raw: bool) -> None:
        if raw:
            self._raw.update(self.text)
        else:
            self._kick.set()
        self.set_class(raw, "-raw")

    async def _render_loop(self) -> None:
        while True:
            await self._kick.wait()
            self._kick.clear()
            if self.raw:
                continue
            shown = self._markdown.source
            if shown == self.text:
                continue
            if self.text.startswith(shown):
                await self._markdown.append(self.text[len(shown) :])
            else:
                await self._markdown.update(self.text)


class ErrorLine(Static):
    def __init__(self, text: str):
        super().__init__(f"error: {text}", markup=False)


class Note(Static):
    def __init__(self, text: str):
        super().__init__(text, markup=False)


class Conversation(VerticalScroll):
    can_focus = True

    def on_mount(self) -> None:
        self.anchor()

    def add_user(self, text: str, turn: int | None = None) -> UserMessage:
        w = UserMessage(text, turn)
        self.mount(w)
        return w

    def add_assistant(self, text: str = "", raw: bool = False) -> AssistantMessage:
        w = AssistantMessage(text, raw=raw)
        self.mount(w)
        return w

    def add_error(self, text: str) -> ErrorLine:
        w = ErrorLine(text)
        self.mount(w)
        return w

    def add_note(self, text: str) -> Note:
        w = Note(text)
        self.mount(w)
        return w

    def drop_last_reply(self) -> None:
        """Removes the last assistant message and whatever follows it (its notes)."""
        replies = self.query(AssistantMessage)
        if not replies:
            return
        self.drop_from(replies.last())

    def drop_from(self, widget: Widget) -> None:
        """Removes `widget` (one of the messages) and everything after it."""
        for w in list(self.children[self.children.index(widget) :]):
            w.remove()

    def set_raw(self, raw: bool) -> None:
        for m in self.query(AssistantMessage):
            m.set_raw(raw)

    async def clear(self) -> None:
        await self.remove_children()
