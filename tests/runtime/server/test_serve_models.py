"""Which models a live server holds: --max-models N keeps N resident (the least recently used idle one makes room
for another), and Ollama's keep_alive unloads a model once it has been idle that long (the default model stays)."""

from __future__ import annotations

import time

import httpx
import pytest
from conftest import model_file
from live_server import live_server
from localllm.server.errors import APIError
from localllm.server.ollama_api import keep_alive_seconds

SMOL = "smollm2-135m-instruct-q4_1"
GEMMA = "gemma-3-270m-q4_k_m"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m"


@pytest.mark.parametrize(
    "value, seconds",
    [
        (None, 300.0),
        ("", 300.0),
        ("5m", 300.0),
        ("30s", 30.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        (" 2m ", 120.0),
        (12, 12.0),
        (2.5, 2.5),
        ("12", 12.0),
        (0, 0.0),
        ("0", 0.0),
        ("0s", 0.0),
        (-1, None),
        ("-1", None),
        ("-1m", None),
        (1e300, None),
    ],
)
def test_keep_alive_durations(value, seconds):
    assert keep_alive_seconds(value) == (None if seconds is None else pytest.approx(seconds))


@pytest.mark.parametrize(
    "value", ["soon", "5x", "m", "1.2.3s", "5m trailing", "--1m", True, [1], {"s": 1}, float("nan")]
)
def test_an_unreadable_keep_alive_is_a_400_naming_it(value):
    with pytest.raises(APIError) as e:
        keep_alive_seconds(value)
    assert e.value.status == 400 and e.value.param == "keep_alive" and repr(value) in e.value.message


def _resident(app) -> dict:
    return {e.name: e.llm for e in app.state.host.resident()}


def _ps(h: httpx.Client) -> dict:
    return {m["name"]: m for m in h.get("/api/ps").json()["models"]}


def _wait_gone(h: httpx.Client, name: str, seconds: float = 15) -> dict:
    end = time.monotonic() + seconds
    while name in (ps := _ps(h)) and time.monotonic() < end:
        time.sleep(0.1)
    return ps


@pytest.mark.model
@pytest.mark.filterwarnings("ignore:.*no tokenizer.chat_template")  # gemma-3-270m (base model): ChatML stands in
def test_max_models_keeps_two_resident_and_keep_alive_unloads_idle_ones():
    smol, gemma, qwen = (str(model_file(m)) for m in (SMOL, GEMMA, QWEN))
    opts = {"temperature": 0, "num_predict": 2}
    with (
        live_server(smol, host_kwargs={"max_models": 2}, ctx_size=512) as (url, app),
        httpx.Client(base_url=url, timeout=120) as h,
    ):

        def generate(model, **kw) -> dict:
            r = h.post("/api/generate", json={"model": model, "prompt": "Hi", "stream": False, "options": opts, **kw})
            assert r.status_code == 200, r.text
            return r.json()

        assert generate(gemma, keep_alive=-1)["response"]
        loaded = _resident(app)
        assert set(loaded) == {smol, gemma}
        for model in (SMOL, gemma, smol, gemma):  # both answer from the same loaded models: nothing reloads
            body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
            r = h.post("/v1/chat/completions", json=body)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        assert _resident(app) == loaded
        ps = _ps(h)
        assert set(ps) == {smol, gemma} and ps[gemma]["expires_at"] is None  # keep_alive -1: for ever

        # a third model makes room by unloading the least recently used idle one (smol, whose last use came first)
        assert generate(qwen, keep_alive="1h")["response"]
        assert set(_ps(h)) == {gemma, qwen} and _resident(app)[gemma] is loaded[gemma]
        assert _ps(h)[qwen]["expires_at"] is not None

        # keep_alive "1s": unloaded a second after its request ends; a streamed request, by the stream's end
        with h.stream(
            "POST", "/api/generate", json={"model": gemma, "prompt": "Hi", "options": opts, "keep_alive": "1s"}
        ) as r:
            assert [line for line in r.iter_lines() if line]
        assert gemma in _ps(h)
        assert set(_wait_gone(h, gemma)) == {qwen}

        # keep_alive 0 on a request that only loads the model (Ollama's way to unload one): gone at once
        assert generate(qwen, prompt="", keep_alive=0)["done_reason"] == "load"
        assert _wait_gone(h, qwen, seconds=5) == {}

        # the default model comes back on demand and stays loaded whatever keep_alive says
        assert generate(smol, keep_alive=0)["response"]
        time.sleep(0.5)
        assert set(_ps(h)) == {smol}
        r = h.post("/api/chat", json={"model": SMOL, "messages": [], "keep_alive": "soon"})
        assert r.status_code == 400 and "keep_alive" in r.json()["error"]


@pytest.mark.model
@pytest.mark.filterwarnings("ignore:.*no tokenizer.chat_template")
def test_a_draft_model_serves_its_model_and_other_models_draft_by_ngrams(tmp_path):
    import shutil

    smol, gemma = str(model_file(SMOL)), str(model_file(GEMMA))
    draft = tmp_path / "smol-draft.gguf"  # smollm2 drafting for itself (a copy: a draft must not be the model's path)
    shutil.copyfile(smol, draft)
    with (
        live_server(smol, host_kwargs={"max_models": 2}, ctx_size=512, speculative=str(draft)) as (url, app),
        httpx.Client(base_url=url, timeout=120) as h,
    ):
        for model in (smol, gemma):
            r = h.post("/v1/completions", json={"model": model, "prompt": "One, two,", "max_tokens": 8})
            assert r.status_code == 200, r.text
        resident = _resident(app)
        assert resident[smol].speculative == "draft" and resident[gemma].speculative == "ngram"
