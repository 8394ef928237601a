"""The user-facing model handle: one GGUF file, its tokenizer and the native model.

    llm = LLM("model.gguf", n_threads=2, ctx_size=4096)   # a .gguf path or a store name
    LLM("model.gguf", kv_type="q8_0")                # KV cache K and V in q8_0 (f16, q8_0, q4_0)
    LLM("model.gguf", k_type="q8_0", v_type="q4_0")  # or each on its own (overriding kv_type)
    LLM("model.gguf", ctx_size=32768, kv_budget_mib=256)  # KV pool capped at 256 MiB: ctx_size shrinks to fit
    ids = llm.tokenize("Hello")                      # list[int]
    llm.logits(ids)                                  # float32 [len(ids), n_vocab], teacher-forced, fresh context
    llm.greedy(ids, 32)                              # 32 greedy tokens: one prefill step, then decode steps
    for chunk in llm.generate("def fib(n):", temperature=0.2, max_tokens=64): ...   # see generate.py
    for chunk in llm.chat([{"role": "user", "content": "hi"}], max_tokens=64): ...
    stream = llm.submit(ids, SamplingParams(max_tokens=8))   # a RequestStream: iterate, `async for`, close()
    LLM("model.gguf", speculative="off")             # no n-gram drafts ("ngram", the default, never changes a
    llm.generate(ids, speculative="off", ...)        # token: engine/drafting/ngram.py); per request too
    LLM("qwen2.5-coder:1.5b", speculative="qwen2.5-coder:0.5b")   # a draft model of the same vocabulary
                                                     # (engine/drafting/draft_model.py); requests may still say "ngram"
    llm.exclusive(lambda seq: seq.step(...))         # the one-sequence path, alone on the engine thread

Requests from any number of threads share the model through the engine (engine/engine.py): one engine
thread batches them step by step over one paged KV pool with prefix caching, up to `parallel` sequences at a
time; a request's tokens do not depend on what runs beside it. The pool holds ctx_size tokens (whole blocks
of BLOCK_SIZE; fewer when kv_budget_mib caps it: llm.ctx_size is what it holds), shared by the running
sequences; one sequence may use all of it. A prompt that does not fit raises ValueError; generation that fills
the context ends with finish_reason "length" and stats.context_full. `logits`, `greedy` and `exclusive` run
alone on the engine thread over the whole pool (one_sequence.py), after the live requests end.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

import numpy as np

from .engine import Chunk, Engine, RequestStream
from .engine.constraint import Grammar
from .engine.drafting.draft_model import DraftMismatchError, DraftModel, check_draft_vocab
from .engine.embedding import pooling_of
from .engine.engine import SPECULATIVE
from .engine.one_sequence import OneSequence
from .engine.scheduler import DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PARALLEL
from .model.architectures import spec_from_gguf
from .model.gguf import GGUFFile
from .model.kv_types import kv_types
from .model.model import BLOCK_SIZE, Model, kv_block_bytes
from .model.placement import DEFAULT_DEVICE
from .sampling import SamplingParams
from .text.reasoning import MODES, reply_splitter
from .text.tokenizer import Tokenizer

DEFAULT_CTX_SIZE = 4096

_T = TypeVar("_T")


class LLM:
    def __init__(
        self,
        path: str | os.PathLike,
        n_threads: int | None = None,
        ctx_size: int = DEFAULT_CTX_SIZE,
        kv_type: str = "f16",
        k_type: str | None = None,
        v_type: str | None = None,
        kv_rotate: bool = True,
        kv_center: bool = True,
        kv_equalize: bool = True,
        kv_budget_mib: float | None = None,
        parallel: int = DEFAULT_PARALLEL,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        speculative: str = "ngram",
        device: str = DEFAULT_DEVICE,
        gpu_layers: int | None = None,
    ):
        """kv_type: the KV cache's K and V type, "f16", "q8_0" or "q4_0"; k_type / v_type override it for one
        of them. kv_center, kv_equalize, kv_rotate: exact transforms of what a quantized K and V store (minus the
        model's K / V bias; K divided per channel by sqrt of its expected magnitude, q multiplied; Hadamard-rotated
        per head) that keep q4_0 usable on models with outlier channels (Qwen); f16 is stored as is. See
        native/kv_transforms.h (KvConfig). kv_budget_mib: the most MiB the KV pool may take (ValueError when that is
        less than one block). parallel: the most sequences decoded together (more wait their turn);
        max_batch_tokens: the most tokens one engine step computes (a long prompt is prefilled in chunks of it, so
        streams decoding beside it keep their pace). speculative: "ngram" (drafts from each sequence's own tokens,
        verified in its step: the same tokens, fewer steps when text repeats), "off", or a draft model (a .gguf
        path or store name of a small model with the target's vocabulary: it proposes tokens, the model verifies
        them, the output is unchanged); a request may override it ("ngram", "off", or "draft" when a draft model
        was loaded). device: "cpu", "cuda" or "auto" (CUDA when built in and a GPU is found); gpu_layers: with
        CUDA, the first N layers on the GPU and the rest on the CPU (default all): localllm.model.placement.
        """
        if not isinstance(ctx_size, int) or isinstance(ctx_size, bool) or ctx_size < 1:
            raise ValueError(f"ctx_size must be a positive integer, got {ctx_size!r}")
        if kv_budget_mib is not None and (
            isinstance(kv_budget_mib, bool)
            or not isinstance(kv_budget_mib, (int, float))
            or not 0 < kv_budget_mib < math.inf
        ):
            raise ValueError(f"kv_budget_mib must be a positive number of MiB, got {kv_budget_mib!r}")
        self.k_type, self.v_type = kv_types(kv_type, k_type, v_type)
        n_threads = _thread_count(n_threads)
        self.path = _model_path(path)
        self._file = GGUFFile(self.path)
        # the tokenizer is read on a thread beside the model's load, whose copies and measurements release the GIL
        # (LLM() on the 0.5B 0.29-0.30 s instead of 0.33-0.34, Zen 3); its error is raised first, as when it was
        # read first
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="localllm-tokenizer")
        reading = reader.submit(Tokenizer.from_metadata, self._file.metadata, name=self.path)
        reader.shutdown(wait=False)
        model = None
        try:
            try:
                model, n_blocks, capped = self._load_model(
                    ctx_size, kv_budget_mib, n_threads, kv_rotate, kv_center, kv_equalize, device, gpu_layers
                )
            finally:
                tokenizer = reading.result()  # waited for even when the model failed: the tokenizer's error wins
        except Exception:
            model = None  # the model's views of the map go before the map
            self._file.close()
            raise
        self.model, self.tokenizer = model, tokenizer
        origin = "ctx_size, capped by kv_budget_mib" if capped else "ctx_size"
        self._sequence = OneSequence(self.model, origin)
        self._draft_file: GGUFFile | None = None
        self.draft_path: str | None = None
        try:
            draft = None
            if speculative not in SPECULATIVE:
                draft = self._load_draft(speculative, n_blocks, n_threads, max(max_batch_tokens, parallel), device)
                speculative = "draft"
            self._engine = Engine(
                self.model,
                self.tokenizer,
                parallel=parallel,
                max_batch_tokens=max(max_batch_tokens, parallel),
                ctx_origin=origin,
                speculative=speculative,
                draft=draft,
            )
        except Exception:
            self._file.close()
            if self._draft_file is not None:
                self._draft_file.close()
            raise
        self.speculative = self._engine.speculative
        self.ctx_size = self._engine.ctx_size
        self.parallel = self._engine.parallel
        self._n_vocab = self.model.n_vocab

    @property
    def encoder(self) -> bool:
        """An encoder (bert, nomic-bert): it embeds (embed) but has no LM head, so it does not generate."""
        return self._encoder

    def _check_generates(self) -> None:
        """ValueError when the model cannot produce logits (an encoder)."""
        if self.encoder:
            raise ValueError(
                f"{self.path}: {self._arch} is an encoder-only embedding model: it has no language-model "
                "head, so it cannot generate or score text; use it for embeddings (LLM.embed, /v1/embeddings)"
            )

    def _load_model(
        self,
        ctx_size: int,
        kv_budget_mib: float | None,
        n_threads: int,
        kv_rotate: bool,
        kv_center: bool,
        kv_equalize: bool,
        device: str,
        gpu_layers: int | None,
    ) -> tuple[Model, int, bool]:
        """The open file's Model with its KV pool: (model, KV blocks, whether kv_budget_mib capped them)."""
        spec = spec_from_gguf(self._file)
        if spec.position_embd is not None:  # learned positions (BERT): a sequence holds at most that many
            ctx_size = min(ctx_size, spec.context_length)
        spec = spec.for_context(ctx_size)  # LongRoPE's factors follow the context
        self._encoder, self._arch = spec.encoder, spec.arch
        capped = False
        n_blocks = -(-ctx_size // BLOCK_SIZE)
        if kv_budget_mib is not None:
            per_block = kv_block_bytes(spec, self.k_type, self.v_type)
            fit = int(kv_budget_mib * (1 << 20)) // per_block
            if fit < 1:
                raise ValueError(
                    f"kv_budget_mib {kv_budget_mib} is less than one KV block ({per_block / (1 << 20):.3f} MiB "
                    f"= {BLOCK_SIZE} tokens with K {self.k_type}, V {self.v_type})"
                )
            capped = fit < n_blocks
            n_blocks = min(n_blocks, fit)
        _check_kv_memory(n_blocks * kv_block_bytes(spec, self.k_type, self.v_type), ctx_size, capped)
        model = Model(
            self._file,
            n_blocks=n_blocks,
            spec=spec,
            threads=n_threads,
            k_type=self.k_type,
            v_type=self.v_type,
            kv_rotate=kv_rotate,
            kv_center=kv_center,
            kv_equalize=kv_equalize,
            device=device,
            gpu_layers=gpu_layers,
        )
        return model, n_blocks, capped

    def _load_draft(self, name, n_blocks: int, n_threads: int | None, chunk: int, device: str) -> DraftModel:
        """The draft model named by `speculative` (a path or store name), its KV pool as large as the target's, all
        of it on `device` (it is small)."""
        if not isinstance(name, (str, os.PathLike)) or not os.fspath(name):
            raise ValueError(f"speculative must be 'ngram', 'off' or a draft model's path or name, got {name!r}")
        self.draft_path = _model_path(name)
        if os.path.realpath(self.draft_path) == os.path.realpath(self.path):
            raise DraftMismatchError(
                f"the draft model {name!r} is the model itself: a draft model must be a smaller one"
            )
        self._draft_file = f = GGUFFile(self.draft_path)
        tok = Tokenizer.from_metadata(f.metadata, name=self.draft_path)
        check_draft_vocab(self.tokenizer, tok, self.path, self.draft_path)
        model = Model(f, n_blocks=n_blocks, threads=n_threads, k_type=self.k_type, v_type=self.v_type, device=device)
        # a decode step reads the weights once: the files' sizes give a draft position's cost in target steps
        cost = os.path.getsize(self.draft_path) / os.path.getsize(self.path)
        return DraftModel(
            model, n_tokens=self.tokenizer.vocab_size, catch_up_chunk=chunk, name=self.draft_path, cost=cost
        )

    @property
    def n_vocab(self) -> int:
        return self._n_vocab

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids) -> str:
        return self.tokenizer.decode(ids)

    def _engine_open(self) -> Engine:
        if self.model is None:
            raise ValueError(f"{self.path}: this LLM is closed")
        return self._engine

    def exclusive(self, fn: Callable[[OneSequence], _T]) -> _T:
        """fn(seq) with the one-sequence path (one_sequence.py) over the whole KV pool, alone on the engine thread
        once the live requests end; its result. Measurements and teacher-forced scoring use it."""
        seq = self._sequence
        return self._engine_open().call(lambda model: fn(seq))

    def reset_caches(self) -> None:
        """Drops the prefix cache, the draft model's cache and the n-gram table earlier requests filled: the next
        request runs as on a fresh LLM (benchmarks)."""
        self._engine_open().reset_caches()

    def logits(self, ids) -> np.ndarray:
        """float32 [len(ids), n_vocab]: the logits at every position, ids teacher-forced from position 0."""
        self._check_generates()

        def run(seq: OneSequence) -> np.ndarray:
            a = seq.check(ids)
            return seq.step(a, 0, np.arange(len(a), dtype=np.int32))

        return self.exclusive(run)

    def embed(self, inputs, pooling: str | None = None, normalize: bool = True) -> np.ndarray:
        """float32 [len(inputs), d_model]: one embedding per input (a text, tokenized with BOS as the model asks, or
        token ids), its final hidden states pooled (engine/embedding.py: the file's pooling, or mean) and
        L2-normalised. A str or one list of ids alone is one input. ContextLengthError (a ValueError) when an input
        does not fit."""
        one = isinstance(inputs, str) or (len(inputs) and isinstance(inputs[0], (int, np.integer)))
        items = [inputs] if one else list(inputs)
        if not items:
            raise ValueError("inputs must hold at least one text or token id list")
        how = pooling or pooling_of(self._file.metadata)
        ids = []
        for item in items:
            if isinstance(item, str):
                self.check_text_fits(len(item.encode("utf-8", "surrogatepass")))
                item = self.tokenize(item)
            ids.append(item)
        # through the engine: batched with other embed calls' inputs, beside the requests' steps (engine.py)
        return self._engine_open().embed(ids, how, normalize).result()

    def greedy(self, ids, n: int) -> list[int]:
        """n tokens chosen by argmax: the prompt in one step, then one decode step per token through the KV cache."""
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"n must be a non-negative integer, got {n!r}")
        self._check_generates()

        def run(seq: OneSequence) -> list[int]:
            a = seq.check(ids, extra=n)
            if n == 0:
                return []
            last = np.array([0], dtype=np.int32)
            n_tok = self.tokenizer.vocab_size  # rows past it (a padded embedding) are never chosen
            out = [int(np.argmax(seq.step(a, 0, np.array([len(a) - 1], dtype=np.int32))[0, :n_tok]))]
            while len(out) < n:
                logits = seq.step(np.array(out[-1:], dtype=np.int32), len(a) + len(out) - 1, last)
                out.append(int(np.argmax(logits[0, :n_tok])))
            return out

        return self.exclusive(run)

    @property
    def max_prompt_bytes(self) -> int:
        """Text longer than this many UTF-8 bytes cannot fit the context in tokens (each token stands for at most
        tokenizer.max_piece_bytes bytes), so it is refused before tokenizing: reading and tokenizing input stays
        proportional to the context, not to the input."""
        return self.ctx_size * self.tokenizer.max_piece_bytes

    def check_text_fits(self, n_bytes: int) -> None:
        """ValueError when n_bytes of text cannot fit the context whatever its tokens (engine/context_window.py)."""
        self._engine_open().window.check_text(n_bytes, lambda: self.tokenizer.max_piece_bytes)

    @property
    def window(self):
        """The ContextWindow (engine/context_window.py) that decides whether a request fits."""
        return self._engine_open().window

    def pool_stats(self) -> dict[str, int]:
        """The engine's state between two steps: running and waiting sequences, KV blocks (total, used by live
        sequences, free but holding a cached prefix), and with a draft model the draft blocks its live sequences hold."""
        draft = self._engine_open().drafter.draft
        extra = (lambda: {"draft_blocks_used": draft.num_used_blocks}) if draft is not None else dict
        return self._engine.inspect(lambda sched: {**sched.pool_stats(), **extra()})

    def submit(
        self,
        ids,
        params: SamplingParams | None = None,
        logprobs: int | None = None,
        speculative: str | None = None,
        grammar: Grammar | None = None,
    ) -> RequestStream:
        """Queues a completion of token ids with the engine and returns its stream (engine/stream.py): a blocking
        iterator and an async one over Chunks; close() cancels. ValueError when the ids do not fit (a
        ContextLengthError when the context is too small). logprobs: see Engine.submit. speculative: "ngram",
        "off" or "draft" (the LLM's draft model) for this request (None: the LLM's). grammar: structured output,
        e.g. Grammar.json_schema(schema) (localllm.engine.constraint): every token follows it; a reply that
        completes it ends with finish_reason "stop"."""
        self._check_generates()
        params = params if params is not None else SamplingParams()
        return self._engine_open().submit(ids, params, logprobs=logprobs, speculative=speculative, grammar=grammar)

    def generate(
        self,
        prompt_or_ids,
        params: SamplingParams | None = None,
        speculative: str | None = None,
        grammar: Grammar | None = None,
        **kwargs,
    ) -> Iterator[Chunk]:
        """Streams a completion of a raw prompt (str, encoded with BOS as the model asks) or of token ids.
        kwargs are SamplingParams fields (temperature, top_k, ..., max_tokens, stop, seed, ignore_eos);
        a bad value raises ValueError naming it. Chunks: .text, .token_ids; the last also .finish_reason and
        .stats. speculative, grammar: see submit."""
        if params is None:
            params = SamplingParams(**kwargs)
        elif kwargs:
            raise TypeError("pass either params or sampling keyword arguments, not both")
        if isinstance(prompt_or_ids, str):
            self.check_text_fits(len(prompt_or_ids.encode("utf-8", "surrogatepass")))
            ids = self.tokenize(prompt_or_ids)
        else:
            ids = prompt_or_ids
        return _chunks(self.submit(ids, params, speculative=speculative, grammar=grammar))

    def chat(
        self,
        messages,
        params: SamplingParams | None = None,
        tools=None,
        speculative: str | None = None,
        grammar: Grammar | None = None,
        reasoning: str = "split",
        **kwargs,
    ) -> Iterator[Chunk]:
        """Like generate, for a conversation rendered with the model's chat template. A thinking model's reasoning
        (<think> tags, gpt-oss's analysis channel) comes in each chunk's `reasoning`, apart from its `text`, and a
        gpt-oss tool call as a <tool_call> block; reasoning="raw" leaves the text as the model wrote it, "hide" drops
        the reasoning (text/reasoning.py)."""
        if params is None:
            params = SamplingParams(**kwargs)
        elif kwargs:
            raise TypeError("pass either params or sampling keyword arguments, not both")
        if isinstance(messages, list):
            self.check_text_fits(
                sum(len(str(m.get("content") or "").encode()) for m in messages if isinstance(m, dict))
            )
        if reasoning not in MODES:
            raise ValueError(f"reasoning must be one of {', '.join(MODES)}, got {reasoning!r}")
        ids = self.tokenizer.encode_chat(messages, tools=tools)
        chunks = _chunks(self.submit(ids, params, speculative=speculative, grammar=grammar))
        split = reply_splitter(self.tokenizer, ids, reasoning, calls=bool(tools))
        return chunks if split is None else _split(chunks, split)

    def close(self) -> None:
        """Cancels live requests, stops the engine, releases the native model and the file map."""
        self._engine.close()
        self.model = None
        self._file.close()
        if self._draft_file is not None:
            self._draft_file.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _chunks(stream: RequestStream) -> Iterator[Chunk]:
    """The stream's chunks; a consumer that stops early (break, an exception, the generator collected) cancels it."""
    try:
        yield from stream
    finally:
        stream.close()


def _split(chunks: Iterator[Chunk], split) -> Iterator[Chunk]:
    """chunks with their text split into reasoning and content; the splitter's rest goes with the last chunk."""
    try:
        for chunk in chunks:
            reasoning, text = split.push(chunk.text)
            if chunk.finish_reason is not None:
                r2, c2 = split.finish()
                reasoning, text = reasoning + r2, text + c2
            yield replace(chunk, text=text, reasoning=reasoning)
    finally:
        chunks.close()


def _thread_count(n: int | None) -> int | None:
    """n checked; a count above the CPUs this process may use is capped there with a warning (hundreds of threads
    on two cores only wait on each other: 512 took 33 s for 4 tokens where 2 took 0.07 s)."""
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n_threads must be a positive integer, got {n!r}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if n > cpus:
        warnings.warn(f"n_threads {n} is more than the {cpus} CPUs this process may use: using {cpus}", stacklevel=3)
        return cpus
    return n


def _model_path(path) -> str:
    """A .gguf file's path, or a store name resolved (hub.resolve_model: ModelNotFoundError, a ValueError, naming
    what is at a path that is not a model file)."""
    p = os.fspath(path)
    if os.path.isfile(p):
        return p
    from .hub import resolve_model

    return os.fspath(resolve_model(p))


def _check_kv_memory(kv_bytes: int, ctx_size: int, capped: bool) -> None:
    """ValueError when the KV pool alone would exceed this machine's memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return
    if kv_bytes > total:
        what = "the KV budget" if capped else f"ctx_size {ctx_size}"
        raise ValueError(
            f"{what} needs {kv_bytes / 2**30:.1f} GiB of KV cache and this machine has {total / 2**30:.1f} GiB of "
            "memory: choose a smaller context (or a quantized KV type, or a KV budget)"
        )
