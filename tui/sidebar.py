"""The side panel of saved conversations, most recent first.

panel = Sidebar()
await panel.show(history.list(), current=conversation_id)
# posts Sidebar.Resume(id) on Enter (or a click), Sidebar.Rename(id, title) on r and Sidebar.Delete(id) on
# Delete / d over an entry, once confirmed: the first press asks (the entry marked, the panel's title a question),
# d, Delete or y again deletes, any other key, a move or leaving the panel keeps it; Esc only answers no
"""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, ListItem, ListView, Static

from .history import Saved

# (keys, what they do): shown on the help screen, with the BINDINGS
KEYS = [("Enter (in the panel)", "resume the highlighted conversation")]
TITLE = "conversations"
ASK = "Delete it? d or y: yes, any other key: no"


class Sidebar(Vertical):
    DEFAULT_CSS = """
    Sidebar ListItem.-delete {
        background: $error 40%;
    }
    """

    class Resume(Message):
        def __init__(self, conversation_id: int):
            super().__init__()
            self.conversation_id = conversation_id

    class Rename(Message):
        def __init__(self, conversation_id: int, title: str):
            super().__init__()
            self.conversation_id = conversation_id
            self.title = title

    class Delete(Message):
        def __init__(self, conversation_id: int):
            super().__init__()
            self.conversation_id = conversation_id

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("r", "rename", "rename the highlighted conversation", key_display="r (in the panel)", show=False),
        Binding(
            "delete,d",
            "delete",
            "delete the highlighted conversation",
            key_display="Delete, d (in the panel)",
            show=False,
        ),
    ]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.saved: list[Saved] = []  # the conversation of each list entry, in order
        self.pending: int | None = None  # the conversation a first d asked to delete

    def compose(self) -> ComposeResult:
        yield Static(TITLE, id="sidebar-title")
        yield ListView(id="saved")

    @property
    def list_view(self) -> ListView:
        return self.query_one(ListView)

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.saved]

    async def show(self, saved: list[Saved], current: int | None = None) -> None:
        self.cancel_delete()
        lv = self.list_view
        await lv.clear()
        self.saved = list(saved)
        await lv.extend(ListItem(Label(s.title, markup=False)) for s in saved)
        if current in self.ids:
            lv.index = self.ids.index(current)

    @property
    def highlighted(self) -> Saved | None:
        i = self.list_view.index
        return self.saved[i] if i is not None and i < len(self.saved) else None

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if s := self.highlighted:
            self.post_message(self.Resume(s.id))

    def action_rename(self) -> None:
        if s := self.highlighted:
            self.post_message(self.Rename(s.id, s.title))

    def action_delete(self) -> None:
        """The first press asks; a second one over the same entry deletes it."""
        s = self.highlighted
        if s is None:
            return
        if self.pending == s.id:
            self.cancel_delete()
            self.post_message(self.Delete(s.id))
            return
        self.cancel_delete()
        self.pending = s.id
        self.list_view.highlighted_child.add_class("-delete")
        self.query_one("#sidebar-title", Static).update(ASK)

    def cancel_delete(self) -> None:
        if self.pending is None:
            return
        self.pending = None
        for item in self.list_view.query(ListItem):
            item.remove_class("-delete")
        self.query_one("#sidebar-title", Static).update(TITLE)

    def on_key(self, event: events.Key) -> None:
        """While a delete is asked: y confirms, Esc (and only that: a reply streaming goes on) or any other key
        but d / Delete keeps the conversation."""
        if self.pending is None:
            return
        if event.key == "y":
            event.stop()
            self.action_delete()
        elif event.key == "escape":
            event.stop()
            self.cancel_delete()
        elif event.key not in ("d", "delete"):
            self.cancel_delete()

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        if self.highlighted is None or self.highlighted.id != self.pending:
            self.cancel_delete()

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self.cancel_delete()
