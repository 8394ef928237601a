"""The rename box: one line with a conversation's title; Enter saves it, Esc cancels.

    app.push_screen(RenameScreen("old title"), callback)   # callback(new title, on one line) or None on Esc
An empty title is refused with a message in the box.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class RenameScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, title: str):
        super().__init__()
        self.old_title = title

    def compose(self) -> ComposeResult:
        with Vertical(id="rename"):
            yield Static("Rename the conversation", id="rename-title")
            yield Input(self.old_title, id="new-title")
            yield Static("Enter saves, Esc cancels", id="rename-foot", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        title = " ".join(event.value.split())
        if not title:
            self.query_one("#rename-foot", Static).update("A title cannot be empty (Esc cancels).")
            return
        self.dismiss(title)
