"""Per-conversation settings: parsing and validation, the settings screen, the engine's sampling arguments, and
saving them with the conversation (restored on resume, reset by a new conversation)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

pytest.importorskip("textual")

from fake_llm import FakeLLM
from localllm.tui.history import History
from localllm.tui.settings import Settings, SettingsScreen
from localllm.tui.sidebar import Sidebar
from test_app import SIZE, make_app, reply_done, send, type_text, wait_for
from textual.widgets import Input, TextArea


def test_parse_and_validate():
    s = Settings.parse("  Be brief. ", "0.2", "0.5", "64")
    assert s == Settings("Be brief.", 0.2, 0.5, 64)
    assert s.sampling() == {"temperature": 0.2, "top_p": 0.5, "max_tokens": 64}
    assert Settings.parse("", "0", "1", " ") == Settings(None, 0.0, 1.0, None)
    for args, words in [
        (("", "hot", "1", ""), "temperature must be a number, got 'hot'"),
        (("", "-1", "1", ""), "temperature must be in [0, inf), got -1.0"),
        (("", "nan", "1", ""), "temperature must be a finite number"),
        (("", "1", "0", ""), "top-p must be in (0, 1], got 0.0"),
        (("", "1", "x", ""), "top-p must be a number"),
        (("", "1", "1", "1.5"), "max tokens must be a whole number"),
        (("", "1", "1", "0"), "max tokens must be"),
    ]:
        with pytest.raises(ValueError) as e:
            Settings.parse(*args)
        assert words in str(e.value), (args, str(e.value))
    default = Settings("sys", 0.8, 0.95, None)
    assert Settings.from_dict({"temperature": 0.1, "unknown": 1}, default) == Settings("sys", 0.1, 0.95, None)
    assert Settings.from_dict({"temperature": "hot"}, default) == default  # a damaged saved value


def test_history_keeps_settings_and_opens_old_files(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)  # a file from before settings were saved
    db.executescript(
        "CREATE TABLE conversations (id INTEGER PRIMARY KEY, title TEXT NOT NULL, model TEXT NOT NULL, "
        "created REAL NOT NULL, updated REAL NOT NULL);"
        "INSERT INTO conversations VALUES (1, 'old', 'm', 0, 0);"
    )
    db.commit()
    db.close()
    h = History(path)
    assert h.settings(1) == {} and [s.title for s in h.list()] == ["old"]
    h.set_settings(1, {"temperature": 0.3})
    h.close()
    assert History(path).settings(1) == {"temperature": 0.3}


async def open_settings(pilot) -> SettingsScreen:
    await pilot.press("ctrl+s")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, SettingsScreen))
    return pilot.app.screen


def set_field(screen: SettingsScreen, field: str, value: str) -> None:
    if field == "system":
        screen.query_one("#system", TextArea).load_text(value)
    else:
        screen.query_one(f"#{field}", Input).value = value


def test_settings_reach_the_engine_and_bad_values_are_refused():
    async def go():
        llm = FakeLLM(["ok"])
        app = make_app(llm, temperature=0.8, top_p=0.95)
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_settings(pilot)
            assert screen.query_one("#temperature", Input).value == "0.8"
            set_field(screen, "temperature", "abc")
            await pilot.press("ctrl+s")
            await pilot.pause()
            assert app.screen is screen  # refused: the screen stays, with the reason
            assert "temperature must be a number, got 'abc'" in str(screen.query_one("#settings-error").content)
            set_field(screen, "temperature", "0.25")
            set_field(screen, "top_p", "2")
            screen.query_one("#top_p", Input).focus()
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is screen and "top-p must be in (0, 1]" in str(
                screen.query_one("#settings-error").content
            )
            set_field(screen, "top_p", "0.5")
            set_field(screen, "max_tokens", "32")
            set_field(screen, "system", "You are a pirate.")
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
            await send(pilot, "hi")
            await reply_done(pilot)
            messages, sampling = llm.calls[-1]
            assert sampling == {"temperature": 0.25, "top_p": 0.5, "max_tokens": 32}
            assert messages[0] == {"role": "system", "content": "You are a pirate."}
            # Esc leaves them as they were
            screen = await open_settings(pilot)
            assert screen.query_one("#max_tokens", Input).value == "32"
            set_field(screen, "temperature", "1.5")
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
            assert app.settings.temperature == 0.25
            # a new conversation starts from the command line's settings
            await pilot.press("ctrl+n")
            await send(pilot, "again")
            await reply_done(pilot)
            assert llm.calls[-1][1] == {"temperature": 0.8, "top_p": 0.95, "max_tokens": None}
            assert llm.calls[-1][0][0]["role"] == "user"

    asyncio.run(go())


def test_settings_are_saved_and_restored_on_resume(tmp_path):
    async def go():
        h = History(tmp_path / "c.sqlite3")
        llm = FakeLLM(["ok"])
        app = make_app(llm, saved=h, temperature=0.8)
        async with app.run_test(size=(120, 30)) as pilot:
            screen = await open_settings(pilot)  # before the conversation exists: kept until it is saved
            set_field(screen, "temperature", "0.1")
            await pilot.press("ctrl+s")
            await send(pilot, "first")
            await reply_done(pilot)
            first = app.conversation_id
            assert h.settings(first)["temperature"] == 0.1
            screen = await open_settings(pilot)  # once it exists: saved at once
            set_field(screen, "system", "Answer in French.")
            await pilot.press("ctrl+s")
            await wait_for(pilot, lambda: h.settings(first).get("system") == "Answer in French.")
            await pilot.press("ctrl+n")
            await send(pilot, "second")
            await reply_done(pilot)
            assert h.settings(app.conversation_id)["temperature"] == 0.8
            panel = app.query_one(Sidebar)
            await wait_for(pilot, lambda: panel.ids == [app.conversation_id, first])
            panel.list_view.focus()
            panel.list_view.index = 1
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.conversation_id == first)
            assert app.settings == Settings("Answer in French.", 0.1, 0.95, None)
            app.query_one("#input").focus()
            await type_text(pilot, "more")
            await pilot.press("enter")
            await reply_done(pilot)
            messages, sampling = llm.calls[-1]
            assert sampling["temperature"] == 0.1 and messages[0]["content"] == "Answer in French."

    asyncio.run(go())
