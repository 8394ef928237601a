"""Encoders (issue 35's embedding models: bert, nomic-bert) on synthetic files (models/synthetic_arch.py: the keys and
tensor names convert_hf_to_gguf writes, a WordPiece vocabulary built from a test model's) against what llama.cpp
recorded on the same files (models/record_embeddings.py --synthetic -> tests/reference/embeddings/synthetic-*.json):
its WordPiece token ids of varied text, its pooled embeddings, and against the float64 forward
(tests/reference_forward.py) and Hugging Face's BertWordPiece tokenizer. The file is rebuilt here; its sha256 must be
the recorded one. Besides: several whole sequences in one step give each one's bits alone (batch invariance), and an
encoder refuses what it cannot do (chunked sequences, generating, CUDA) by name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import model_cache, model_file
from localllm import native
from localllm.engine import ContextLengthError
from localllm.llm import LLM
from localllm.model.gguf import GGUFFile
from localllm.model.model import Model
from localllm.model.step_batch import StepBatchBuilder
from reference_forward import ReferenceModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models"))
from synthetic_arch import ARCHS, write

_EMBEDDINGS = Path(__file__).resolve().parents[1] / "reference" / "embeddings"
# the synthetic encoders (models/synthetic_arch.py), and the real all-MiniLM-L6-v2 (a test model: fetch_test_models.py
# converts it with bert_to_gguf.py), each with llama.cpp's embeddings and WordPiece ids (record_embeddings.py)
REFERENCES = sorted(_EMBEDDINGS.glob("synthetic-*.json")) + [_EMBEDDINGS / "all-minilm-l6-v2-f16.json"]
# 1 - cosine(localllm, llama.cpp), measured 2026-11-28 (AVX2): F32 matrices <= 4e-8, Q8_0 <= 7.4e-6 (both sides round
# activations to 8 bits per 32, in their own orders); bounds leave ~10x. The floor is 0.999.
# all-MiniLM-L6-v2 (F16 matrices, real weights): measured 1.1e-7 from llama.cpp (which rounds activations to f16 for
# its F16 products; localllm multiplies in f32), and 2.5e-8 from float64 where llama.cpp lies 8.2e-8; hidden rows
# 5.2e-4 from float64
COSINE_GAP = {"F32": 1e-6, "Q8_0": 1e-4, "F16": 1e-5}
# |localllm - float64| over every hidden row (LayerNorm'd: entries ~1), measured: F32 matrices 4.5e-4 (the f16 KV
# cache's rounding of K and V), Q8_0 0.051 (8-bit activations into every product, layer after layer)
FLOAT64_BOUND = {"F32": 2e-3, "Q8_0": 0.1, "F16": 2e-3}


@pytest.fixture(scope="module", params=REFERENCES, ids=lambda p: p.stem)
def encoder(request, tmp_path_factory):
    """(reference dict, path of the rebuilt model)."""
    ref = json.loads(request.param.read_text())
    if "arch" not in ref:  # a real test model
        return ref, model_file(ref["model"])
    src = model_cache() / f"{ARCHS[ref['arch']]['tokenizer']}.gguf"
    if not src.exists():
        pytest.skip(f"the vocabulary's source test model {src.name} is not fetched (models/fetch_test_models.py)")
    path = tmp_path_factory.mktemp("encoder") / f"{request.param.stem}.gguf"
    sha = write(path, ref["arch"], tokenizer_from=src, wtype=ref["weight_type"], seed=ref["seed"])
    assert sha == ref["sha256"], "models/synthetic_arch.py writes other bytes than were recorded: record again"
    return ref, path


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    src = model_cache() / f"{ARCHS['bert']['tokenizer']}.gguf"
    if not src.exists():
        pytest.skip(f"the vocabulary's source test model {src.name} is not fetched (models/fetch_test_models.py)")
    path = tmp_path_factory.mktemp("bert") / "bert-q8_0.gguf"
    write(path, "bert", tokenizer_from=src, wtype="Q8_0", seed=0)
    return path


@pytest.mark.model
def test_wordpiece_ids_match_llama_cpp(encoder):
    """Accents, punctuation, CJK, digits, long and unknown words, control and zero-width characters, literal
    specials, empty text: the ids llama.cpp's llm_tokenizer_wpm gave, [CLS] and [SEP] included."""
    ref, path = encoder
    with LLM(path, n_threads=1, ctx_size=64) as llm:
        for text, ids in zip(ref["tokenizer_texts"], ref["tokenizer_ids"]):
            assert llm.tokenize(text) == ids, repr(text)


@pytest.mark.model
def test_embeddings_match_llama_cpp(encoder):
    ref, path = encoder
    with LLM(path, n_threads=2, ctx_size=512) as llm:
        got = llm.embed(ref["texts"])
    want = np.array(ref["embeddings"], dtype=np.float64)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert np.all(cos >= 0.999), cos
    gap = COSINE_GAP[ref["weight_type"]]
    assert np.all(1 - cos <= gap), f"{path.stem}: 1 - cosine {(1 - cos).max():.2e} > {gap} (pooling {ref['pooling']})"


@pytest.mark.model
def test_hidden_states_match_the_float64_forward(encoder):
    """Every hidden row within FLOAT64_BOUND of the float64 forward's, and the pooled embeddings no farther from
    float64's (1 - cosine) than COSINE_GAP or twice llama.cpp's distance, whichever is larger."""
    from localllm.engine.embedding import pool

    ref, path = encoder
    with LLM(path, n_threads=2, ctx_size=512) as llm, GGUFFile(path) as f:
        want_model = ReferenceModel(f, float64=True)
        worst, ours, theirs = 0.0, [], []
        for text, llama in zip(ref["texts"], ref["embeddings"]):
            ids = np.array(llm.tokenize(text))
            got = llm.exclusive(lambda s, ids=ids: s.step(ids, 0, np.arange(len(ids), dtype=np.int32), hidden=True))
            want = want_model.hidden(ids.tolist())
            worst = max(worst, float(np.abs(got - want).max()))
            w = pool(want, ref["pooling"]).astype(np.float64)
            ours.append(1 - float(np.dot(pool(got, ref["pooling"]), w)))
            theirs.append(1 - float(np.dot(llama, w) / np.linalg.norm(llama)))
    assert worst <= FLOAT64_BOUND[ref["weight_type"]], f"{path.stem}: |localllm - float64| {worst:.2e}"
    bound = max(COSINE_GAP[ref["weight_type"]], 2 * max(theirs))
    assert max(ours) <= bound, f"{path.stem}: 1 - cosine to float64 {max(ours):.2e} > {bound:.2e}"


@pytest.mark.model
def test_wordpiece_agrees_with_hugging_face(encoder):
    """Hugging Face's BertWordPiece (BertNormalizer, BertPreTokenizer, WordPiece, "[CLS] $A [SEP]") over the vocabulary
    in its own spelling ("##" continuations) gives the same ids on every recorded text: an independent reference
    besides llama.cpp (they part on rarer ground: marks that are not Mn, Hangul, words over 100 characters)."""
    tokenizers = pytest.importorskip(
        "tokenizers", reason="Hugging Face tokenizers (the independent reference) is not installed"
    )
    from tokenizers.models import WordPiece
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from tokenizers.processors import TemplateProcessing

    ref, path = encoder
    with LLM(path, n_threads=1, ctx_size=512) as llm:
        tok = llm.tokenizer
        vocab = {}
        for i, text in enumerate(tok.tokens):
            control = tok.token_type(i) == 3
            vocab[text if control else text[1:] if text.startswith("\u2581") else "##" + text] = i
        hf = tokenizers.Tokenizer(WordPiece(vocab, unk_token="[UNK]"))
        hf.normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True)
        hf.pre_tokenizer = BertPreTokenizer()
        hf.post_processor = TemplateProcessing(
            single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.bos_id), ("[SEP]", tok.sep_id)]
        )
        llama = dict(zip(ref["tokenizer_texts"], ref["tokenizer_ids"]))
        parted = []  # where llama.cpp and Hugging Face part (localllm follows llama.cpp: the test above)
        for text in ref["tokenizer_texts"] + ref["texts"]:
            want = hf.encode(text).ids
            if text in llama and llama[text] != want:
                parted.append(text)
                continue
            assert llm.tokenize(text) == want, repr(text)
    # the real vocabulary has Hangul jamo, which the two decompose differently; the synthetic ones do not
    assert len(parted) <= 1 and all("한국어" in t for t in parted), parted


@pytest.mark.model
@pytest.mark.parametrize("cpu", native.known_paths())
def test_whole_sequences_in_one_step_give_the_bits_of_each_alone(bert, cpu):
    """Bidirectional attention sees a row's own sequence only: three sequences of different lengths in one step
    (each whole, in its own blocks) give each one's hidden states bit for bit as alone, on every kernel path."""
    if cpu not in native.available_paths():
        pytest.skip(f"this CPU cannot run the {cpu} path")
    native.configure(cpu)
    try:
        with LLM(bert, n_threads=2, ctx_size=512) as llm:
            texts = ["a short one", "def add(a, b):\n    return a + b\n" * 4, "The weather in Paris is sunny today."]
            seqs = [np.array(llm.tokenize(t)) for t in texts]
            rows = [np.arange(len(s), dtype=np.int32) for s in seqs]
            together = llm.exclusive(lambda s: s.step_many(seqs, rows, hidden=True))
            alone = [llm.exclusive(lambda s, a=a, r=r: s.step(a, 0, r, hidden=True)) for a, r in zip(seqs, rows)]
            packed = llm.embed(texts)  # the engine packs the inputs into one step
            one_by_one = np.stack([llm.embed(t)[0] for t in texts])
    finally:
        native.configure()
    for a, b in zip(together, alone):
        assert np.array_equal(a, b), f"max |diff| {np.abs(a - b).max()}"
    assert np.array_equal(packed, one_by_one)


@pytest.mark.model
def test_an_encoder_refuses_chunks_generation_and_the_gpu_by_name(bert):
    with LLM(bert, n_threads=1, ctx_size=4096) as llm:
        assert llm.ctx_size == 512  # its learned positions: position_embd has 512 rows
        assert llm.encoder
        ids = np.array(llm.tokenize("one two three four five six seven"))
        with pytest.raises(ValueError, match="computes a sequence whole, in one step"):
            llm.exclusive(
                lambda s: (s.step(ids[:4], 0, np.arange(4), hidden=True), s.step(ids[4:], 4, [0], hidden=True))
            )
        for call in (lambda: llm.logits(ids), lambda: list(llm.generate("hello", max_tokens=2))):
            with pytest.raises(ValueError, match="encoder-only embedding model: it has no language-model head"):
                call()
        with pytest.raises(ValueError, match="no language-model head"):  # the native model, asked for logits
            b = StepBatchBuilder(llm.model.block_size)
            b.add(ids, 0, list(range(llm.model.n_blocks)), logits=[len(ids) - 1])
            llm.model.forward(b.build())
        with pytest.raises(ContextLengthError):
            llm.embed([list(range(200, 800))])
    with pytest.raises(ValueError, match="encoder layers .*run on the CPU only"):
        LLM(bert, n_threads=1, ctx_size=64, device="cuda")
    with GGUFFile(bert) as f, pytest.raises(ValueError, match="placement: encoder layers run on the CPU only"):
        Model(f, n_blocks=4, threads=1, placement=[("cuda", 2)])


def test_show_says_an_encoder_embeds_only(bert):
    r = subprocess.run([sys.executable, "-m", "localllm.cli", "show", str(bert)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "runs here         yes" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("embeddings"))
    assert line.split(None, 1)[1] == "encoder only (no generation), pooling mean"
