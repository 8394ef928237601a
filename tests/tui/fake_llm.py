"""A scripted stand-in for localllm.LLM behind the same chat interface, for timing-sensitive TUI tests.

llm = FakeLLM(["Hello", " **world**"])         # streams those chunks, then a final chunk with stats
FakeLLM(endless=True, delay=0.01)               # streams "tok " until the consumer stops it
FakeLLM(error="context full")                   # chat() raises ValueError, as a template error would
FakeLLM(["a"], fail_after="context full")       # raises ValueError in the middle of the stream
FakeLLM(endless=True, gate_after=3)             # after 3 chunks, blocks (a slow engine step) until llm.gate.set()
FakeLLM(["a"], stats={"context_full": True})  # more fields of the final chunk's Stats
FakeLLM(["yes"], thoughts=["Let me ", "see."])   # a thinking model: chunks of reasoning (Chunk.reasoning) first
llm.calls: [(messages, sampling kwargs)]; llm.closed: set once a stream was closed or ran out
"""

from __future__ import annotations

import threading
import time

from localllm.engine import Chunk, Stats


class FakeLLM:
    ctx_size = 512
    k_type = "f16"
    v_type = "f16"

    def __init__(
        self,
        pieces=("Hello", " **world**"),
        delay=0.0,
        endless=False,
        error=None,
        fail_after=None,
        finish="stop",
        prompt_tokens=20,
        gate_after=None,
        stats=None,
        thoughts=(),
    ):
        self.thoughts = list(thoughts)
        self.pieces = list(pieces)
        self.delay = delay
        self.endless = endless
        self.error = error
        self.fail_after = fail_after
        self.finish = finish
        self.prompt_tokens = prompt_tokens
        self.gate_after = gate_after
        self.stats = dict(stats or {})
        self.gate = threading.Event()
        self.waiting = threading.Event()  # set while a stream is blocked on the gate
        self.calls: list[tuple[list[dict], dict]] = []
        self.closed = threading.Event()

    def chat(self, messages, **sampling):
        self.calls.append(([dict(m) for m in messages], dict(sampling)))
        if self.error:
            raise ValueError(self.error)
        return self._stream()

    def _stream(self):
        n = 0
        try:
            for k, t in enumerate(self.thoughts):
                yield Chunk("", [1000 + k], reasoning=t)
            while self.endless or n < len(self.pieces):
                if n == self.gate_after:
                    self.waiting.set()
                    self.gate.wait()
                    self.waiting.clear()
                if self.delay:
                    time.sleep(self.delay)
                text = "tok " if self.endless else self.pieces[n]
                n += 1
                yield Chunk(text, [n])
            if self.fail_after:
                raise ValueError(self.fail_after)
            stats = Stats(
                prompt_tokens=self.prompt_tokens,
                completion_tokens=n,
                prompt_tps=123.4,
                decode_tps=45.6,
                ctx_size=self.ctx_size,
                **self.stats,
            )
            yield Chunk("", [], self.finish, stats)
        finally:
            self.closed.set()
