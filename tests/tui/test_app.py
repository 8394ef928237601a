"""The chat app driven by Textual's pilot, over the real ReplyWorker adapter and a scripted FakeLLM."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("textual")

from fake_llm import FakeLLM
from localllm.engine import Stats
from localllm.tui.app import ChatApp
from localllm.tui.chat_input import ChatInput
from localllm.tui.conversation import AssistantMessage, ErrorLine, Note, UserMessage
from localllm.tui.help import HelpScreen
from localllm.tui.reply_worker import ReplyWorker
from localllm.tui.status import StatusBar
from textual.widgets import DataTable

SIZE = (80, 24)


def make_app(llm, **kwargs) -> ChatApp:
    return ChatApp(ReplyWorker(llm, "fake:1b"), **kwargs)


async def wait_for(pilot, cond, timeout=5.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.01)


async def type_text(pilot, text: str) -> None:
    await pilot.press(*["space" if c == " " else c for c in text])


async def send(pilot, text: str) -> None:
    await type_text(pilot, text)
    await pilot.press("enter")


async def reply_done(pilot) -> AssistantMessage:
    app = pilot.app
    await wait_for(pilot, lambda: app.reply is None)
    msg = app.query(AssistantMessage).last()
    await wait_for(pilot, lambda: msg.rendered)
    return msg


def test_type_send_stream():
    async def go():
        llm = FakeLLM(["Hello", " **world**", "\n\n```python\nx = 1\n```"], delay=0.005)
        app = make_app(llm, system="Be brief.", temperature=0.5, top_p=0.9, max_tokens=64)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hi there")
            assert app.query_one(ChatInput).text == ""
            msg = await reply_done(pilot)
            assert [u.text for u in app.query(UserMessage)] == ["hi there"]
            assert msg.text == "Hello **world**\n\n```python\nx = 1\n```"
            assert msg._markdown.source == msg.text
            assert app.history == [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": msg.text}]
            messages, sampling = llm.calls[0]
            assert messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"}]
            assert sampling == {"temperature": 0.5, "top_p": 0.9, "max_tokens": 64}
            line = str(app.query_one(StatusBar).content)  # what is on screen
            assert "fake:1b" in line and "pp 123 tg 45.6 t/s" in line
            assert "23/512" in line and "KV f16" in line  # 20 prompt + 3 completion tokens
            assert len(line) <= SIZE[0]
            # the second turn carries the first
            await send(pilot, "more")
            await reply_done(pilot)
            assert [m["role"] for m in llm.calls[1][0]] == ["system", "user", "assistant", "user"]
            assert not app.query(ErrorLine)

    asyncio.run(go())


def test_reasoning_is_shown_folded_and_kept_out_of_the_history():
    async def go():
        from textual.widgets import Collapsible, Static

        llm = FakeLLM(["Paris."], thoughts=["The capital ", "of France."], delay=0.005)
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "capital?")
            msg = await reply_done(pilot)
            assert (msg.reasoning, msg.text) == ("The capital of France.", "Paris.")
            fold = msg.query_one(Collapsible)
            assert fold.title == "Thinking" and fold.collapsed
            assert str(fold.query_one(".thinking", Static).content) == "The capital of France."
            assert app.history[-1] == {"role": "assistant", "content": "Paris."}
            llm.thoughts = []
            await send(pilot, "thanks")  # a reply without reasoning has no fold
            plain = await reply_done(pilot)
            assert not plain.query(Collapsible)

    asyncio.run(go())


def test_newline_keys_do_not_send():
    async def go():
        llm = FakeLLM()
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("a", "ctrl+j", "b", "shift+enter", "c")
            assert app.query_one(ChatInput).text == "a\nb\nc"
            assert llm.calls == [] and not app.query(UserMessage)
            await pilot.press("enter")
            await reply_done(pilot)
            assert app.history[0] == {"role": "user", "content": "a\nb\nc"}
            await pilot.press("enter")  # empty input: nothing is sent
            await pilot.pause()
            assert len(llm.calls) == 1

    asyncio.run(go())


def test_escape_stops_at_once_and_keeps_text():
    async def go():
        # the stream blocks after 5 chunks, as a slow engine step would: Esc must not wait for it
        llm = FakeLLM(endless=True, gate_after=5)
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "go on forever")
            await wait_for(
                pilot,
                lambda: (
                    llm.waiting.is_set()
                    and app.query(AssistantMessage)
                    and app.query(AssistantMessage).last().text == "tok " * 5
                ),
            )
            assert "Esc stops" in app.query_one(StatusBar).line()
            await pilot.press("escape")
            assert app.reply is None  # over at once, while the worker is still inside its step
            msg = app.query(AssistantMessage).last()
            assert msg.text == "tok " * 5
            llm.gate.set()
            assert llm.closed.wait(2.0)  # the worker saw the stop flag after its chunk and closed the stream
            await pilot.pause(0.05)
            assert msg.text == "tok " * 5  # nothing arrives after the stop
            assert [str(n.content) for n in app.query(Note)] == ["stopped"]
            assert app.history[-1] == {"role": "assistant", "content": "tok " * 5}
            assert "F1 help" in app.query_one(StatusBar).line()
            # the app keeps working: another message gets a reply
            llm.endless, llm.gate_after = False, None
            await send(pilot, "short one")
            msg2 = await reply_done(pilot)
            assert msg2.text == "Hello **world**"

    asyncio.run(go())


def test_send_while_busy_is_refused():
    async def go():
        llm = FakeLLM(gate_after=1)
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "one")
            await wait_for(pilot, llm.waiting.is_set)
            await send(pilot, "two")
            assert len(llm.calls) == 1 and app.query_one(ChatInput).text == "two"
            llm.gate.set()
            msg = await reply_done(pilot)
            assert msg.text == "Hello **world**"
            await pilot.press("enter")  # now "two" goes
            await reply_done(pilot)
            assert len(llm.calls) == 2 and llm.calls[1][0][-1] == {"role": "user", "content": "two"}

    asyncio.run(go())


def test_engine_errors_are_lines_and_the_app_keeps_working():
    async def go():
        llm = FakeLLM(error="35 tokens + 1 to generate exceed the context size 32 (ctx_size)")
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello")
            await wait_for(pilot, lambda: app.reply is None)
            errors = app.query(ErrorLine)
            assert len(errors) == 1 and "exceed the context size" in str(errors.first().content)
            assert not app.query(AssistantMessage)  # the empty reply is removed
            assert app.history == []  # the refused turn is not sent again
            # an error in the middle of a stream keeps the text so far
            llm.error, llm.fail_after = None, "template error: bad role"
            await send(pilot, "again")
            await wait_for(pilot, lambda: len(app.query(ErrorLine)) == 2)
            assert app.query(AssistantMessage).last().text == "Hello **world**"
            llm.fail_after = None
            await send(pilot, "third")
            msg = await reply_done(pilot)
            assert msg.text == "Hello **world**"
            assert [m["content"] for m in llm.calls[-1][0]] == ["third"]

    asyncio.run(go())


def test_context_full_note():
    async def go():
        # the engine's stats.context_full tells a full context from max tokens, whatever the token counts say
        llm = FakeLLM(["a", "b"], finish="length", prompt_tokens=510, stats={"context_full": False})
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "long")
            await reply_done(pilot)
            assert str(app.query(Note).last().content) == "max tokens reached"
            assert "512/512" in app.query_one(StatusBar).line()
            llm.prompt_tokens, llm.stats = 40, {"context_full": True}
            await send(pilot, "longer")
            await reply_done(pilot)
            assert "context full" in str(app.query(Note).last().content)

    asyncio.run(go())


def test_high_rate_tokens_are_coalesced():
    async def go():
        n = 3000
        llm = FakeLLM([f"w{i} " for i in range(n)])
        app = make_app(llm)
        wakes = []
        orig = app.on_reply_updated
        app.on_reply_updated = lambda m: (wakes.append(1), orig(m))
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "fast")
            msg = await reply_done(pilot)
            assert msg.text == "".join(f"w{i} " for i in range(n))
            assert len(wakes) < n / 3, len(wakes)

    asyncio.run(go())


def test_help_screen_names_the_keys_and_they_do_what_it_says():
    async def go():
        app = make_app(FakeLLM())
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f1")
            assert isinstance(app.screen, HelpScreen)
            table = app.screen.query_one(DataTable)
            shown = dict(tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count))
            assert shown == dict(app.screen.rows)  # each row on screen, none twice
            expected = {
                "Enter": "send the message",
                "Shift+Enter, Ctrl+J": "new line in the message",
                "Esc": "stop the reply (keeps the text so far)",
                "F1": "this help screen",
                "?": "this help screen (input not focused)",
                "F2": "replies as Markdown / raw text",
                "F3": "copy the last reply to the clipboard",
                "F4": "edit and resend your last message",
                "Ctrl+N": "new conversation",
                "Ctrl+B": "show / hide the saved conversations",
                "Ctrl+R": "regenerate the last reply (or a failed one)",
                "Ctrl+S": "system prompt and sampling settings",
                "Ctrl+O": "pick a model from the store",
                "Ctrl+T": "light / dark theme",
                "PgUp": "scroll the conversation up",
                "PgDn": "scroll the conversation down",
                "Ctrl+Q": "quit",
                "Enter (in the panel)": "resume the highlighted conversation",
                "r (in the panel)": "rename the highlighted conversation",
                "Delete, d (in the panel)": "delete the highlighted conversation",
            }
            for keys, what in expected.items():
                assert shown.get(keys) == what, keys
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            # the keys do what the help says
            await pilot.press("a", "ctrl+j", "b")  # a new line, not a send
            assert app.query_one(ChatInput).text == "a\nb" and not app.query(UserMessage)
            await pilot.press("enter")
            msg = await reply_done(pilot)
            assert [u.text for u in app.query(UserMessage)] == ["a\nb"] and msg.text == "Hello **world**"
            await pilot.press("f2")
            assert app.raw and msg.raw
            copied = []
            app.copy_to_clipboard = copied.append
            await pilot.press("f3")
            assert copied == ["Hello **world**"]
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert not app.query(UserMessage) and app.history == []
            # "?" opens it when the input does not have the focus (there it types a "?")
            await pilot.press("question_mark")
            assert app.query_one(ChatInput).text == "?" and not isinstance(app.screen, HelpScreen)
            app.query_one("#conversation").focus()
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            await pilot.press("f1")
            assert not isinstance(app.screen, HelpScreen)
            await pilot.press("ctrl+q")
            await wait_for(pilot, lambda: app.return_code == 0)

    asyncio.run(go())


def test_help_screen_fits_80x24_and_page_keys_scroll_it():
    async def go():
        app = make_app(FakeLLM(["line\n\n"] * 60))
        async with app.run_test(size=SIZE) as pilot:
            conv = app.query_one("#conversation")
            await send(pilot, "long")
            await reply_done(pilot)
            await pilot.pause(0.1)
            bottom = conv.scroll_y
            assert bottom > 0
            await pilot.press("f1")
            await pilot.pause()
            table = app.screen.query_one(DataTable)
            # the whole box is on screen: its top border (the title) and its bottom border (how to close it)
            assert table.region.y >= 0 and table.region.bottom <= SIZE[1]
            assert "keys" in table.border_title and "closes" in table.border_subtitle
            assert table.max_scroll_y > 0 and table.scroll_y == 0  # taller than 24 rows: it scrolls
            await pilot.press("pagedown")
            await wait_for(pilot, lambda: table.scroll_y == table.max_scroll_y)
            assert conv.scroll_y == bottom  # the conversation behind the help stays put
            await pilot.press("pageup")
            await wait_for(pilot, lambda: table.scroll_y == 0)
            assert conv.scroll_y == bottom
            await pilot.press("escape")
            await pilot.press("pageup")  # closed: PgUp scrolls the conversation again
            await wait_for(pilot, lambda: conv.scroll_y < bottom)

    asyncio.run(go())


def test_raw_toggle_and_new_conversation():
    async def go():
        app = make_app(FakeLLM())
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hi")
            msg = await reply_done(pilot)
            await pilot.press("f2")
            assert msg.raw and str(msg._raw.content) == "Hello **world**"
            await send(pilot, "again")
            msg2 = await reply_done(pilot)
            assert msg2.raw and str(msg2._raw.content) == "Hello **world**"
            await pilot.press("f2")
            assert not msg.raw and not msg2.raw
            await wait_for(pilot, lambda: msg2.rendered)
            await pilot.press("ctrl+n")
            await pilot.pause()
            assert not app.query(UserMessage) and not app.query(AssistantMessage) and app.history == []
            assert "0/512" in app.query_one(StatusBar).line()

    asyncio.run(go())


def test_autoscroll_follows_only_at_the_bottom():
    async def go():
        llm = FakeLLM(["line\n\n"] * 60)
        app = make_app(llm)
        async with app.run_test(size=SIZE) as pilot:
            conv = app.query_one("#conversation")
            await send(pilot, "long")
            await reply_done(pilot)
            await pilot.pause(0.1)
            assert conv.max_scroll_y > 0 and conv.scroll_y == conv.max_scroll_y
            await pilot.press("pageup")
            await pilot.pause(0.1)
            top = conv.scroll_y
            assert top < conv.max_scroll_y
            await send(pilot, "more")
            await reply_done(pilot)
            await pilot.pause(0.1)
            assert conv.scroll_y == top  # the user scrolled up: the view stays where they are

    asyncio.run(go())


def test_status_bar_fits_80_columns():
    bar = StatusBar("qwen2.5-coder-1.5b-instruct-q4_k_m", 32768, "q8_0/q4_0")
    bar.ctx_used, bar.prompt_tps, bar.decode_tps = 12345, 1234.5, 123.4
    line = bar.line(80)
    assert len(line) <= 80 and line.startswith(" qwen2.5-") and "…" in line
    assert "12345/32768" in line and "KV q8_0/q4_0" in line
    assert (
        ReplyWorker(type("L", (), {"ctx_size": 512, "k_type": "q8_0", "v_type": "q4_0"})(), "m").kv_type == "q8_0/q4_0"
    )
    assert StatusBar("m", 512, "f16").line(80) == " m │ pp - tg - t/s │ ctx ▱▱▱▱▱▱▱▱ 0/512 │ KV f16 │ F1 help"
    bar = StatusBar("m", 512, "f16")
    bar.set_stats(Stats(prompt_tokens=40, completion_tokens=2, cached_tokens=32, prompt_tps=205.0, decode_tps=17.0))
    assert bar.line(90) == " m │ pp 205 tg 17.0 t/s, 32 cached │ ctx ▰▱▱▱▱▱▱▱ 42/512 │ KV f16 │ F1 help"
    bar.set_stats(Stats(prompt_tokens=40, completion_tokens=2, draft_proposed=25, draft_accepted=18, decode_tps=41.0))
    assert "tg 41.0 t/s, drafts 72% │" in bar.line(90)


def test_regenerate_copy_and_theme(tmp_path):
    from localllm.tui.history import History

    async def go():
        llm = FakeLLM(["first"])
        h = History(tmp_path / "c.sqlite3")
        app = make_app(llm, saved=h)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hi")
            await reply_done(pilot)
            llm.pieces = ["second"]
            await pilot.press("ctrl+r")
            msg = await reply_done(pilot)
            assert [m.text for m in app.query(AssistantMessage)] == ["second"]
            assert app.history == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "second"}]
            assert llm.calls[1][0] == llm.calls[0][0]  # the same conversation, asked again
            assert h.messages(app.conversation_id) == app.history
            copied = []
            app.copy_to_clipboard = copied.append
            await pilot.press("f3")
            assert copied == [msg.text]
            dark = app.current_theme.dark
            await pilot.press("ctrl+t")
            assert app.current_theme.dark != dark

    asyncio.run(go())


def test_regenerate_after_an_error_resends_the_message(tmp_path):
    from localllm.tui.history import History

    async def go():
        llm = FakeLLM(error="the engine failed to start")
        h = History(tmp_path / "c.sqlite3")
        app = make_app(llm, saved=h)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hello")
            await wait_for(pilot, lambda: app.reply is None and app.query(ErrorLine))
            llm.error = None
            await pilot.press("ctrl+r")
            msg = await reply_done(pilot)
            assert msg.text == "Hello **world**"
            assert [u.text for u in app.query(UserMessage)] == ["hello"]  # in place of the failed attempt
            assert not app.query(ErrorLine)
            assert llm.calls[1][0] == [{"role": "user", "content": "hello"}]
            # a failure in the middle of a later reply: Ctrl+R sends that message again, after the earlier turn
            llm.fail_after = "template error"
            await send(pilot, "second")
            await wait_for(pilot, lambda: app.reply is None and app.query(ErrorLine))
            llm.fail_after = None
            await pilot.press("f4", "ctrl+r")  # taken back into the input, then retried as it was: no edit left
            await reply_done(pilot)
            assert app.editing is None and app.query_one(ChatInput).text == ""
            assert [u.text for u in app.query(UserMessage)] == ["hello", "second"]
            assert len(app.query(AssistantMessage)) == 2 and not app.query(ErrorLine)
            assert [m["content"] for m in llm.calls[-1][0]] == ["hello", "Hello **world**", "second"]
            assert h.messages(app.conversation_id) == app.history and len(app.history) == 4

    asyncio.run(go())
