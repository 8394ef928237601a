"""One request on the engine thread: its scheduler Sequence, its sampler (own generator, own seed), and what turns
sampled tokens into the chunks its stream receives (detokenized text, stop strings, statistics). Its drafts come
from the engine's Drafter (drafting/).

    req = Request(seq, stream, tokenizer, ctx_size, submitted=time.perf_counter())
    run = req.verify(logits_rows, drafts)    # logits_rows: [k + 1, n_vocab] for the last token and k drafts
    done = req.emit(tid, seq_finish)         # per token appended; delivers a chunk; True when the request is
                                             # over (stop string included: the engine then aborts its sequence)
    req.fail(exc) / req.abort()              # the stream's last item: an exception, or a chunk "abort"
logprobs (None or n): each token chunk also carries its TokenLogprob under the model's distribution (raw logits,
before the sampler's truncation and temperature) with the n most likely alternatives.

Verification is lossless: row i is sampled exactly as plain decoding would sample that position (the same
penalties over the history with the run so far, the same one draw of the request's generator, none when
greedy), and the run goes on only while the token drawn equals the draft the next row was computed on. So the
tokens, and with a seed the reply, are those of plain decoding, provided a row's logits do not depend on what
else is in the step (batch invariance, native/kernels.h).

A request with a constraint (structured output, constraint.py) masks each row by its grammar before sampling it
and advances the grammar by the token drawn; its drafts were cut where the grammar would refuse them (engine.py).

Engine thread only. Token ids in stop_token_ids end the request without being emitted.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence as Seq

import numpy as np

from ..sampling import Sampler, StopChecker
from ..text.tokenizer import Tokenizer
from .constraint import Constraint
from .drafting import accepted_prefix
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
        speculative: str = "off",
        constraint: Constraint | None = None,
    ):
        self.seq = seq
        self.constraint = constraint  # structured output: the grammar its tokens follow (constraint.py), or None
        self.speculative = speculative  # its drafting mode: "ngram" | "draft" | "off" (drafting/drafter.py)
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
        self._run_logprobs: deque[TokenLogprob] = deque()  # of the verified run's tokens not emitted yet
        # a row's token is its first candidate, or argmax, and nothing else reads it (greedy; no penalties, bias,
        # logprobs or grammar): the engine takes a draftless row's token without verify() (Engine._verify)
        self.plain_greedy = self.candidates_needed() == 1

    def scheduled(self, now: float) -> None:
        """Called for every step the request is in; the first one starts the prefill clock."""
        if self._started is None:
            self._started = now
            self.stats.cached_tokens = self.seq.num_cached_tokens

    def candidates_needed(self) -> int | None:
        """Candidates per row that sample as the whole row does (Sampler.candidates_needed); None with logprobs,
        which read the whole row."""
        if self._logprobs is not None or self.constraint is not None:  # a grammar may allow none of the top k
            return None
        return self.sampler.candidates_needed()

    def verify(self, logits, drafts: Seq[int]) -> list[int]:
        """logits: [k + 1, n_vocab], the rows of the sequence's last token and of its k drafts, or their Candidates
        (localllm.model.candidates) when candidates_needed() allowed it. The run x_1 ..
        x_m: x_i sampled from row i - 1 with history = the tokens + x_1 .. x_(i-1); it goes on while x_i equals
        draft i, and ends early at a stop token or at max_tokens (nothing after could be emitted)."""
        seq, k = self.seq, len(drafts)
        stops = () if seq.params.ignore_eos else seq.stop_token_ids
        left = seq.max_tokens - seq.num_generated_tokens if seq.max_tokens is not None else k + 1
        penalized = self.sampler.penalties is not None
        self._run_logprobs.clear()
        run: list[int] = []
        c = self.constraint
        for i in range(k + 1):
            if c is not None:
                c.mask(logits[i])  # its grammar's state after the run so far
            tid = self.sampler.sample(logits[i], seq.token_ids + run if penalized and run else seq.token_ids)
            if c is not None and not c.accept(tid):
                raise RuntimeError(f"structured output: the grammar refused token {tid} after masking: {c.error}")
            run.append(tid)
            if self._logprobs is not None:
                self._run_logprobs.append(token_logprob(logits[i], tid, self._logprobs))
            if i == k or tid != drafts[i] or tid in stops or len(run) >= left:
                break
        if k:
            self.stats.draft_proposed += k
            self.stats.draft_accepted += accepted_prefix(run, drafts)
            self.stats.draft_steps += 1
        return run

    def sample(self, logits: np.ndarray) -> int:
        """One token from one row (verify with no drafts)."""
        return self.verify(logits[None, :], ())[0]

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
        lp = [self._run_logprobs.popleft()] if self._run_logprobs else None
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
        st.stop_string = self._stop.matched
        if self._first is not None and st.completion_tokens > 1:
            st.decode_tps = (st.completion_tokens - 1) / max(now - self._first, 1e-9)
        tail = "" if self._stop.stopped else self._stop.push(self._detok.flush()) + self._stop.flush()
        self.finished = True
        self.stream._deliver(Chunk(tail, [], reason, st))
        return True
