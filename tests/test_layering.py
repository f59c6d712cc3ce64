"""The layers hold (docs/architecture.md): what each part of torpor may import, read from the
source with ``ast`` — imports inside functions and under ``TYPE_CHECKING`` count: a lazy import
is still a dependency. Each rule is its own test function, so a broken one names itself."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "torpor"


def _module_of(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    return {_module_of(p): p for p in SRC.rglob("*.py")}


@cache
def imports(module: str) -> frozenset[str]:
    """The torpor modules ``module`` imports: ``from .x import name`` is ``pkg.x.name`` when
    that is a module, else ``pkg.x``."""
    path = modules()[module]
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "torpor"}
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = module.split(".") if is_pkg else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "torpor":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in modules() else base)
    out.discard(module)
    return frozenset(m for m in out if m in modules())


def part(module: str) -> str:
    """The top-level part of torpor a module belongs to: ``torpor.memory.tokens`` ->
    ``memory``; a top-level module is its own part (``torpor.client`` -> ``client``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def package_graph() -> dict[str, set[str]]:
    """Which top-level parts of torpor import which (``memory -> {messages, tokens, ...}``)."""
    graph: dict[str, set[str]] = {}
    for mod in modules():
        deps = graph.setdefault(part(mod), set())
        deps |= {part(m) for m in imports(mod)} - {part(mod), ""}
    return graph


def importers(of: str, into: str) -> list[str]:
    """The modules of part ``into`` that import anything of part ``of``."""
    return sorted(
        m for m in modules() if part(m) == into and any(part(d) == of for d in imports(m))
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of ``graph`` with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(n: str) -> None:  # Tarjan's algorithm
        index[n] = low[n] = len(index)
        stack.append(n)
        on.add(n)
        for d in sorted(graph.get(n, ())):
            if d not in index:
                visit(d)
                low[n] = min(low[n], low[d])
            elif d in on:
                low[n] = min(low[n], index[d])
        if low[n] == index[n]:
            comp = []
            while True:
                m = stack.pop()
                on.discard(m)
                comp.append(m)
                if m == n:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for n in sorted(graph):
        if n not in index:
            visit(n)
    return found


def test_memory_never_imports_agents() -> None:
    """memory/ keeps, compacts and counts messages; their types are in torpor.messages and the
    estimate in torpor.tokens, below both memory/ and agents/ (agents/ uses memory/, never the
    reverse)."""
    assert importers("agents", into="memory") == []
    assert "memory" in package_graph()["agents"]  # the direction that is allowed, still used


def test_console_never_imports_cli() -> None:
    """console/ and cli/ are two faces over the same Client and run report (torpor.report):
    the console imports nothing of the CLI; the CLI imports the console only in the command
    that starts it (cli/console.py)."""
    assert importers("cli", into="console") == []
    assert set(importers("console", into="cli")) <= {"torpor.cli.console"}


def test_report_is_below_both_faces() -> None:
    """The run report is gathered below the CLI and the console that render it."""
    assert importers("cli", into="report") == importers("console", into="report") == []
    assert "report" in package_graph()["cli"] and "report" in package_graph()["console"]


def test_no_package_level_import_loops() -> None:
    """No two top-level parts of torpor import each other, directly or round a loop."""
    assert cycles(package_graph()) == []


def test_no_module_import_cycles() -> None:
    """No module imports itself round a loop (the house rule this README states)."""
    assert cycles({m: set(imports(m)) for m in modules()}) == []


def test_no_private_reach_ins() -> None:
    """No module imports another module's ``_private`` name (a package's own ``_modules``
    are its business: ``from ._lane import x`` inside ``torpor.testing`` is fine)."""
    reach = []
    for mod, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or (
                node.level == 0 and not (node.module or "").startswith("torpor")
            ):
                continue
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    target = {d for d in imports(mod) if d.endswith(f".{a.name}")}
                    if not target:  # a name, not a module: someone else's private name
                        reach.append(f"{mod}: {a.name}")
    assert reach == []


def test_the_scan_sees_imports() -> None:
    """The scanner is not blind: known imports are found (relative, nested, inside functions)
    and a known loop is found."""
    assert "torpor.client" in imports("torpor.console.pages")
    assert "torpor.queues" in imports("torpor.report.run")  # imported inside a function
    assert "history" in package_graph()["store"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_readme_layout_map_is_true() -> None:
    """The README's layout map names only files and folders that are in the repository (no
    path outside it), and names docs/architecture.md and this test as its checks."""
    import re

    readme = (SRC.parent.parent / "README.md").read_text()
    start = readme.index("Layout, from the pure bottom layer outwards")
    text = readme[start : readme.index("The flagship agent is in", start)]
    assert "../" not in text
    assert "docs/architecture.md" in text and "tests/test_layering.py" in text
    names = re.findall(r"`([\w*./]+(?:\.py|\.sql|/))`", text)
    assert len(names) > 20
    for name in names:
        if name.startswith(("docs/", "tests/")):
            assert (SRC.parent.parent / name).exists(), name
            continue
        found = list(SRC.rglob(name.rstrip("/"))) or list(SRC.rglob(name))
        assert found, f"the README's layout map names {name}, which is not in src/torpor"
