"""The engine loop: one thread owns the native model, its KV pool and the scheduler; clients talk to it through
queues.

    engine = Engine(model, tokenizer, parallel=4)
    stream = engine.submit(prompt_ids, SamplingParams(temperature=0, max_tokens=64))   # any thread
    for chunk in stream: ...                         # or `async for`; stream.close() cancels (output.py, stream.py)
    vectors = engine.embed([ids, ids2], "mean").result()   # float32 [2, d_model], batched with others' inputs
    result = engine.call(lambda model: ...)          # runs on the engine thread once no request is live
    engine.close()                                   # cancels what is left, stops the thread

Each step: the inbox is drained (new requests, cancellations, calls), the drafter proposes tokens for the
decoding sequences (speculation: drafting/), the scheduler picks the step (running sequences first with their drafts, then
waiting ones under the token budget, prompts in chunks: scheduler.py), the model runs it (logits only for the
rows that are sampled), each request samples its rows with its own sampler and keeps the verified run of its
drafts (request.py), and the tokens go back to the scheduler (which rolls back the rest) and out to the streams. A cancelled request's blocks are freed before the next step.
Embedding inputs (LLM.embed, the embedding routes) are gathered from every waiting embed call into steps of their
own under the token budget, each input whole in one step (so an encoder's bidirectional attention sees it all),
alternating with the requests' steps; their blocks are borrowed for the step and given back after it.
A call (LLM.logits, perplexity, benchmarks: the one-sequence path over the whole pool) waits until no request
is live, holds new ones back meanwhile, and drops the prefix cache after (it overwrote the pool).

Batch invariance: the products and attention compute a row the same way whatever else is in the step
(native/kernels.h), so the tokens of a request do not depend on what runs beside it.

Pipelining (where the model launches a step and returns before it is computed: the whole model on a GPU,
Model.launches_async; `pipeline` forces it either way): while the device computes step n, the engine schedules
step n + 1 with each decoding sequence one token further (Scheduler.schedule_next: when step n decodes every running
sequence, nothing waits and the pool has the slots), then collects step n, samples its rows, asks the drafter (as
the next step would), and, when it proposes nothing, puts the sampled tokens into step n + 1 and launches it before
the scheduler's update, the streams' output and the drafter's bookkeeping of step n, which run while the device
computes n + 1. Where every row of step n is greedy, n + 1 is launched as soon as n is collected (each row's first
candidate, or argmax, is its token; the sampling must agree), and where they also ask for candidates, before n is
collected: the device puts each row's top candidate in as its next token (Model.launch's feed), so it never waits
for the host. A proposal of the drafter's then makes the step after n + 1 go step by step. So the host's work per step lies beside the device's, not after it, and the device waits only
for the sampling of step n and the launch of n + 1. The tokens are those of the step-by-step order (a row's tokens
do not depend on its step's company; a sequence that a stop token ends has one more row computed, which nothing
reads, and the row it frees is taken a step later), the drafter is asked once per step with the same tokens, and
drafts, requests that a free row waits for, embeddings and calls go step by step.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

import numpy as np

from ..model.candidates import Candidates
from ..model.model import TOP_K_MAX, Model
from ..model.step_batch import StepBatchBuilder
from ..sampling import SamplingParams
from ..text.token_ids import token_ids
from ..text.tokenizer import Tokenizer
from .block_manager import BlockManager
from .constraint import Grammar
from .context_window import ContextLengthError, ContextWindow  # noqa: F401 (ContextLengthError re-exported)
from .drafting import LEARN_PER_STEP, MODES, Drafter, DraftModel, accepted_prefix
from .embedding import POOLINGS, EmbedJob, pool, pooled_rows
from .output import Chunk, Stats
from .request import Request
from .scheduler import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PARALLEL, Scheduler
from .sequence import Sequence, SequenceStatus
from .stream import RequestStream, Wakes

_STOP = object()
SPECULATIVE = MODES


class EngineClosedError(RuntimeError):
    pass


class Engine:
    """ctx_size: tokens one sequence may hold (prompt + completion), at most the pool's n_blocks * block_size
    (its default). parallel: sequences decoded together; max_batch_tokens: tokens one step computes at most (the
    names LLM and the CLI use). ctx_origin: what set the context size, for the error that a prompt does not fit.
    speculative: "ngram" (prompt-lookup drafts verified in the step; never changes a token), "draft" (drafts from
    `draft`, a small model of the same vocabulary) or "off": the default of every request (drafting/). shared_ngrams:
    n-gram drafting also looks up what earlier requests generated where a sequence's own text has no match.
    pipeline: schedule a step while the device computes the one before (above); None: LOCALLLM_PIPELINE's 0 or 1,
    else where the model launches steps apart from the host (Model.launches_async: a GPU), not on the CPU, where it
    would only delay each token's output by a step."""

    def __init__(
        self,
        model: Model,
        tokenizer: Tokenizer,
        parallel: int = DEFAULT_PARALLEL,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        ctx_size: int | None = None,
        ctx_origin: str = "ctx_size",
        speculative: str = "ngram",
        draft: DraftModel | None = None,
        shared_ngrams: bool = True,
        pipeline: bool | None = None,
    ):
        self.drafter = Drafter(draft, shared_ngrams=shared_ngrams)
        self.speculative = self.drafter.check_mode(speculative)
        self._model = model
        self._tok = tokenizer
        self._limits = (parallel, max_batch_tokens, ctx_size)
        self._scheduler = self._new_scheduler()  # checks the limits here, in the caller's thread
        self.parallel = self._scheduler.parallel
        self.max_batch_tokens = self._scheduler.max_batch_tokens
        self.ctx_size = self._scheduler.ctx_size
        self.window = ContextWindow(self.ctx_size, ctx_origin)
        self._n_vocab = model.n_vocab
        # rows past the tokenizer's tokens (a padded embedding table) are never sampled: nothing could decode them
        self._n_tokens = min(tokenizer.vocab_size, model.n_vocab)
        if pipeline is None and os.environ.get("LOCALLLM_PIPELINE") in ("0", "1"):
            pipeline = os.environ["LOCALLLM_PIPELINE"] == "1"
        self.pipeline = bool(getattr(model, "launches_async", False) if pipeline is None else pipeline)
        self.steps_ahead = 0  # steps launched while the one before them ran (pipelining's count)
        self.steps_ahead_greedy = 0  # of them, those launched before the rows of the one before were sampled
        self.steps_ahead_fed = 0  # and those launched before the one before was collected (tokens fed on the device)
        # (SchedulerOutput, candidates k, its result where it ran at once) launched, not collected
        self._launched: deque[tuple[Any, int, Any]] = deque()
        self._proposed: dict | None = None  # the drafter's proposals for the next step, asked ahead
        self._hold = False  # the next step goes step by step (drafts were proposed too late for the one launched)
        self._ids = itertools.count()
        self._wakes = Wakes()  # the asyncio readers' wake-ups, sent once per step and loop (stream.py)
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="localllm-engine", daemon=True)
        self._thread.start()

    def _new_scheduler(self) -> Scheduler:
        parallel, max_batch_tokens, ctx_size = self._limits
        bm = BlockManager(self._model.n_blocks, self._model.block_size)
        return Scheduler(bm, parallel=parallel, max_batch_tokens=max_batch_tokens, ctx_size=ctx_size)

    # -- client side (any thread) -------------------------------------------------------------------------
    def submit(
        self,
        prompt_ids: Iterable[int],
        params: SamplingParams,
        stop_token_ids=None,
        logprobs: int | None = None,
        speculative: str | None = None,
        grammar: Grammar | None = None,
    ) -> RequestStream:
        """Queues a request; ValueError naming what is wrong when the prompt is empty or outside the vocabulary,
        ContextLengthError (a ValueError) when it leaves no room to generate in the context. stop_token_ids:
        default the tokenizer's end-of-generation set. logprobs: None, or each chunk carries the log-probability
        of its token under the model and the `logprobs` most likely alternatives (output.py). speculative:
        "ngram", "draft" or "off" for this request; None: the engine's. grammar: structured output (constraint.py):
        every token sampled under it, drafts cut where it would refuse them."""
        if not isinstance(params, SamplingParams):
            raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
        if logprobs is not None and (
            isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= 20
        ):
            raise ValueError(f"logprobs must be an integer in [0, 20], got {logprobs!r}")
        spec = self.speculative if speculative is None else self.drafter.check_mode(speculative)
        if params.logit_bias and params.logit_bias[-1][0] >= self._n_tokens:
            raise ValueError(
                f"logit_bias token id {params.logit_bias[-1][0]} is outside the vocabulary ({self._n_tokens})"
            )
        ids = self.check(prompt_ids, extra=0 if params.max_tokens == 0 else 1)
        stops = self._tok.stop_ids if stop_token_ids is None else stop_token_ids
        request_id = next(self._ids)
        stream = RequestStream(request_id, self._cancel, self._wakes)
        if params.max_tokens == 0:  # nothing to generate: over at once, as llama.cpp's n_predict 0
            stream._deliver(Chunk("", [], "length", Stats(prompt_tokens=len(ids), ctx_size=self.ctx_size)))
            return stream
        if grammar is not None and not isinstance(grammar, Grammar):
            raise ValueError(f"grammar must be a Grammar (localllm.engine.constraint), got {type(grammar).__name__}")
        constraint = grammar.constraint(self._tok) if grammar is not None else None
        seq = Sequence(request_id, ids, params, stop_token_ids=stops)
        req = Request(seq, stream, self._tok, self.ctx_size, time.perf_counter(), logprobs, spec, constraint)
        self._post(("add", req))
        return stream

    def check(self, ids, extra: int = 0) -> list[int]:
        """ids as a list: non-empty, inside the vocabulary (token_ids.py: TypeError for anything but integers), with
        room for `extra` more tokens in the context (ContextLengthError: context_window.py)."""
        a = token_ids(ids, "the prompt", self._n_vocab)
        if not a:
            raise ValueError("the prompt must be a non-empty sequence of token ids")
        self.window.check(len(a), extra)
        return a

    def embed(self, inputs: list, how: str, normalize: bool = True) -> Future:
        """Queues token id lists to embed: a Future of float32 [len(inputs), d_model], each input's final hidden
        states pooled (embedding.py: how is mean, cls or last) and L2-normalised unless told not to. ValueError
        (ContextLengthError) here for an input that is empty, outside the vocabulary or past the context."""
        if how not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {how!r}")
        job = EmbedJob([self.check(a) for a in inputs], how, normalize)
        if not job.inputs:
            raise ValueError("inputs must hold at least one token id list")
        self._post(("embed", job))
        return job.future

    def call(self, fn: Callable[[Model], Any]) -> Any:
        """fn(model) on the engine thread, alone: after the live requests end, before queued ones start. Its
        result, or its exception raised here."""
        fut: Future = Future()
        self._post(("call", fn, fut))
        return fut.result()

    def reset_caches(self) -> None:
        """Forgets what earlier requests left behind: the prefix cache, the draft model's, the shared n-gram table
        (benchmarks start each run cold with it). Waits for the live requests like call()."""

        self.call(lambda model: self.drafter.reset())  # a call drops the prefix cache after it ran

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

    # -- engine thread ------------------------------------------------------------------------------------
    def _retire(self, req: Request) -> None:
        """A request is over: the drafter queues what it generated for the shared table and gives back its draft KV."""
        self.drafter.close(req.seq.seq_id, req.seq.token_ids, req.seq.num_prompt_tokens)

    def _run(self) -> None:
        active: dict[Any, Request] = {}  # admitted to the scheduler, not over
        held: deque[Request] = deque()  # submitted while a call waits
        calls: deque[tuple[Callable, Future]] = deque()
        embeds: deque[EmbedJob] = deque()
        while True:
            if self._launched and not active:  # every request ended while a step ran: finish it (nothing reads it)
                self._guarded(self._step, active, False)
                continue
            idle = not active and not calls and not embeds
            while idle and self._inbox.empty() and self.drafter.learn(LEARN_PER_STEP):
                pass  # what ended requests generated, learned while nothing waits (a slice at a time)
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
                    self._drop_launched()  # the model may serve another engine: nothing of ours stays launched
                    for _, fut in calls:
                        if fut.set_running_or_notify_cancel():
                            fut.set_exception(EngineClosedError("the engine closed before the call ran"))
                    for job in embeds:
                        job.fail(EngineClosedError("the engine closed before the embedding ran"))
                    return
                if kind == "add":
                    if calls:
                        held.append(msg[1])
                    else:
                        self._admit(msg[1], active)
                elif kind == "abort":
                    self._abort(msg[1], active, held)
                elif kind == "call":
                    calls.append((msg[1], msg[2]))
                elif kind == "embed":
                    embeds.append(msg[1])
                elif kind == "inspect":
                    _resolve(msg[2], msg[1], self._scheduler)
            if self._launched and (not active or embeds):  # the step in flight first: calls and embeddings alone
                self._guarded(self._step, active, False)
                continue
            if calls and not active:
                while calls:
                    fn, fut = calls.popleft()
                    _resolve(fut, fn, self._model)
                self._scheduler = self._new_scheduler()  # the call wrote over the pool: no cached prefix holds
                while held:
                    self._admit(held.popleft(), active)
                continue
            if embeds:
                self._embed_step(embeds, active)
            if active:
                self._guarded(self._step, active, not calls and not embeds)

    def _guarded(self, step: Callable, active: dict, ahead: bool) -> None:
        try:
            step(active, ahead)
        except Exception as e:  # a bug or a native failure: every live request hears of it, none hangs
            for req in active.values():
                req.fail(RuntimeError(f"the engine step failed: {type(e).__name__}: {e}"))
            active.clear()
            self._drop_launched()
            self._proposed = None
            self._hold = False
            self._scheduler = self._new_scheduler()
            self.drafter.reset()

    def _drop_launched(self) -> None:
        """The model's launched steps collected and dropped (after a failure, at close)."""
        while self._launched:
            if self._launched.popleft()[2] is None:
                with contextlib.suppress(Exception):
                    self._model.collect()

    def _embed_step(self, embeds: deque[EmbedJob], active: dict) -> None:
        """One step of waiting embedding inputs, whole, in arrival order, under the token budget (one input past it
        goes alone); inputs the pool cannot hold now wait for the requests' steps to free blocks."""
        sched, budget = self._scheduler, self.max_batch_tokens
        b = StepBatchBuilder(self._model.block_size)
        taken: list[tuple[EmbedJob, Any, int]] = []  # (job, borrowed key, its rows in the output)
        while embeds and budget > 0:
            job = embeds[0]
            if job.future.cancelled():
                embeds.popleft()
                continue
            ids = job.inputs[job.taken]
            if taken and len(ids) > budget:
                break
            key = ("embed", next(self._ids))
            table = sched.borrow(key, ids)
            if table is None:
                if not taken and not active:  # nothing will free blocks: the pool cannot hold it (not expected)
                    embeds.popleft()
                    job.fail(ValueError(f"an input of {len(ids)} tokens does not fit the KV pool"))
                    continue
                break
            rows = pooled_rows(job.how, len(ids))
            b.add(ids, 0, table.block_ids, logits=rows)
            taken.append((job, key, len(rows)))
            budget -= len(ids)
            job.taken += 1
            if job.taken == len(job.inputs):
                embeds.popleft()
        if not taken:
            return
        try:
            hidden = self._model.forward(b.build(), hidden=True)
        except Exception as e:  # a refusal (ValueError: what the model cannot do) reaches the caller as it is
            err = (
                e if isinstance(e, ValueError) else RuntimeError(f"the embedding step failed: {type(e).__name__}: {e}")
            )
            for job in {id(j): j for j, _, _ in taken}.values():
                job.fail(err)
                if job in embeds:
                    embeds.remove(job)
            return
        finally:
            for _, key, _ in taken:
                sched.give_back(key)
        at = 0
        for job, _, n in taken:
            if not job.future.done():
                job.done(pool(hidden[at : at + n], job.how, job.normalize))
            at += n

    def _admit(self, req: Request, active: dict) -> None:
        try:
            self._scheduler.add(req.seq)
        except ValueError as e:
            req.fail(e)
            return
        active[req.seq.seq_id] = req
        self.drafter.open(req.seq.seq_id, req.speculative)

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

    def _propose(self, items: list[tuple[Any, list[int]]], active: dict) -> dict:
        """The drafter's proposals for these decoding sequences, cut where a grammar would refuse them."""
        out = {}
        for seq_id, drafts in self.drafter.propose(items).items():
            c = active[seq_id].constraint
            drafts = drafts if c is None else drafts[: c.drafts(drafts)]
            if drafts:
                out[seq_id] = drafts
        return out

    def _schedule(self, active: dict):
        """The next step, step by step: drafts proposed (or taken from the proposal asked ahead), then scheduled."""
        proposed, self._proposed = self._proposed, None
        if proposed is None:
            decoding = [
                (req.seq.seq_id, req.seq.token_ids)
                for req in active.values()
                if req.seq.status is SequenceStatus.RUNNING and req.seq.num_tokens - req.seq.num_computed_tokens == 1
            ]
            proposed = self._propose(decoding, active)
        for seq_id, drafts in proposed.items():
            if seq_id in active:
                active[seq_id].seq.draft_token_ids = drafts
        out = self._scheduler.schedule()
        return out if out.num_tokens else None

    def _launch(self, out, active: dict, feed: bool = False) -> None:
        now = time.perf_counter()
        for seq in out.seqs:
            req = active.get(seq.seq_id)
            if req is not None:
                req.scheduled(now)
        k = self._candidates_needed(active, out)
        # only each row's top k comes back where k (localllm.model.candidates), the padding columns left out;
        # step by step the step runs here (forward), pipelined the model launches it and collect() waits
        args = dict(top_k=k, n_valid=self._n_tokens) if k else {}
        done = None if self.pipeline else self._model.forward(out.batch, **args)
        if self.pipeline:
            self._model.launch(out.batch, feed=feed, **args)
        self._launched.append((out, k, done))

    def _collect(self):
        out, k, done = self._launched[0]
        logits = self._model.collect() if done is None else done
        self._launched.popleft()
        if not k and self._n_tokens < self._n_vocab:
            logits[:, self._n_tokens :] = -np.inf
        return out, logits

    def _verify(self, out, logits, active: dict, firsts: list[int] | None = None) -> tuple[list[int | None], dict]:
        """Each sampled sequence's verified run: the tokens per logits row (None past a run) and {s: run}. Rows of a
        sequence that ended while the step ran are skipped (None). A plain greedy request's row without drafts takes
        the row's first candidate, or argmax (firsts: every row's, where the step already found them; else that row's
        alone), as its sampling would (Request.plain_greedy): no per-row slice, sampler or checks."""
        tokens: list[int | None] = []
        runs: dict[int, list[int]] = {}
        rows = out.batch.logits_rows
        j = 0
        while j < len(rows):
            s = out.sampled_seqs[j]
            k = out.num_drafts[s]
            seq = out.seqs[s]
            req = active.get(seq.seq_id)
            if req is None or seq.status is not SequenceStatus.RUNNING:
                tokens += [None] * (k + 1)
                j += k + 1
                continue
            if not k and req.plain_greedy:
                run = [self._first(logits, j) if firsts is None else firsts[j]]
            else:
                drafts = out.batch.token_ids[rows[j] + 1 : rows[j] + 1 + k].tolist() if k else []
                run = req.verify(logits[j : j + k + 1], drafts)
                if k:
                    self.drafter.observe(seq.seq_id, k, accepted_prefix(run, drafts))
            runs[s] = run
            tokens += run + [None] * (k + 1 - len(run))
            j += k + 1
        return tokens, runs

    @staticmethod
    def _greedy(out, active: dict, gone_ok: bool = False) -> bool:
        """Whether every row of the step is a plain greedy request's (Request.plain_greedy: its token is the row's
        first candidate, or argmax); gone_ok: rows of requests that ended meanwhile do not count."""
        reqs = [active.get(out.seqs[s].seq_id) for s in out.sampled_seqs]
        return all(r.plain_greedy if r is not None else gone_ok for r in reqs)

    @staticmethod
    def _first(logits, j: int) -> int:
        """Row j's first candidate, or the argmax of its whole row."""
        return int(logits.ids[j, 0]) if isinstance(logits, Candidates) else int(np.argmax(logits[j]))

    @staticmethod
    def _firsts(logits) -> list[int]:
        """Each row's first candidate, or the argmax of its whole row: a greedy row's token."""
        if isinstance(logits, Candidates):
            return logits.ids[:, 0].tolist()
        return np.argmax(logits, axis=1).tolist()

    def _step(self, active: dict, ahead: bool = True) -> None:
        """One step: scheduled and launched here, or taken from the launch in flight; with `ahead` and pipelining,
        the step after it is scheduled while the device computes it and launched before this one's bookkeeping:
        before this one is collected where its rows are all greedy and ask for candidates (the device feeds their
        top candidates in), as soon as it is collected where they are greedy (their first candidates, or argmax, are
        the tokens), else once its rows are sampled and the drafter has no proposal."""
        sched = self._scheduler
        if not self._launched:
            out = self._schedule(active)
            if out is None:
                return
            self._launch(out, active)
        nxt = None
        if ahead and self.pipeline and not self._hold and all(r.speculative != "draft" for r in active.values()):
            nxt = sched.schedule_next(self._launched[0][0])  # while the device computes the step
        self._hold = False
        early = False  # nxt launched before this step's rows were sampled
        head = self._launched[0]
        if nxt is not None and len(self._launched) == 1 and head[1] and self._greedy(head[0], active, gone_ok=True):
            # the device feeds each row's top candidate in (the step asks for candidates): it never waits for the host
            row = {head[0].seqs[s].seq_id: j for j, s in enumerate(head[0].sampled_seqs)}
            sched.fill(nxt, [-1 - row[seq.seq_id] for seq in nxt.seqs])
            self._launch(nxt, active, feed=True)
            self.steps_ahead_fed += 1
            early = True
        out, logits = self._collect()
        firsts = self._firsts(logits) if nxt is not None and (early or self._greedy(out, active)) else None
        if firsts is not None and not early:  # launched before the sampling: the device waits for the collect only
            row = {out.seqs[s].seq_id: j for j, s in enumerate(out.sampled_seqs)}
            sched.fill(nxt, [firsts[row[seq.seq_id]] for seq in nxt.seqs])
            self._launch(nxt, active)
            self.steps_ahead_greedy += 1
            early = True
        self.steps_ahead += early
        tokens, runs = self._verify(out, logits, active, firsts)
        if nxt is not None:
            # the drafter asked as the next step would ask it: each sequence with its token appended for the
            # proposal's while (update appends the same token for good)
            ahead_ids = {seq.seq_id for seq in nxt.seqs}
            live = [(out.seqs[s], run[-1]) for s, run in runs.items() if out.seqs[s].seq_id in ahead_ids]
            for seq, t in live:
                seq.token_ids.append(t)
            try:
                proposed = self._propose([(seq.seq_id, seq.token_ids) for seq, _ in live], active)
            finally:
                for seq, _ in live:
                    seq.token_ids.pop()
            fed = {seq.seq_id: t for seq, t in live}
            sched.fill(nxt, [fed.get(seq.seq_id, 0) for seq in nxt.seqs])  # the tokens it computes
            if early:
                # drafts to verify: they came too late for the step launched, so the one after it goes step by
                # step and the drafter is asked again there
                self._hold = bool(proposed)
            elif proposed:  # drafts to verify: the next step goes step by step, with them
                self._proposed = proposed
                sched.cancel_next(nxt)
            else:
                self._launch(nxt, active)
                self.steps_ahead += 1
        with self._wakes:
            self._update(out, tokens, active)
        self.drafter.learn(LEARN_PER_STEP)  # what ended requests generated: after the output, beside a launched step

    def _update(self, out, tokens: list[int | None], active: dict) -> None:
        """The step's tokens to the scheduler and out to the streams; finished requests retire."""
        sched = self._scheduler
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
