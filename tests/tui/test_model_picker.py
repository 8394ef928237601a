"""The model picker (Ctrl+O): the store's models, the pull hint when it is empty, and switching the engine to the
chosen model on a worker (a failed load is an error line and the old model stays)."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

pytest.importorskip("textual")

from conftest import model_file
from fake_llm import FakeLLM
from localllm.hub import Store, catalog
from localllm.tui.conversation import AssistantMessage, ErrorLine, Note
from localllm.tui.model_picker import ModelPicker
from localllm.tui.status import StatusBar
from test_app import SIZE, make_app, reply_done, send, wait_for
from textual.widgets import OptionList


def stored(store: Store, name: str, target: Path | None = None, quant: str = "Q4_0") -> None:
    """Puts `name` in the store: a small file, or a link to `target` (a real model, not copied)."""
    staged = store.tmp(name) / "in.gguf"
    if target is None:
        staged.write_bytes(b"GGUF" + bytes(60))
    else:
        os.symlink(target, staged)
    store.commit(name, [staged], [f"{name.replace(':', '-')}.gguf"], {"sha256": ["0" * 64], "quant": quant})


async def open_picker(pilot) -> ModelPicker:
    await pilot.press("ctrl+o")
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, ModelPicker))
    return pilot.app.screen


def test_empty_store_says_how_to_pull(tmp_path):
    async def go():
        app = make_app(FakeLLM(), store=Store(tmp_path))
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_picker(pilot)
            text = str(screen.query_one("#picker-empty").content)
            assert "No models in the store" in text and f"localllm pull {catalog.load().default}" in text
            assert not screen.query(OptionList)
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, ModelPicker))
            assert app.worker.model_name == "fake:1b"

    asyncio.run(go())


def test_pick_switches_the_model(tmp_path):
    async def go():
        store = Store(tmp_path)
        stored(store, "fake:1b")
        stored(store, "other:2b", quant="Q8_0")
        opened = []
        loaded = threading.Event()

        def load(path):
            opened.append(path)
            loaded.wait(5)  # a slow load: the app keeps working meanwhile
            return FakeLLM(["from the other"])

        app = make_app(FakeLLM(["from the first"]), store=store, load_model=load)
        async with app.run_test(size=SIZE) as pilot:
            await send(pilot, "hi")
            await reply_done(pilot)
            screen = await open_picker(pilot)
            options = screen.query_one(OptionList)
            assert [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)] == [
                "● fake:1b  64 B  Q4_0",
                "  other:2b  64 B  Q8_0",
            ]
            assert options.highlighted == 0  # the current model
            await pilot.press("down", "enter")
            await wait_for(pilot, lambda: not isinstance(app.screen, ModelPicker) and opened)
            assert opened == [store.get("other:2b").path]
            assert app.loading == "other:2b" and "loading other:2b" in str(app.query(Note).last().content)
            await send(pilot, "not now")  # refused while loading; the text stays in the input
            assert len(app.history) == 2 and app.query_one("#input").text == "not now"
            loaded.set()
            await wait_for(pilot, lambda: app.loading is None)
            assert app.worker.model_name == "other:2b" and "other:2b" in app.query_one(StatusBar).line()
            assert str(app.query(Note).last().content) == "now chatting with other:2b"
            await pilot.press("enter")
            msg = await reply_done(pilot)
            assert msg.text == "from the other"
            assert app.worker.llm.calls[0][0][0] == {"role": "user", "content": "hi"}  # the conversation goes on

    asyncio.run(go())


def test_load_error_is_a_line_and_the_old_model_stays(tmp_path):
    def load(path):
        raise ValueError(f"{path.name}: not a GGUF file")

    async def go():
        store = Store(tmp_path)
        stored(store, "broken:1b")
        app = make_app(FakeLLM(["still here"]), store=store, load_model=load)
        async with app.run_test(size=SIZE) as pilot:
            await open_picker(pilot)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.query(ErrorLine))
            assert "could not load broken:1b: broken-1b.gguf: not a GGUF file" in str(
                app.query(ErrorLine).first().content
            )
            assert app.loading is None and app.worker.model_name == "fake:1b"
            await send(pilot, "hi")
            assert (await reply_done(pilot)).text == "still here"

    asyncio.run(go())


@pytest.mark.model
def test_pick_a_real_model(tmp_path):
    from localllm.llm import LLM

    path = model_file("smollm2-135m-instruct-q4_1")

    async def go():
        store = Store(tmp_path)
        stored(store, "smollm2:135m", target=path)
        app = make_app(
            FakeLLM(),
            store=store,
            temperature=0.0,
            max_tokens=8,
            load_model=lambda p: LLM(p, n_threads=2, ctx_size=512),
        )
        async with app.run_test(size=SIZE) as pilot:
            await open_picker(pilot)
            await pilot.press("enter")
            await wait_for(pilot, lambda: app.loading is None, timeout=30)
            assert not app.query(ErrorLine) and app.worker.ctx_size == 512
            await send(pilot, "hi")
            await wait_for(pilot, lambda: app.reply is None, timeout=30)
            assert not app.query(ErrorLine) and app.query(AssistantMessage).last().text.strip()
        assert app.worker.close(timeout=5)
        app.worker.llm.close()

    asyncio.run(go())
