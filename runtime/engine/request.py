"""One request on the engine thread: its scheduler Sequence, its sampler (own generator, own seed), and what turns
sampled tokens into the chunks its stream receives (detokenized text, stop strings, statistics).

    req = Request(seq, stream, tokenizer, ctx_size, submitted=time.perf_counter())
    tid = req.sample(logits_row)             # a token from this request's distribution and generator
    done = req.emit(tid, seq_finish)         # delivers a chunk; True when the request is over (stop string
                                             # included: the engine then aborts its sequence)
    req.fail(exc) / req.abort()              # the stream's last item: an exception, or a chunk "abort"
logprobs (None or n): each token chunk also carries its TokenLogprob under the model's distribution (raw logits,
before the sampler's truncation and temperature) with the n most likely alternatives.

Engine thread only. Token ids in stop_token_ids end the request without being emitted.
"""

from __future__ import annotations

import time

import numpy as np

from ..sampling import Sampler, StopChecker
from ..tokenizer import Tokenizer
from .output import Chunk, Stats, TokenLogprob, token_logprob
from .sequence import FinishReason, Sequence
from .stream import RequestStream


class Request:
    def __init__(
        self,
        seq: Sequence,
        stream: RequestStream,
        tokenizer: Tokenizer,
        ctx_size: int,
        submitted: float,
        logprobs: int | None = None,
    ):
        self.seq = seq
        self.stream = stream
        self.sampler = Sampler(seq.params)
        self._stop = StopChecker(seq.params.stop)
        self._detok = tokenizer.detokenizer()
        self.stats = Stats(prompt_tokens=seq.num_prompt_tokens, ctx_size=ctx_size)
        self._submitted = submitted
        self._started: float | None = None  # its first scheduled step began
        self._first: float | None = None  # its first token was sampled
        self.finished = False
        self._logprobs = logprobs
        self._last_logprob: TokenLogprob | None = None

    def scheduled(self, now: float) -> None:
        """Called for every step the request is in; the first one starts the prefill clock."""
        if self._started is None:
            self._started = now
            self.stats.cached_tokens = self.seq.num_cached_tokens

    def sample(self, logits: np.ndarray) -> int:
        tid = self.sampler.sample(logits, self.seq.token_ids)
        if self._logprobs is not None:
            self._last_logprob = token_logprob(logits, tid, self._logprobs)
        return tid

    def emit(self, token_id: int, reason: FinishReason | None) -> bool:
        """token_id: just appended to seq (reason: why the sequence stops now, or None). Returns True when the
        request is over (its last chunk delivered)."""
        now = time.perf_counter()
        st = self.stats
        if self._first is None:
            self._first = now
            st.ttft_s = now - self._submitted
            computed = st.prompt_tokens - st.cached_tokens
            st.prompt_tps = computed / max(now - (self._started or now), 1e-9)
        if reason is FinishReason.STOP:
            return self._end("stop", now)
        st.completion_tokens += 1
        text = self._stop.push(self._detok.push(token_id))
        lp = [self._last_logprob] if self._last_logprob is not None else None
        if self._stop.stopped:
            if text:
                self.stream._deliver(Chunk(text, [token_id], logprobs=lp))
            return self._end("stop", now)
        self.stream._deliver(Chunk(text, [token_id], logprobs=lp))
        if reason is FinishReason.CONTEXT:
            st.context_full = True
            return self._end("length", now)
        if reason is not None:
            return self._end("length", now)
        return False

    def abort(self) -> None:
        """The client cancelled: the last chunk says "abort" (nobody may be reading it)."""
        self._end("abort", time.perf_counter())

    def fail(self, exc: BaseException) -> None:
        if not self.finished:
            self.finished = True
            self.stream._deliver(exc)

    def _end(self, reason: str, now: float) -> bool:
        st = self.stats
        if self._first is not None and st.completion_tokens > 1:
            st.decode_tps = (st.completion_tokens - 1) / max(now - self._first, 1e-9)
        tail = "" if self._stop.stopped else self._stop.push(self._detok.flush()) + self._stop.flush()
        self.finished = True
        self.stream._deliver(Chunk(tail, [], reason, st))
        return True
