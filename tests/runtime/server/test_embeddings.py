"""Embeddings (issue 35): a text's final hidden states pooled and normalised (engine/embedding.py) against
llama.cpp's embeddings of the same texts on the same model (models/record_embeddings.py ->
tests/reference/embeddings/), to a cosine of at least 0.999; and through serve with the openai SDK (floats and its
default base64), LangChain's OpenAIEmbeddings and the ollama client, bad input a 400 naming it. An encoder (a
synthetic bert: tests/runtime/test_encoders.py checks its vectors) serves the same routes and refuses to chat."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import model_file
from localllm.engine.embedding import pool, pooling_of
from localllm.llm import LLM

REFERENCE = Path(__file__).resolve().parents[2] / "reference" / "embeddings"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"


def test_pooling_follows_the_file_and_llama_cpps_types():
    rows = np.array([[3.0, 4.0], [0.0, 2.0]], dtype=np.float32)
    np.testing.assert_allclose(pool(rows, "mean", normalize=False), [1.5, 3.0])
    np.testing.assert_allclose(pool(rows, "cls"), [0.6, 0.8])
    np.testing.assert_allclose(pool(rows, "last"), [0.0, 1.0])
    assert pooling_of({"general.architecture": "bert", "bert.pooling_type": 2}) == "cls"
    assert pooling_of({"general.architecture": "qwen2"}) == "mean"
    with pytest.raises(ValueError, match="rank"):
        pooling_of({"general.architecture": "bert", "bert.pooling_type": 4})
    with pytest.raises(ValueError, match="pooling"):
        pool(rows, "max")


@pytest.mark.model
def test_embeddings_match_llama_cpps():
    ref = json.loads((REFERENCE / f"{QWEN}.json").read_text())
    with LLM(model_file(QWEN), n_threads=2, ctx_size=512) as llm:
        assert [llm.tokenize(t) for t in ref["texts"]] == ref["token_ids"]
        got = llm.embed(ref["texts"])
        again = llm.embed(ref["token_ids"][1])  # ids as input; one alone is the same as in a list
    want = np.array(ref["embeddings"])
    cos = (got * want).sum(1) / np.linalg.norm(want, axis=1)
    assert cos.min() >= 0.999, cos
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(again[0], got[1])


@pytest.fixture(scope="module")
def server():
    from live_server import live_server

    # a context of 512: Ollama's default truncation below embeds that much of a long text (4096 tokens took 12 s)
    with live_server(str(model_file(QWEN)), ctx_size=512, parallel=2, host_kwargs={"fallback": True}) as (url, app):
        yield url, app


@pytest.mark.model
def test_openai_sdk_langchain_and_ollama_get_the_same_vectors(server):
    import ollama
    import openai
    from langchain_openai import OpenAIEmbeddings

    ref = json.loads((REFERENCE / f"{QWEN}.json").read_text())
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0)
    r = client.embeddings.create(model="m", input=ref["texts"])  # the SDK asks for base64 and decodes it
    got = np.array([d.embedding for d in r.data])
    assert r.usage.prompt_tokens == sum(len(t) for t in ref["token_ids"])
    floats = client.embeddings.create(model="m", input=ref["texts"][0], encoding_format="float")
    np.testing.assert_allclose(floats.data[0].embedding, got[0], rtol=0, atol=1e-7)
    cos = (got * np.array(ref["embeddings"])).sum(1)
    assert cos.min() >= 0.999, cos
    lc = OpenAIEmbeddings(base_url=server[0] + "/v1", api_key="none", model="m", check_embedding_ctx_length=False)
    np.testing.assert_allclose(lc.embed_query(ref["texts"][1]), got[1], atol=1e-6)
    o = ollama.Client(host=server[0])
    np.testing.assert_allclose(o.embed(model="m", input=ref["texts"]).embeddings, got, atol=1e-6)
    np.testing.assert_allclose(o.embeddings(model="m", prompt=ref["texts"][2]).embedding, got[2], atol=1e-6)


@pytest.mark.model
def test_bad_embedding_input_is_a_400_naming_it(server):
    import httpx

    def post(path, body):
        return httpx.post(server[0] + path, json=body, timeout=60)

    long = "word " * 5000  # past the server's context
    r = post("/v1/embeddings", {"input": ["fine", long]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[1]", r.text
    assert r.json()["error"]["code"] == "context_length_exceeded"
    r = post("/v1/embeddings", {"input": [""]})
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]
    r = post("/v1/embeddings", {"input": "x", "dimensions": 8})
    assert r.status_code == 400 and r.json()["error"]["param"] == "dimensions"
    r = post("/api/embed", {"model": "m", "input": long, "truncate": False})
    assert r.status_code == 400 and "context" in r.json()["error"]
    r = post("/api/embed", {"model": "m", "input": long})  # Ollama truncates by default
    assert r.status_code == 200 and len(r.json()["embeddings"][0]) == 896
    r = post("/api/embed", {"model": "m", "input": "x", "keep_alive": "soon"})
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]
    # no refusal above kept the model leased (a leaked lease blocks unloading and counts against the 503 limit)
    assert sum(e.in_flight for e in server[1].state.host.resident()) == 0


@pytest.fixture(scope="module")
def bert_server(tmp_path_factory):
    import sys

    from conftest import model_cache
    from live_server import live_server

    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "models"))
    from synthetic_arch import ARCHS, write

    src = model_cache() / f"{ARCHS['bert']['tokenizer']}.gguf"
    if not src.exists():
        pytest.skip(f"the vocabulary's source test model {src.name} is not fetched (models/fetch_test_models.py)")
    path = tmp_path_factory.mktemp("bert") / "bert-f32.gguf"
    write(path, "bert", tokenizer_from=src, wtype="F32", seed=0)
    with live_server(str(path), parallel=2, host_kwargs={"fallback": True}) as (url, _app):
        yield url


@pytest.mark.model
def test_an_encoder_serves_embeddings_and_refuses_to_chat(bert_server):
    import httpx
    import ollama
    import openai

    url = bert_server
    ref = json.loads((REFERENCE / "synthetic-bert-f32.json").read_text())
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    r = client.embeddings.create(model="m", input=ref["texts"])
    got = np.array([d.embedding for d in r.data])
    cos = (got * np.array(ref["embeddings"])).sum(1)
    assert cos.min() >= 0.99999, cos
    np.testing.assert_allclose(ollama.Client(host=url).embed(model="m", input=ref["texts"]).embeddings, got, atol=1e-6)
    long = "word " * 1000  # past BERT's 512 learned positions: refused, or cut with its [SEP] kept (Ollama's default)
    r = httpx.post(url + "/v1/embeddings", json={"input": long}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text
    assert httpx.post(url + "/api/embed", json={"model": "m", "input": long}, timeout=60).status_code == 200
    for route, body in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
    ):
        r = httpx.post(url + route, json={"model": "m", "max_tokens": 4, **body}, timeout=60)
        assert r.status_code == 400, (route, r.text)
        assert "chat" in r.text or "encoder" in r.text, (route, r.text)
