"""The engine loop: one thread owns the native model, its KV pool and the scheduler; clients talk to it through
queues.

    engine = Engine(model, tokenizer, max_num_seqs=4)
    stream = engine.submit(prompt_ids, SamplingParams(temperature=0, max_tokens=64))   # any thread
    for chunk in stream: ...                         # or `async for`; stream.close() cancels (output.py, stream.py)
    result = engine.call(lambda model: ...)          # runs on the engine thread once no request is live
    engine.close()                                   # cancels what is left, stops the thread

Each step: the inbox is drained (new requests, cancellations, calls), each decoding request's drafter proposes
tokens (speculation, ngram.py), the scheduler picks the step (running sequences first with their drafts, then
waiting ones under the token budget, prompts in chunks: scheduler.py), the model runs it (logits only for the
rows that are sampled), each request samples its rows with its own sampler and keeps the verified run of its
drafts (request.py), and the tokens go back to the scheduler (which rolls back the rest) and out to the streams. A cancelled request's blocks are freed before the next step.
A call (LLM.logits, perplexity, benchmarks: the one-sequence path over the whole pool) waits until no request
is live, holds new ones back meanwhile, and drops the prefix cache after (it overwrote the pool).

Batch invariance: the products and attention compute a row the same way whatever else is in the step
(native/kernels.h), so the tokens of a request do not depend on what runs beside it.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..model.model import TOP_K_MAX, Model
from ..sampling import SamplingParams
from ..text.token_ids import token_ids
from ..text.tokenizer import Tokenizer
from .block_manager import BlockManager
from .drafting.draft_model import DraftModel, ModelDrafter, propose_batch
from .drafting.ngram import NgramDrafter
from .drafting.ngram_table import NgramTable
from .request import Request
from .scheduler import DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, Scheduler
from .sequence import Sequence, SequenceStatus
from .stream import RequestStream

_STOP = object()
SPECULATIVE = ("ngram", "off", "draft")


class EngineClosedError(RuntimeError):
    pass


class ContextLengthError(ValueError):
    """A prompt (with what it asks to generate) that cannot fit the context."""


class Engine:
    """max_model_len: tokens one sequence may hold (prompt + completion), at most the pool's n_blocks * block_size
    (its default). ctx_origin: what set that size, for the error that a prompt does not fit. speculative: "ngram"
    (prompt-lookup drafts verified in the step; never changes a token), "draft" (drafts from `draft`, a small
    model of the same vocabulary: draft_model.py) or "off": the default of every request. shared_ngrams: n-gram
    drafting also looks up what earlier requests generated (ngram_table.py) where a sequence's own text has no
    match."""

    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
        max_model_len: int | None = None,
        ctx_origin: str = "ctx_size",
        speculative: str = "ngram",
        draft: DraftModel | None = None,
        shared_ngrams: bool = True,
    ):
        self._draft = self.draft = draft
        # what finished requests generated, for n-gram drafting where a sequence's own tokens have no match
        self.ngram_table = NgramTable() if shared_ngrams else None
        self.draft_with_ngrams = True  # a draft model's sequences take n-gram drafts (2+ tokens matched) first
        self.speculative = self._speculative(speculative)
        self._model = model
        self._tok = tokenizer
        self._limits = (max_num_seqs, max_num_batched_tokens, max_model_len)
        self._scheduler = self._new_scheduler()  # checks the limits here, in the caller's thread
        self.max_num_seqs = self._scheduler.max_num_seqs
        self.max_num_batched_tokens = self._scheduler.max_num_batched_tokens
        self.ctx_size = self._scheduler.max_model_len
        self._ctx_origin = ctx_origin
        self._n_vocab = model.n_vocab
        # rows past the tokenizer's tokens (a padded embedding table) are never sampled: nothing could decode them
        self._n_tokens = min(tokenizer.vocab_size, model.n_vocab)
        self._ids = itertools.count()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="localllm-engine", daemon=True)
        self._thread.start()

    def _new_scheduler(self) -> Scheduler:
        seqs, tokens, max_len = self._limits
        bm = BlockManager(self._model.n_blocks, self._model.block_size)
        return Scheduler(bm, max_num_seqs=seqs, max_num_batched_tokens=tokens, max_model_len=max_len)

    # -- client side (any thread) -------------------------------------------------------------------------
    def submit(
        self,
        prompt_ids: Iterable[int],
        params: SamplingParams,
        stop_token_ids=None,
        logprobs: int | None = None,
        speculative: str | None = None,
    ) -> RequestStream:
        """Queues a request; ValueError naming what is wrong when the prompt is empty or outside the vocabulary,
        ContextLengthError (a ValueError) when it leaves no room to generate in the context. stop_token_ids:
        default the tokenizer's end-of-generation set. logprobs: None, or each chunk carries the log-probability
        of its token under the model and the `logprobs` most likely alternatives (output.py). speculative:
        "ngram", "draft" or "off" for this request; None: the engine's."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if logprobs is not None and (
            isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= 20
        ):
            raise ValueError(f"logprobs must be an integer in [0, 20], got {logprobs!r}")
        spec = self.speculative if speculative is None else self._speculative(speculative)
        ids = self.check(prompt_ids, extra=1)
        stops = self._tok.stop_ids if stop_token_ids is None else stop_token_ids
        request_id = next(self._ids)
        seq = Sequence(request_id, ids, params, stop_token_ids=stops)
        stream = RequestStream(request_id, self._cancel)
        if spec == "ngram":
            drafter = NgramDrafter(shared=self.ngram_table)
        elif spec == "draft":  # n-gram matches of 2+ tokens draft first, the model drafts the rest
            drafter = ModelDrafter(self._draft, NgramDrafter(min_n=2, shared=self.ngram_table))
        else:
            drafter = None
        self._post(("add", Request(seq, stream, self._tok, self.ctx_size, time.perf_counter(), logprobs, drafter)))
        return stream

    def check(self, ids, extra: int = 0) -> list[int]:
        """ids as a list: non-empty, inside the vocabulary, with room for `extra` more tokens in the context
        (token_ids.py: TypeError for anything but integers)."""
        a = token_ids(ids, "the prompt", self._n_vocab)
        if not a:
            raise ValueError("the prompt must be a non-empty sequence of token ids")
        if len(a) + extra > self.ctx_size:
            raise ContextLengthError(
                f"{len(a)} tokens + {extra} to generate exceed the context size {self.ctx_size} ({self._ctx_origin})"
            )
        return a

    def call(self, fn: Callable[[Model], Any]) -> Any:
        """fn(model) on the engine thread, alone: after the live requests end, before queued ones start. Its
        result, or its exception raised here."""
        fut: Future = Future()
        self._post(("call", fn, fut))
        return fut.result()

    def reset_caches(self) -> None:
        """Forgets what earlier requests left behind: the prefix cache, the draft model's, the shared n-gram table
        (benchmarks start each run cold with it). Waits for the live requests like call()."""

        def reset(model) -> None:
            if self._draft is not None:
                self._draft.reset()
            if self.ngram_table is not None:
                self.ngram_table.clear()

        self.call(reset)  # a call drops the prefix cache after it ran

    def inspect(self, fn: Callable[[Scheduler], Any]) -> Any:
        """fn(scheduler) on the engine thread between two steps (the pool's state, for tests and metrics); fn must
        not change it. Its result, or its exception raised here."""
        fut: Future = Future()
        self._post(("inspect", fn, fut))
        return fut.result()

    def close(self) -> None:
        """Cancels every request (their streams end with "abort") and stops the thread; idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put((_STOP,))
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _post(self, msg: tuple) -> None:
        with self._close_lock:
            if self._closed:
                raise EngineClosedError("the engine is closed")
            self._inbox.put(msg)

    def _cancel(self, request_id) -> None:
        if not self._closed:  # a stream collected after close has nothing left to cancel
            self._inbox.put(("abort", request_id))

    def _speculative(self, value) -> str:
        if value not in SPECULATIVE:
            raise ValueError(f"speculative must be one of {', '.join(map(repr, SPECULATIVE))}, got {value!r}")
        if value == "draft" and self._draft is None:
            raise ValueError('speculative "draft" needs a draft model, and this model was loaded without one')
        return value

    # -- engine thread ------------------------------------------------------------------------------------
    def _retire(self, req: Request) -> None:
        """A request is over: its draft KV goes back, what it generated feeds the shared n-gram table."""
        if self.ngram_table is not None and req.seq.num_generated_tokens:
            self.ngram_table.learn(req.seq.token_ids, req.seq.num_prompt_tokens)
        if isinstance(req.drafter, ModelDrafter):
            req.drafter.draft.release(req.seq.seq_id)

    def _run(self) -> None:
        active: dict[Any, Request] = {}  # admitted to the scheduler, not over
        held: deque[Request] = deque()  # submitted while a call waits
        calls: deque[tuple[Callable, Future]] = deque()
        while True:
            idle = not active and not calls
            msgs = [self._inbox.get()] if idle else []
            while True:
                try:
                    msgs.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            for msg in msgs:
                kind = msg[0]
                if kind is _STOP:
                    for req in [*active.values(), *held]:
                        req.abort()
                    for _, fut in calls:
                        if fut.set_running_or_notify_cancel():
                            fut.set_exception(EngineClosedError("the engine closed before the call ran"))
                    return
                if kind == "add":
                    req = msg[1]
                    if calls:
                        held.append(req)
                    else:
                        self._admit(req, active)
                elif kind == "abort":
                    self._abort(msg[1], active, held)
                elif kind == "call":
                    calls.append((msg[1], msg[2]))
                elif kind == "inspect":
                    _resolve(msg[2], msg[1], self._scheduler)
            if calls and not active:
                while calls:
                    fn, fut = calls.popleft()
                    _resolve(fut, fn, self._model)
                self._scheduler = self._new_scheduler()  # the call wrote over the pool: no cached prefix holds
                while held:
                    self._admit(held.popleft(), active)
                continue
            if active:
                try:
                    self._step(active)
                except Exception as e:  # a bug or a native failure: every live request hears of it, none hangs
                    for req in active.values():
                        req.fail(RuntimeError(f"the engine step failed: {type(e).__name__}: {e}"))
                    active.clear()
                    self._scheduler = self._new_scheduler()
                    if self._draft is not None:
                        self._draft.reset()

    def _admit(self, req: Request, active: dict) -> None:
        try:
            self._scheduler.add(req.seq)
        except ValueError as e:
            req.fail(e)
            return
        active[req.seq.seq_id] = req

    def _abort(self, request_id, active: dict, held: deque) -> None:
        req = active.pop(request_id, None)
        if req is not None:
            self._scheduler.abort(request_id)
            self._retire(req)
            req.abort()
            return
        for r in held:
            if r.seq.seq_id == request_id:
                held.remove(r)
                r.abort()
                return

    def _candidates_needed(self, active: dict, out) -> int:
        """The candidates per row that serve every sampled row of the step (the most any asks), or 0 when one
        needs its whole logits row or the model cannot return candidates."""
        if not getattr(self._model, "supports_candidates", False) or not out.sampled_seqs:
            return 0
        k = 0
        for s in set(out.sampled_seqs):
            need = active[out.seqs[s].seq_id].candidates_needed()
            if need is None or need > TOP_K_MAX or need > self._n_tokens:
                return 0
            k = max(k, need)
        return k

    def _step(self, active: dict) -> None:
        sched = self._scheduler
        by_model = []  # (seq_id, tokens, k, draft model) of the sequences a draft model drafts for, batched below
        for req in active.values():
            seq, d = req.seq, req.drafter
            decoding = seq.status is SequenceStatus.RUNNING and seq.num_tokens - seq.num_computed_tokens == 1
            if d is None or not decoding:
                continue
            if not isinstance(d, ModelDrafter):
                seq.draft_token_ids = req.propose()
            elif k := d.wants():
                own = d.ngram.draft(seq.token_ids, k) if d.ngram is not None and self.draft_with_ngrams else []
                if own:
                    seq.draft_token_ids = own
                    d.proposing(from_model=False)
                elif d.model_pays():
                    by_model.append((seq.seq_id, seq.token_ids, k, d.draft))
                    d.proposing(from_model=True)
        if by_model:
            for seq_id, drafts in propose_batch(by_model).items():
                active[seq_id].seq.draft_token_ids = drafts
        out = sched.schedule()
        if out.num_tokens == 0:
            return
        now = time.perf_counter()
        for seq in out.seqs:
            active[seq.seq_id].scheduled(now)
        k = self._candidates_needed(active, out)
        if k:  # only each row's top k comes back (localllm.model.candidates), the padding columns left out
            logits = self._model.forward(out.batch, top_k=k, n_valid=self._n_tokens)
        else:
            logits = self._model.forward(out.batch)
            if self._n_tokens < self._n_vocab:
                logits[:, self._n_tokens :] = -np.inf
        tokens: list[int | None] = []  # per logits row: the verified run of each sequence, None past it
        rows = out.batch.logits_rows
        j = 0
        while j < len(rows):
            s = out.sampled_seqs[j]
            k = out.num_drafts[s]
            drafts = out.batch.token_ids[rows[j] + 1 : rows[j] + 1 + k]
            run = active[out.seqs[s].seq_id].verify(logits[j : j + k + 1], drafts)
            tokens += run + [None] * (k + 1 - len(run))
            j += k + 1
        before = {out.seqs[s].seq_id: out.seqs[s].num_tokens for s in set(out.sampled_seqs)}
        for seq in sched.update(out, tokens):
            req = active[seq.seq_id]
            new = seq.token_ids[before[seq.seq_id] :]
            for i, tid in enumerate(new):
                if req.emit(tid, seq.finish_reason if i == len(new) - 1 else None):
                    del active[seq.seq_id]
                    self._retire(req)
                    if not seq.is_finished:  # a stop string ended it: give its blocks back now
                        sched.abort(seq.seq_id)
                    break


def _resolve(fut: Future, fn: Callable, arg) -> None:
    if fut.set_running_or_notify_cancel():
        try:
            fut.set_result(fn(arg))
        except BaseException as e:
            fut.set_exception(e)
