"""A conversation's settings (system prompt, temperature, top-p, max tokens) and the screen that edits them.

    s = Settings(system="Be brief.", temperature=0.8, top_p=0.95, max_tokens=None)   # ValueError when out of range
    s.sampling() -> {"temperature": 0.8, "top_p": 0.95, "max_tokens": None}         # LLM.chat's keyword arguments
    Settings.parse(system, "0.8", "0.95", "")   # from the screen's text fields; ValueError with a message for people
    Settings.from_dict(saved, default)          # what History.settings() holds, over `default`; bad values: default's
    app.push_screen(SettingsScreen(s), callback)   # callback(Settings) on save (Ctrl+S or Enter), None on Esc

The ranges are the engine's own (SamplingParams), so a value the screen accepts never fails in LLM.chat.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TextArea

from ..sampling import SamplingParams


@dataclass(frozen=True)
class Settings:
    system: str | None = None
    temperature: float = 0.8
    top_p: float = 0.95
    max_tokens: int | None = None

    def __post_init__(self):
        if self.system is not None and not isinstance(self.system, str):
            raise ValueError(f"the system prompt must be text, got {self.system!r}")
        SamplingParams(**self.sampling())

    def sampling(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, saved: dict, default: Settings) -> Settings:
        known = {k: v for k, v in saved.items() if k in cls.__dataclass_fields__}
        try:
            return replace(default, **known)
        except (ValueError, TypeError):
            return default

    @classmethod
    def parse(cls, system: str, temperature: str, top_p: str, max_tokens: str) -> Settings:
        def number(name: str, text: str) -> float:
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"{name} must be a number, got {text.strip()!r}") from None

        n = max_tokens.strip()
        if n and (not n.isdigit() or int(n) < 1):  # a reply of 0 tokens is the API's; a chat turn asks for one
            raise ValueError(f"max tokens must be a whole number of at least 1 (empty: no limit), got {n!r}")
        try:
            return cls(
                system=system.strip() or None,
                temperature=number("temperature", temperature),
                top_p=number("top-p", top_p),
                max_tokens=int(n) if n else None,
            )
        except ValueError as e:  # the engine's field names, as the screen spells them
            raise ValueError(str(e).replace("top_p", "top-p").replace("max_tokens", "max tokens")) from None


class SettingsScreen(ModalScreen[Settings | None]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("ctrl+s", "save", "save the settings"),
        Binding("escape", "dismiss(None)", "cancel"),
    ]

    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings

    def compose(self) -> ComposeResult:
        s = self.settings
        with Vertical(id="settings"):
            yield Static("Settings of this conversation", id="settings-title")
            yield Label("System prompt")
            yield TextArea(s.system or "", id="system", soft_wrap=True, show_line_numbers=False, tab_behavior="focus")
            with Grid(id="settings-fields"):
                yield Label("Temperature")
                yield Input(f"{s.temperature:g}", id="temperature", placeholder="0 = greedy")
                yield Label("Top-p")
                yield Input(f"{s.top_p:g}", id="top_p", placeholder="1 = off")
                yield Label("Max tokens")
                yield Input(
                    "" if s.max_tokens is None else str(s.max_tokens), id="max_tokens", placeholder="empty = no limit"
                )
            yield Static("", id="settings-error", markup=False)
            with Horizontal(id="settings-buttons"):
                yield Button("Save", variant="primary", id="save")
                yield Button("Cancel", id="cancel")
            yield Static("Ctrl+S or Enter saves, Esc cancels", id="settings-foot")

    def on_mount(self) -> None:
        self.query_one("#system", TextArea).focus()

    def action_save(self) -> None:
        try:
            s = Settings.parse(
                self.query_one("#system", TextArea).text,
                self.query_one("#temperature", Input).value,
                self.query_one("#top_p", Input).value,
                self.query_one("#max_tokens", Input).value,
            )
        except ValueError as e:
            self.query_one("#settings-error", Static).update(f"✗ {e}")
            return
        self.dismiss(s)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_save()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
