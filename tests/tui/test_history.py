"""Saved conversations: the SQLite History, and the app saving, listing, resuming and deleting through it."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("textual")

from fake_llm import FakeLLM
from localllm.tui.app import ChatApp
from localllm.tui.conversation import AssistantMessage, UserMessage
from localllm.tui.history import History, title_for
from localllm.tui.reply_worker import ReplyWorker
from localllm.tui.sidebar import Sidebar


def test_history_round_trip(tmp_path):
    path = tmp_path / "sub" / "chat.sqlite3"
    h = History(path)
    a = h.create("first", "m")
    h.add(a, "user", "hi")
    h.add(a, "assistant", "Hello!")
    b = h.create("second", "m")
    h.add(b, "user", "x")
    assert [s.title for s in h.list()] == ["second", "first"]
    assert [s.n_messages for s in h.list()] == [1, 2]
    h.add(a, "user", "again")
    assert [s.id for s in h.list()] == [a, b]  # most recently updated first
    h.close()
    h = History(path)  # reopened: all there
    assert h.messages(a) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "again"},
    ]
    h.delete(a)
    assert [s.id for s in h.list()] == [b] and h.messages(a) == []
    assert title_for("  many\n words  here ", 10) == "many word…"


async def wait_for(pilot, cond, timeout=5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.01)


async def send(pilot, text: str) -> None:
    """Sends `text` and waits for its reply to be over: the turn (message and reply) is in the history."""
    app = pilot.app
    n = len(app.history)
    await pilot.press(*text, "enter")
    await wait_for(pilot, lambda: app.reply is None and len(app.history) == n + 2)


def saved_app(tmp_path):
    """A chat app on a fake engine answering "Hello", saving to a fresh History: (history, llm, app)."""
    h = History(tmp_path / "chat.sqlite3")
    llm = FakeLLM(["Hello"])
    return h, llm, ChatApp(ReplyWorker(llm, "fake:1b"), saved=h)


def test_app_saves_lists_resumes_and_deletes(tmp_path):
    async def go():
        h, llm, app = saved_app(tmp_path)
        async with app.run_test(size=(120, 30)) as pilot:
            panel = app.query_one(Sidebar)
            assert panel.display  # wide enough: the panel shows
            await send(pilot, "one")
            await send(pilot, "two")
            first = app.conversation_id
            assert h.messages(first) == [
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "Hello"},
                {"role": "user", "content": "two"},
                {"role": "assistant", "content": "Hello"},
            ]
            await pilot.press("ctrl+n")
            await send(pilot, "three")
            second = app.conversation_id
            assert second != first
            await wait_for(pilot, lambda: panel.ids == [second, first])
            # resume the first: its messages come back on screen and go to the model with the next turn
            panel.list_view.focus()
            panel.list_view.index = 1
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.conversation_id == first)
            await pilot.pause()
            assert [u.text for u in app.query(UserMessage)] == ["one", "two"]
            assert [a.text for a in app.query(AssistantMessage)] == ["Hello", "Hello"]
            app.query_one("#input").focus()
            await send(pilot, "four")
            assert [m["content"] for m in llm.calls[-1][0]] == ["one", "Hello", "two", "Hello", "four"]
            assert len(h.messages(first)) == 6
            # delete the one on screen: the view is cleared
            panel.list_view.focus()
            await wait_for(pilot, lambda: panel.ids == [first, second])
            panel.list_view.index = 0
            await pilot.press("delete", "delete")  # asks, then deletes
            await wait_for(pilot, lambda: panel.ids == [second])
            assert app.conversation_id is None and not app.query(UserMessage)
            assert [s.id for s in h.list()] == [second]
            # Ctrl+B hides and shows the panel
            await pilot.press("ctrl+b")
            assert not panel.display
            await pilot.press("ctrl+b")
            assert panel.display

    asyncio.run(go())


def test_one_key_never_deletes_a_conversation(tmp_path):
    """d asks first: d, Delete or y again deletes; Esc, any other key, a move or leaving the panel keeps it."""

    async def go():
        h, llm, app = saved_app(tmp_path)
        async with app.run_test(size=(120, 30)) as pilot:
            panel = app.query_one(Sidebar)
            title = panel.query_one("#sidebar-title")
            await send(pilot, "one")
            first = app.conversation_id
            await pilot.press("ctrl+n")
            await send(pilot, "two")
            second = app.conversation_id
            await wait_for(pilot, lambda: panel.ids == [second, first])
            panel.list_view.focus()
            panel.list_view.index = 1

            async def asked() -> None:
                await pilot.press("d")
                await pilot.pause(0.05)
                assert [s.id for s in h.list()] == [second, first] and panel.ids == [second, first]
                assert panel.pending == first
                assert panel.list_view.highlighted_child.has_class("-delete")
                assert str(title.render()) == "Delete it? d or y: yes, any other key: no"

            def kept() -> None:
                assert panel.pending is None and panel.ids == [second, first]
                assert [s.id for s in h.list()] == [second, first] and len(h.messages(first)) == 2
                assert not any(i.has_class("-delete") for i in panel.list_view.children)
                assert str(title.render()) == "conversations"

            for no in (["escape"], ["x"], ["n"], ["up"], ["tab"]):
                await asked()
                await pilot.press(*no)
                await pilot.pause()
                kept()
                panel.list_view.focus()
                panel.list_view.index = 1
                await pilot.pause()
            # Esc answers the question only: a reply streaming on goes on
            llm.endless, llm.gate_after = True, 2
            app.query_one("#input").focus()
            await pilot.press("t", "h", "r", "e", "e", "enter")
            await wait_for(pilot, llm.waiting.is_set)
            panel.list_view.focus()
            await wait_for(pilot, lambda: panel.ids == [second, first])
            panel.list_view.index = 1
            await asked()
            await pilot.press("escape")
            await pilot.pause()
            kept()
            assert app.reply is not None  # not stopped
            await pilot.press("escape")  # now Esc stops the reply, as everywhere
            await wait_for(pilot, lambda: app.reply is None)
            llm.gate.set()
            llm.endless, llm.gate_after = False, None
            await wait_for(pilot, lambda: len(panel.ids) == 2)
            panel.list_view.focus()
            panel.list_view.index = panel.ids.index(first)
            await asked()
            await pilot.press("d")
            await wait_for(pilot, lambda: panel.ids == [second])
            assert [s.id for s in h.list()] == [second] and h.messages(first) == []

    asyncio.run(go())


def test_deleting_the_conversation_while_its_reply_streams(tmp_path):
    async def go():
        h, llm, app = saved_app(tmp_path)
        async with app.run_test(size=(120, 30)) as pilot:
            panel = app.query_one(Sidebar)
            await send(pilot, "one")
            first = app.conversation_id
            await wait_for(pilot, lambda: panel.ids == [first])
            llm.endless, llm.gate_after = True, 2
            await pilot.press("t", "w", "o", "enter")
            await wait_for(pilot, llm.waiting.is_set)  # the reply is streaming, its engine step in progress
            panel.list_view.focus()
            panel.list_view.index = 0
            await pilot.press("delete", "y")  # asks, then deletes
            await wait_for(pilot, lambda: panel.ids == [])
            assert app.reply is None and app.conversation_id is None
            assert not app.query(UserMessage) and not app.query(AssistantMessage)
            assert h.list() == [] and h.messages(first) == []  # nothing saved under the deleted id, nothing new
            llm.gate.set()
            assert llm.closed.wait(2.0)
            llm.endless, llm.gate_after = False, None
            app.query_one("#input").focus()
            await send(pilot, "three")  # the app keeps working: a new conversation
            assert [s.id for s in h.list()] == [app.conversation_id]
            assert h.messages(app.conversation_id) == [
                {"role": "user", "content": "three"},
                {"role": "assistant", "content": "Hello"},
            ]

    asyncio.run(go())


def test_narrow_terminal_hides_the_panel(tmp_path):
    async def go():
        app = ChatApp(ReplyWorker(FakeLLM(), "fake:1b"), saved=History(tmp_path / "c.sqlite3"))
        async with app.run_test(size=(80, 24)):
            assert not app.query_one(Sidebar).display

    asyncio.run(go())


def test_rename_persists_and_shows_in_the_panel(tmp_path):
    from localllm.tui.rename import RenameScreen

    async def go():
        h, _, app = saved_app(tmp_path)
        async with app.run_test(size=(120, 30)) as pilot:
            await send(pilot, "what is a monad")
            cid = app.conversation_id
            panel = app.query_one(Sidebar)
            await wait_for(pilot, lambda: panel.ids == [cid])
            panel.list_view.focus()
            panel.list_view.index = 0
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, RenameScreen))
            box = app.screen.query_one("#new-title")
            assert box.value == "what is a monad"
            box.value = "   "
            await pilot.press("enter")  # an empty title is refused, with the reason
            assert isinstance(app.screen, RenameScreen)
            assert "cannot be empty" in str(app.screen.query_one("#rename-foot").content)
            box.value = "Monads,  explained"
            await pilot.press("enter")
            await wait_for(pilot, lambda: [s.title for s in panel.saved] == ["Monads, explained"])
            assert [s.title for s in h.list()] == ["Monads, explained"]
            label = panel.list_view.children[0].query_one("Label")
            assert str(label.content) == "Monads, explained"
            # Esc leaves the title as it was
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, RenameScreen))
            await pilot.press("x", "escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, RenameScreen))
            assert [s.title for s in h.list()] == ["Monads, explained"]
            h.rename(cid, "again")  # the file is the truth: a fresh History reads the new title
            assert [s.title for s in History(tmp_path / "chat.sqlite3").list()] == ["again"]

    asyncio.run(go())
