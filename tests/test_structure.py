"""The shape of the source tree, held by tests: no import circles inside the package (counting imports made
inside functions too, which only hide a circle), and every source file opens by saying what it is."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# where each folder is installed: runtime/ as the package localllm, tui/ as localllm.tui (CMakeLists.txt)
PACKAGES = {"runtime": "localllm", "tui": "localllm.tui"}


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in PACKAGES.items():
        for p in sorted((REPO / folder).rglob("*.py")):
            parts = list(p.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = p
    return mods


def _runtime_nodes(tree: ast.AST):
    """Every node, except what sits under `if TYPE_CHECKING:` (imports for annotations never run)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            test = child.test if isinstance(child, ast.If) else None
            if test is not None and "TYPE_CHECKING" in ast.unparse(test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports, anywhere in the file."""
    is_pkg = path.name == "__init__.py"
    here = name.split(".") if is_pkg else name.split(".")[:-1]
    out = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = (here[: len(here) - node.level + 1] if node.level else []) + (node.module or "").split(".")
            base = [b for b in base if b]
            targets = [".".join(base)] + [".".join([*base, a.name]) for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # `from .x import name`: the module is the longest known prefix
                t = t.rpartition(".")[0]
            if t and t != name and not name.startswith(t + "."):  # a package's own __init__ is not a cycle
                out.add(t)
    return out


def test_no_import_circles():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(" -> ".join([*stack[stack.index(d) :], d]))
            elif d not in state:
                visit(d, [*stack, d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_every_source_file_says_what_it_is():
    silent = []
    for p in sorted(REPO.glob("runtime/**/*.py")) + sorted(REPO.glob("tui/**/*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        if ast.get_docstring(tree) is None and tree.body:
            silent.append(str(p.relative_to(REPO)))
    for p in sorted(REPO.glob("native/**/*")):
        if p.suffix in (".h", ".cpp", ".inc", ".cu", ".cuh"):
            first = p.read_text(encoding="utf-8").lstrip().splitlines()[:1]
            if not first or not first[0].startswith(("//", "/*")):
                silent.append(str(p.relative_to(REPO)))
    assert not silent, "files whose first lines do not say what they are: " + ", ".join(silent)


# The layout by concern: what may sit at runtime/'s root (the public faces and the CLI) and the rooms under it.
ROOT_MODULES = {"__init__", "cli", "llm", "native", "perplexity", "sampling"}
ROOMS = {"bench", "commands", "engine", "hub", "model", "server", "text"}


def test_runtime_is_grouped_by_concern():
    root = REPO / "runtime"
    modules = {p.stem for p in root.glob("*.py")}
    rooms = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == ROOT_MODULES, f"modules at runtime/'s root: {sorted(modules - ROOT_MODULES)} belong in a room"
    assert rooms == ROOMS, (
        f"runtime/'s rooms changed: {sorted(rooms ^ ROOMS)} (update this test and docs/architecture.md)"
    )
    for top in ("pyproject.toml", "CMakeLists.txt", "README.md", "runtime", "native", "tui", "tests", "models"):
        assert (REPO / top).exists(), f"the founding layout lost {top}"


def test_the_public_api_is_importable_from_the_package():
    import localllm

    for name in ("LLM", "SamplingParams", "Grammar", "Chunk", "Tokenizer", "GGUFFile", "GGUFError", "backends"):
        assert name in localllm.__all__ and getattr(localllm, name) is not None
    from localllm import Chunk, SamplingParams
    from localllm.engine.output import Chunk as EngineChunk
    from localllm.sampling import SamplingParams as Params

    assert Chunk is EngineChunk and SamplingParams is Params
