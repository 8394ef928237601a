"""The chat app over the real engine and the tiny test model: a message gets a streamed reply and speeds, and the
second turn shows the cached tokens it reused."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("textual")

from conftest import model_file
from localllm.llm import LLM
from localllm.tui.app import ChatApp
from localllm.tui.conversation import AssistantMessage, ErrorLine
from localllm.tui.reply_worker import ReplyWorker
from localllm.tui.status import StatusBar


@pytest.mark.model
def test_real_model_replies():
    path = model_file("smollm2-135m-instruct-q4_1")

    async def go(llm):
        engine = ReplyWorker(llm, "smollm2:135m")
        app = ChatApp(engine, temperature=0.0, max_tokens=16)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("h", "i", "enter")
            end = time.monotonic() + 20
            while app.reply is not None:
                assert time.monotonic() < end, "no reply from the model in 20 s"
                await pilot.pause(0.05)
            assert not app.query(ErrorLine)
            reply = app.query(AssistantMessage).last()
            assert reply.text.strip()
            assert app.history[-1] == {"role": "assistant", "content": reply.text}
            bar = app.query_one(StatusBar)
            assert bar.decode_tps and bar.prompt_tps and 0 < bar.ctx_used <= 512
            assert "KV f16" in bar.line()
            assert bar.cached_tokens == 0 and "cached" not in bar.line(120)
            # the second turn reuses the conversation's KV, and the status bar says how much
            await pilot.press("m", "o", "r", "e", "enter")
            end = time.monotonic() + 20
            while app.reply is not None:
                assert time.monotonic() < end, "no second reply from the model in 20 s"
                await pilot.pause(0.05)
            assert bar.cached_tokens >= 16
            assert f"{bar.cached_tokens} cached" in bar.line(120)
        assert engine.close(timeout=5)

    with LLM(path, n_threads=2, ctx_size=512) as llm:
        asyncio.run(go(llm))
