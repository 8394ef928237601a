"""The help screen: every key binding of the chat, in one table. F1, ? or Esc closes it.

    app.push_screen(HelpScreen(rows))     # rows: [(keys, description)], as ChatApp.help_rows() builds them
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,f1,question_mark,q", "dismiss", "close help"),
    ]

    def __init__(self, rows: list[tuple[str, str]]):
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static("localllm chat: keys", id="help-title")
            table = DataTable(show_cursor=False, zebra_stripes=True)
            table.add_columns("key", "action")
            for keys, what in self.rows:
                table.add_row(keys, what)
            yield table
            yield Static("Esc, F1 or ? closes this screen", id="help-foot")
