"""The side panel of saved conversations, most recent first.

    panel = Sidebar()
    await panel.show(history.list(), current=conversation_id)
    # posts Sidebar.Resume(id) on Enter (or a click) and Sidebar.Delete(id) on Delete / d over an entry
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, ListItem, ListView, Static

from .history import Saved

# (keys, what they do): shown on the help screen
KEYS = [
    ("Enter (in the panel)", "resume the highlighted conversation"),
    ("Delete, d (in the panel)", "delete the highlighted conversation"),
]


class Sidebar(Vertical):
    class Resume(Message):
        def __init__(self, conversation_id: int):
            super().__init__()
            self.conversation_id = conversation_id

    class Delete(Message):
        def __init__(self, conversation_id: int):
            super().__init__()
            self.conversation_id = conversation_id

    BINDINGS: ClassVar[list[Binding]] = [Binding("delete,d", "delete", "delete the highlighted conversation", show=False)]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.ids: list[int] = []  # conversation id of each list entry, in order

    def compose(self) -> ComposeResult:
        yield Static("conversations", id="sidebar-title")
        yield ListView(id="saved")

    @property
    def list_view(self) -> ListView:
        return self.query_one(ListView)

    async def show(self, saved: list[Saved], current: int | None = None) -> None:
        lv = self.list_view
        await lv.clear()
        self.ids = [s.id for s in saved]
        await lv.extend(ListItem(Label(s.title, markup=False)) for s in saved)
        if current in self.ids:
            lv.index = self.ids.index(current)

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        i = self.list_view.index
        if i is not None and i < len(self.ids):
            self.post_message(self.Resume(self.ids[i]))

    def action_delete(self) -> None:
        i = self.list_view.index
        if i is not None and i < len(self.ids):
            self.post_message(self.Delete(self.ids[i]))
