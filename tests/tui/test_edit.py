"""Edit and resend (F4): the last message comes back into the input, and sending it replaces that turn and the
reply after it, on screen, in what the model is sent, and in the saved conversation."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("textual")

from fake_llm import FakeLLM
from localllm.tui.chat_input import ChatInput
from localllm.tui.conversation import AssistantMessage, ErrorLine, UserMessage
from localllm.tui.history import History
from test_app import SIZE, make_app, reply_done, send, type_text, wait_for


def test_edit_and_resend_replaces_the_turn(tmp_path):
    async def go():
        h = History(tmp_path / "c.sqlite3")
        llm = FakeLLM(["one"])
        app = make_app(llm, saved=h)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "first")
            await reply_done(pilot)
            llm.pieces = ["two"]
            await send(pilot, "secnd")
            await reply_done(pilot)
            box = app.query_one(ChatInput)
            await pilot.press("f4")
            assert box.text == "secnd" and "editing" in str(box.border_title)
            await pilot.press("backspace", "backspace")
            await type_text(pilot, "ond")
            llm.pieces = ["three"]
            await pilot.press("enter")
            await reply_done(pilot)
            assert [u.text for u in app.query(UserMessage)] == ["first", "second"]
            assert [a.text for a in app.query(AssistantMessage)] == ["one", "three"]
            expected = [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "one"},
                {"role": "user", "content": "second"},
                {"role": "assistant", "content": "three"},
            ]
            assert app.history == expected
            assert llm.calls[-1][0] == expected[:3]  # the model never saw "secnd" again
            assert h.messages(app.conversation_id) == expected
            assert not box.border_title and box.text == ""

            # Esc gives up the edit: nothing changes
            await pilot.press("f4")
            assert box.text == "second"
            await pilot.press("escape")
            assert box.text == "" and app.editing is None
            await send(pilot, "third")
            await reply_done(pilot)
            assert [u.text for u in app.query(UserMessage)] == ["first", "second", "third"]

    asyncio.run(go())


def test_edit_a_refused_message():
    async def go():
        llm = FakeLLM(["ok"])
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello")
            await reply_done(pilot)
            llm.error = "35 tokens exceed the context size 32"
            await send(pilot, "a very long message")
            await wait_for(pilot, lambda: app.reply is None and app.query(ErrorLine))
            llm.error = None
            await pilot.press("f4")
            assert app.query_one(ChatInput).text == "a very long message"
            await pilot.press(*["backspace"] * 15)
            await pilot.press("enter")
            await reply_done(pilot)
            assert not app.query(ErrorLine)  # the refused turn and its error line are gone
            assert [u.text for u in app.query(UserMessage)] == ["hello", "a ve"]
            assert app.history[:2] == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "ok"}]
            assert llm.calls[-1][0][-1] == {"role": "user", "content": "a ve"} and len(llm.calls[-1][0]) == 3

    asyncio.run(go())


def test_nothing_to_edit_and_busy():
    async def go():
        llm = FakeLLM(gate_after=1)
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f4")
            assert app.editing is None and app.query_one(ChatInput).text == ""
            await send(pilot, "go")
            await wait_for(pilot, llm.waiting.is_set)
            await pilot.press("f4")  # a reply in progress: no edit
            assert app.editing is None and app.query_one(ChatInput).text == ""
            llm.gate.set()
            await reply_done(pilot)

    asyncio.run(go())
