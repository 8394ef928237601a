"""Snapshots (pytest-textual-snapshot) of the main screens at 80x24, over the scripted FakeLLM (fixed stats) and an
empty or fixed store, so that nothing on screen depends on clocks, timings or paths.

Update them after a deliberate change to the look: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

pytest.importorskip("pytest_textual_snapshot")

from fake_llm import FakeLLM
from localllm.hub import Store
from test_app import make_app, reply_done, send, wait_for
from test_model_picker import stored

SIZE = (80, 24)
REPLY = ["Here is **one** way:", "\n\n```python\nprint('hello')\n```\n\n", "It prints *hello*."]


def app_with(tmp_path, pieces=REPLY, theme=None):
    app = make_app(FakeLLM(pieces), store=Store(tmp_path / "home"))
    if theme:
        app.theme = theme
    return app


async def finished_reply(pilot) -> None:
    await send(pilot, "How do I print in Python?")
    await reply_done(pilot)
    await pilot.pause()


def screen_of(kind):
    async def opened(pilot) -> None:
        await wait_for(pilot, lambda: isinstance(pilot.app.screen, kind))
        await pilot.pause()

    return opened


def test_empty_chat(snap_compare, tmp_path):
    assert snap_compare(app_with(tmp_path), terminal_size=SIZE)


def test_finished_reply(snap_compare, tmp_path):
    assert snap_compare(app_with(tmp_path), terminal_size=SIZE, run_before=finished_reply)


def test_finished_reply_light(snap_compare, tmp_path):
    assert snap_compare(app_with(tmp_path, theme="textual-light"), terminal_size=SIZE, run_before=finished_reply)


def test_help_screen(snap_compare, tmp_path):
    from localllm.tui.help import HelpScreen

    async def run_before(pilot):
        await pilot.press("f1")
        await screen_of(HelpScreen)(pilot)

    assert snap_compare(app_with(tmp_path), terminal_size=SIZE, run_before=run_before)


def test_settings_screen(snap_compare, tmp_path):
    from localllm.tui.settings import SettingsScreen

    async def run_before(pilot):
        await pilot.press("ctrl+s")
        await screen_of(SettingsScreen)(pilot)

    assert snap_compare(app_with(tmp_path), terminal_size=SIZE, run_before=run_before)


def test_settings_screen_invalid_light(snap_compare, tmp_path):
    from localllm.tui.settings import SettingsScreen

    async def run_before(pilot):
        await pilot.press("ctrl+s")
        await screen_of(SettingsScreen)(pilot)
        pilot.app.screen.query_one("#temperature").value = "hot"
        await pilot.press("ctrl+s")
        await pilot.pause()

    assert snap_compare(app_with(tmp_path, theme="textual-light"), terminal_size=SIZE, run_before=run_before)


def test_model_picker_empty_store(snap_compare, tmp_path):
    from localllm.tui.model_picker import ModelPicker

    async def run_before(pilot):
        await pilot.press("ctrl+o")
        await screen_of(ModelPicker)(pilot)

    assert snap_compare(app_with(tmp_path), terminal_size=SIZE, run_before=run_before)


def test_model_picker(snap_compare, tmp_path):
    from localllm.tui.model_picker import ModelPicker

    store = Store(tmp_path / "home")
    stored(store, "fake:1b")
    stored(store, "qwen2.5-coder:0.5b", quant="Q4_K_M")

    async def run_before(pilot):
        await pilot.press("ctrl+o")
        await screen_of(ModelPicker)(pilot)

    assert snap_compare(app_with(tmp_path), terminal_size=SIZE, run_before=run_before)
