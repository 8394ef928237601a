"""What a model reference names, without touching the network: hub references, split-file names, paths.

parse_ref("hf.co/bartowski/Qwen2.5-0.5B-GGUF:Q8_0") -> HubRef(repo="bartowski/Qwen2.5-0.5B-GGUF", quant="Q8_0")
parse_ref("user/repo")                          -> HubRef(repo="user/repo", quant="Q4_K_M")
parse_ref("user/repo/sub/model-Q4_K_M.gguf")    -> HubRef(repo="user/repo", file="sub/model-Q4_K_M.gguf")
parse_ref("qwen2.5-coder:0.5b")                 -> None (not a hub reference)
stem("m-Q8_0-00001-of-00002.gguf") -> "m-Q8_0"; split_siblings("m-00001-of-00002.gguf") -> [part 1, part 2]
looks_like_path("./m.gguf") -> True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_QUANT = "Q4_K_M"  # llama.cpp's `-hf user/repo` default

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_PREFIX = re.compile(r"^(?:https?://)?(?:hf\.co|huggingface\.co)/", re.IGNORECASE)
_REF_QUANT = re.compile(rf"({_NAME}/{_NAME})(?::([A-Za-z0-9][A-Za-z0-9._-]*))?")
_REF_FILE = re.compile(rf"({_NAME}/{_NAME})/((?:{_NAME}/)*{_NAME}\.gguf)", re.IGNORECASE)
SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)  # groups: this part, the number of parts


@dataclass(frozen=True)
class HubRef:
    repo: str  # "user/repo"
    quant: str | None = None  # upper case; set when file is None
    file: str | None = None  # path inside the repo
    revision: str = "main"

    @property
    def name(self) -> str:
        """The store name: hf.co/user/repo:QUANT or hf.co/user/repo/file.gguf."""
        return f"hf.co/{self.repo}/{self.file}" if self.file else f"hf.co/{self.repo}:{self.quant}"


def parse_ref(ref: str) -> HubRef | None:
    """The hub reference `ref` spells, or None."""
    s = _PREFIX.sub("", ref.strip(), count=1)
    if m := _REF_FILE.fullmatch(s):
        return HubRef(repo=m[1], file=m[2])
    if (m := _REF_QUANT.fullmatch(s)) and not (m[2] is None and s.lower().endswith(".gguf")):
        return HubRef(repo=m[1], quant=(m[2] or DEFAULT_QUANT).upper())
    return None


def has_quant(path: str, quant: str | None) -> bool:
    """Whether the file name at `path` carries the quant tag (`Q8_0` in `m-Q8_0.gguf`, not in `m-Q8_0_L.gguf`)."""
    tag = rf"(?<![A-Za-z0-9]){re.escape(quant or DEFAULT_QUANT)}(?![A-Za-z0-9_])"
    return re.search(tag, path.rsplit("/", 1)[-1], re.IGNORECASE) is not None


def stem(file: str) -> str:
    """The model name a file suggests: `m-Q8_0-00001-of-00002.gguf` -> `m-Q8_0`."""
    return re.sub(r"\.gguf$", "", SPLIT.sub("", file), flags=re.IGNORECASE)


def part_name(base: str, i: int, n: int) -> str:
    """The file name of part i (from 1) of n of a split GGUF: `m`, 1, 3 -> `m-00001-of-00003.gguf`."""
    return f"{base}-{i:05d}-of-{n:05d}.gguf"


def split_parts(file: str) -> list[str]:
    """Every part's name, in order, when `file` is any part of a split GGUF (a path keeps its directory); else [file]."""
    m = SPLIT.search(file)
    if not m:
        return [file]
    base = file[: m.start()]
    return [part_name(base, i, int(m[2])) for i in range(1, int(m[2]) + 1)]


def split_siblings(first: str) -> list[str]:
    """first, or the names of every part when first is part 1 of a split GGUF (`-00001-of-00003.gguf`)."""
    m = SPLIT.search(first)
    return split_parts(first) if m and m[1] == "00001" else [first]


def looks_like_path(ref: str) -> bool:
    """True for references that can only be file paths: /abs, ./rel, ~/..., or a .gguf name that is no hub reference."""
    if ref.startswith(("/", "./", "../", "~")):
        return True
    return ref.lower().endswith(".gguf") and parse_ref(ref) is None
