"""The runtime's own bounds (issue: hostile and careless input): thread counts, context sizes, paths that are not
model files, token ids that are not integers, embedding rows the tokenizer cannot decode, cancelling a prefill."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import model_file
from localllm.engine import Engine
from localllm.llm import LLM
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model
from localllm.sampling import SamplingParams
from localllm.text.tokenizer import Tokenizer, TokenizerError

SMOL = "smollm2-135m-instruct-q4_1"


@pytest.fixture(scope="module")
def smol():
    with LLM(model_file(SMOL), n_threads=1, ctx_size=2048, max_batch_tokens=64) as llm:
        yield llm


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([1.7], TypeError, r"the prompt\[0\] must be an integer token id, got 1.7"),
        (b"hi", TypeError, "must be a sequence of integer token ids, got bytes"),
        ([True], TypeError, "must be an integer token id"),
        ([2**70], ValueError, r"the prompt\[0\] = 1180591620717411303424 is outside the vocabulary"),
        ([-1], ValueError, "outside the vocabulary"),
        (np.array([1.0, 2.0]), TypeError, "1-D array of integers"),
        (5, TypeError, "got int"),
    ],
)
def test_token_ids_that_are_not_ids_are_refused_by_name(smol, ids, error, message):
    with pytest.raises(error, match=message):
        smol.generate(ids)


def test_decode_and_logits_check_ids_too(smol):
    with pytest.raises(TypeError, match=r"ids\[0\] must be an integer token id, got 1.5"):
        smol.tokenizer.decode([1.5])
    with pytest.raises(TypeError, match="got str"):
        smol.logits("hello")
    assert smol.tokenizer.decode(np.array([28, 29])) == smol.tokenizer.decode([28, 29])


def test_rows_past_the_tokenizer_are_never_sampled():
    """A padded embedding table (more rows than tokens): an id the tokenizer cannot decode is never chosen."""
    path = model_file(SMOL)
    with LLM(path, n_threads=1, ctx_size=256) as llm:
        tok = llm.tokenizer
        ids = tok.encode("The quick brown fox")
        free = [t for c in llm.generate(ids, temperature=0, max_tokens=8, ignore_eos=True) for t in c.token_ids]
        assert max(free) >= 1000  # unmasked, this prompt's greedy reply uses ids past 1,000

        class SmallerTokenizer:  # the same tokenizer, claiming 1,000 tokens of the model's 49,152 rows
            def __getattr__(self, name):
                return getattr(tok, name)

            vocab_size = 1000

        with GGUFFile(path) as f:
            engine = Engine(Model(f, n_blocks=16, threads=1), SmallerTokenizer())
            try:
                for params in (
                    SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
                    SamplingParams(temperature=1.5, top_k=0, seed=3, max_tokens=8, ignore_eos=True),
                ):
                    got = [t for c in engine.submit(ids, params) for t in c.token_ids]
                    assert len(got) == 8 and max(got) < 1000
            finally:
                engine.close()


def test_thread_counts_above_the_cpus_are_capped_with_a_warning():
    cpus = len(os.sched_getaffinity(0))
    with pytest.warns(UserWarning, match=f"n_threads 512 is more than the {cpus} CPUs"):
        llm = LLM(model_file(SMOL), n_threads=512, ctx_size=64)
    with llm:
        assert llm.model.threads == cpus
    with pytest.raises(ValueError, match="n_threads must be a positive integer"):
        LLM(model_file(SMOL), n_threads=0)


def test_a_thread_that_cannot_start_is_an_error_naming_the_count():
    """Under a memory limit the pool's threads cannot all be created: an exception, never a hang."""
    code = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from localllm import native\n"
        "try:\n"
        "    native.configure(threads=400)\n"
        "    native.matmul_raw(8, __import__('numpy').zeros((16, 34), 'uint8'), 32, __import__('numpy').ones((1, 32), 'float32'))\n"
        "except RuntimeError as e:\n"
        "    print('refused:', e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "refused: cannot start 400 threads" in r.stdout, r.stdout + r.stderr


def test_paths_that_are_not_model_files_are_named_for_what_they_are(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        LLM(tmp_path)
    with pytest.raises(ValueError, match=r"not a regular file \(a device, FIFO or socket\)"):
        LLM("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        LLM(fifo)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ValueError, match="cannot open the model file: Too many levels of symbolic links"):
        LLM(loop)


def test_a_context_beyond_memory_is_refused_before_allocating():
    with pytest.raises(ValueError, match=r"ctx_size 1099511627776 needs .* GiB of KV cache and this machine has"):
        LLM(model_file(SMOL), ctx_size=1 << 40)
    with pytest.raises(ValueError, match="kv_budget_mib must be a positive number"):
        LLM(model_file(SMOL), kv_budget_mib=float("inf"))


def test_cancelling_a_long_prefill_takes_effect_between_chunks(smol):
    ids = smol.tokenize("word " * 1800)[:1800]  # 29 chunks of 64 tokens
    t0 = time.perf_counter()
    stream = smol.submit(ids, SamplingParams(max_tokens=4))
    time.sleep(0.3)
    stream.close()
    free = smol._engine.inspect(lambda sched: not sched.has_unfinished)  # answered between two steps
    assert free and time.perf_counter() - t0 < 5  # the whole prefill takes far longer on one thread
    assert list(stream)[-1].finish_reason == "abort"


def test_text_that_cannot_fit_is_refused_before_tokenizing(smol):
    """10 MB of spaces used to take a minute and 3 GB to be refused: the byte count alone decides now."""
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"the prompt is 10000000 bytes of text: more than the context of 2048 tokens"):
        smol.generate(" " * 10_000_000)
    with pytest.raises(ValueError, match="more than the context"):
        smol.chat([{"role": "user", "content": "x" * 10_000_000}])
    assert time.perf_counter() - t0 < 2
    assert smol.max_prompt_bytes == 2048 * smol.tokenizer.max_piece_bytes
    longest = max(
        range(smol.tokenizer.vocab_size), key=lambda i: len(smol.tokenizer.decode([i], special=True).encode())
    )
    assert len(smol.tokenizer.decode([longest], special=True).encode()) <= smol.tokenizer.max_piece_bytes


def unsupported_attn_q(monkeypatch) -> None:
    """GGUFFile.tensor reports blk.0.attn_q.weight as IQ2_XXS, a type the kernels do not compute."""
    import dataclasses

    from localllm.model import quant_types

    real = GGUFFile.tensor

    def iq2(self, name):
        t = real(self, name)
        return dataclasses.replace(t, type=quant_types.get("IQ2_XXS")) if name == "blk.0.attn_q.weight" else t

    monkeypatch.setattr(GGUFFile, "tensor", iq2)


def test_an_unsupported_tensor_type_names_the_file_and_the_tensor(monkeypatch):
    path = model_file(SMOL)
    unsupported_attn_q(monkeypatch)
    with pytest.raises(ValueError, match=rf"{path}: blk\.0\.attn_q\.weight: tensor type IQ2_XXS is not supported"):
        LLM(path, ctx_size=64)


@pytest.mark.parametrize("model_fails_too", [False, True])
def test_a_tokenizer_error_comes_first_and_the_file_is_closed(monkeypatch, model_fails_too):
    """The tokenizer is read on a thread beside the model's load: its error is still the one raised (as when it was
    read first), whether the model loaded or failed too, and the file is closed either way."""
    path = model_file(SMOL)

    def broken(cls, metadata, name):
        time.sleep(0.2)  # after the model's load has finished or failed
        raise TokenizerError(f"{name}: a broken vocabulary")

    monkeypatch.setattr(Tokenizer, "from_metadata", classmethod(broken))
    if model_fails_too:
        unsupported_attn_q(monkeypatch)
    closed = []
    real_close = GGUFFile.close
    monkeypatch.setattr(GGUFFile, "close", lambda self: (closed.append(self.path), real_close(self))[1])
    with pytest.raises(TokenizerError, match="a broken vocabulary"):
        LLM(path, ctx_size=64)
    assert closed == [os.fspath(path)]
