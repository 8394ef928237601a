"""The message input: a multi-line TextArea where Enter sends and Shift+Enter (or Ctrl+J) starts a new line.

    ChatInput.Submitted(text)   # posted on Enter with the whole text; the app clears the input when it accepts it

Many terminals send the same bytes for Enter and Shift+Enter; Ctrl+J (a line feed) works in all of them.
Pasted text keeps its newlines and is never sent by the paste itself.
"""

from __future__ import annotations

from textual import events
from textual.message import Message
from textual.widgets import TextArea

# (keys, what they do): shown on the help screen
KEYS = [
    ("Enter", "send the message"),
    ("Shift+Enter, Ctrl+J", "new line in the message"),
]
NEWLINE_KEYS = ("shift+enter", "ctrl+j", "newline")


class ChatInput(TextArea):
    class Submitted(Message):
        def __init__(self, text: str):
            super().__init__()
            self.text = text

    def __init__(self, **kwargs):
        super().__init__(
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            placeholder="Message the model: Enter sends, Ctrl+J new line, F1 keys",
            **kwargs,
        )

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            self.insert("\n")
            return
        await super()._on_key(event)
