"""The help screen: every key binding of the chat, in one table. F1, ? or Esc closes it; PgUp / PgDn (and the
arrows) scroll it when it is taller than the terminal, its title and closing hint staying on its border.

    app.push_screen(HelpScreen(rows))     # rows: [(keys, description)], as ChatApp.help_rows() builds them
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import DataTable

TITLE = "localllm chat: keys"
FOOT = "Esc, F1 or ? closes · PgUp, PgDn scroll"


class HelpScreen(ModalScreen):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,f1,question_mark,q", "dismiss", "close help"),
        Binding("pageup", "page(-1)", "scroll the help up"),
        Binding("pagedown", "page(1)", "scroll the help down"),
    ]

    def __init__(self, rows: list[tuple[str, str]]):
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = DataTable(id="help", show_cursor=False, zebra_stripes=True)
        table.border_title, table.border_subtitle = TITLE, FOOT
        table.add_columns("key", "action")
        for keys, what in self.rows:
            table.add_row(keys, what)
        yield table

    @property
    def table(self) -> DataTable:
        return self.query_one(DataTable)

    def action_page(self, direction: int) -> None:
        if direction < 0:
            self.table.scroll_page_up()
        else:
            self.table.scroll_page_down()
