"""The reply worker: runs `LLM.chat` on a worker thread, one reply at a time, and hands its text to the UI.

    worker = ReplyWorker(llm, model_name="smollm2:135m", sampling={"top_k": 40})   # every reply's fixed settings
    reply = worker.start(messages, notify=wake, temperature=0.8, top_p=0.95, max_tokens=None)
    # worker thread: wake(reply) each time the reply goes from nothing pending to something pending
    text, end = reply.take()      # UI thread: all text since the last take; end: an End once the reply is over
    reply.stop()                  # Esc: take() returns End("stopped") at once; the worker quits after its chunk
    worker.close()                # waits for the worker to let go of the model (before llm.close())
    worker.swap(new_llm, "qwen2.5-coder:0.5b")   # waits likewise, then replies use new_llm; the old one is closed

llm: anything with `.chat(messages, **sampling)` -> iterator of chunks (.text, .token_ids; the last has
.finish_reason and .stats), `.ctx_size`, and optionally `.k_type` / `.v_type`. Token updates are coalesced:
however fast chunks arrive, the UI is woken once per take(). Only one reply uses the model at a time: a new
reply's worker waits for the previous worker to let go of it, so start() never blocks the caller.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class End:
    finish_reason: str  # "stop", "length", "stopped" (by the user) or "error"
    stats: Any | None = None  # the engine's Stats (prompt_tokens, completion_tokens, prompt_tps, ...) or None
    error: str | None = None  # the engine's message when finish_reason == "error"


class Reply:
    """One assistant reply in progress; written by its worker thread, read by the UI thread through take()."""

    def __init__(self, notify: Callable[[Reply], None]):
        self._notify = notify
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._reasoning: list[str] = []  # a thinking model's reasoning since the last take_reasoning()
        self._end: End | None = None
        self._taken_end = False
        self._stop = threading.Event()
        self.completion_tokens = 0  # token ids received so far

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def stop(self) -> None:
        """Ends the reply now: text already generated stays, anything the worker produces after this is dropped."""
        with self._lock:
            self._stop.set()
            if self._end is None:
                self._end = End("stopped")

    def take(self) -> tuple[str, End | None]:
        """(text since the last take, End the first time the reply is seen over, else None)."""
        with self._lock:
            text = "".join(self._pending)
            self._pending.clear()
            end = None
            if self._end is not None and not self._taken_end:
                end, self._taken_end = self._end, True
            return text, end

    def take_reasoning(self) -> str:
        """The reply's reasoning since the last call (text/reasoning.py keeps it out of the text)."""
        with self._lock:
            text = "".join(self._reasoning)
            self._reasoning.clear()
            return text

    # -- worker side ---------------------------------------------------------------------------------
    def _push(self, text: str = "", n_tokens: int = 0, end: End | None = None, reasoning: str = "") -> bool:
        """Adds text, reasoning (and the end); False once the reply is stopped. Wakes the UI when it had nothing
        pending."""
        with self._lock:
            if self._stop.is_set() or self._end is not None:
                return False
            wake = not self._pending and not self._reasoning
            if text:
                self._pending.append(text)
            if reasoning:
                self._reasoning.append(reasoning)
            self.completion_tokens += n_tokens
            if end is not None:
                self._end = end
                wake = True
            elif not text and not reasoning:
                wake = False
        if wake:
            self._notify(self)
        return True


class ReplyWorker:
    def __init__(self, llm, model_name: str, sampling: dict | None = None):
        """sampling: keyword arguments of every reply's llm.chat, under each start()'s own."""
        self.llm = llm
        self.model_name = model_name
        self.sampling = dict(sampling or {})
        self._model_lock = threading.Lock()  # held by the worker that is using the model

    @property
    def ctx_size(self) -> int:
        return int(self.llm.ctx_size)

    @property
    def kv_type(self) -> str:
        """ "f16", or "q8_0/q4_0" (K/V) when K and V differ."""
        k = getattr(self.llm, "k_type", "f16")
        v = getattr(self.llm, "v_type", k)
        return k if k == v else f"{k}/{v}"

    def start(self, messages: list[dict], notify: Callable[[Reply], None], **sampling) -> Reply:
        """Starts a reply to `messages` ([{"role", "content"}], oldest first) on a daemon thread; notify(reply) is
        called from that thread, possibly before start() returns."""
        reply = Reply(notify)
        msgs = [dict(m) for m in messages]
        threading.Thread(target=self._run, args=(reply, msgs, sampling), name="localllm-chat", daemon=True).start()
        return reply

    def close(self, reply: Reply | None = None, timeout: float = 30.0) -> bool:
        """Stops `reply` (if given) and waits for the worker to let go of the model, so the model can be freed.
        False when it still holds it after `timeout` seconds."""
        if reply is not None:
            reply.stop()
        if self._model_lock.acquire(timeout=timeout):
            self._model_lock.release()
            return True
        return False

    def swap(self, llm, model_name: str) -> None:
        """Makes `llm` the model of the next replies and closes the one before (once no reply is using it)."""
        with self._model_lock:
            old, self.llm, self.model_name = self.llm, llm, model_name
        close = getattr(old, "close", None)
        if close is not None:
            close()

    def _run(self, reply: Reply, messages: list[dict], sampling: dict) -> None:
        with self._model_lock:
            if reply.stopped:
                return
            stream = None
            try:
                stream = self.llm.chat(messages, **{**self.sampling, **sampling})
                for chunk in stream:
                    if reply.stopped:
                        break
                    reason = getattr(chunk, "finish_reason", None)
                    ok = reply._push(
                        chunk.text,
                        len(chunk.token_ids),
                        End(reason, getattr(chunk, "stats", None)) if reason else None,
                        getattr(chunk, "reasoning", ""),
                    )
                    if not ok:
                        break
                else:
                    reply._push(end=End("stop"))  # a stream that ended without a finish_reason
            except Exception as e:
                reply._push(end=End("error", error=str(e) or type(e).__name__))
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    with contextlib.suppress(Exception):  # a failing close must not kill the worker's report
                        close()
