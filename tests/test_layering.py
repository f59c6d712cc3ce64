"""The layers keep to their doors: read from the source itself (its syntax tree, so neither a
comment nor a docstring can hide a use or fake one).

- The Store is the only door to the database (issue 27): nothing outside ``torpor/store/``
  names a store's driver (``.driver``), its named queries (``.q``) or the concrete
  ``SQLStore``; everything above asks :class:`torpor.store.base.Store`.
- No package-level import loop: package ``a`` importing from ``b`` while ``b`` imports from
  ``a`` (directly or round a longer ring), counted by top-level subpackage of ``torpor`` (a
  top-level module counts as a package of its own). Each family of loops has its own test
  function below; they share :func:`package_graph` and :func:`loops`.
- The layers of docs/architecture.md (the second half): what each part of torpor may import,
  with imports inside functions and under ``TYPE_CHECKING`` counted (a lazy import is still a
  dependency); no module import cycles; no reach-ins to another module's private names; the
  README's layout map names only what is in the repository. Each rule is its own function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "torpor"

#: Attributes only the store's own modules may touch: the driver and its named queries.
STORE_INTERNALS = frozenset({"driver", "q"})
#: Names only the store's own modules may use.
CONCRETE = frozenset({"SQLStore"})


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def back_doors(source: str, where: str = "<source>") -> list[str]:
    """``where:line: what`` for each use in ``source`` of a store's insides: an attribute
    ``.driver``/``.q`` (read or written), ``getattr``-like access to one by name, the name
    ``SQLStore`` (or an attribute of that name), or an import of ``store.sqlstore``."""
    out: list[str] = []
    for node in sorted(ast.walk(ast.parse(source)), key=_position):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and node.attr in STORE_INTERNALS | CONCRETE:
            out.append(f"{where}:{line}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in CONCRETE:
            out.append(f"{where}:{line}: {node.id}")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module.split(".")[-1] == "sqlstore":
                out.append(f"{where}:{line}: import from {'.' * node.level}{module}")
            out += [f"{where}:{line}: import {a.name}" for a in node.names if a.name in CONCRETE]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in STORE_INTERNALS | {"conn"}
        ):
            out.append(f"{where}:{line}: {node.func.id}(…, {node.args[1].value!r})")
    return out


def _outside_store() -> Iterator[Path]:
    for f in sorted(SRC.rglob("*.py")):
        if f.relative_to(SRC).parts[0] != "store":
            yield f


def test_nothing_outside_the_store_names_its_driver_queries_or_concrete_class() -> None:
    found = [
        hit for f in _outside_store() for hit in back_doors(f.read_text(), str(f.relative_to(SRC)))
    ]
    assert found == [], "the Store protocol is the only door to the database:\n" + "\n".join(found)


def test_the_scan_reads_code_not_comments_or_docstrings() -> None:
    code = (
        '"""Uses :class:`SQLStore` and ``store.driver`` (a docstring)."""\n'
        "# store.driver.execute(cur, store.q['x'])  (a comment)\n"
        "from .store.sqlstore import SQLStore\n"
        "def f(store: SQLStore) -> None:\n"
        "    with store.driver.read() as cur:\n"
        "        store.driver.fetchone(cur, store.q['queue_get'], {})\n"
        "    getattr(store.maintenance, 'conn')\n"
    )
    assert back_doors(code) == [
        "<source>:3: import from .store.sqlstore",
        "<source>:3: import SQLStore",
        "<source>:4: SQLStore",
        "<source>:5: .driver",
        "<source>:6: .driver",
        "<source>:6: .q",
        "<source>:7: getattr(…, 'conn')",
    ]
    assert back_doors('"""store.driver, SQLStore"""\n# store.q\nx = 1\n') == []


# --------------------------------------------------------------------------- import loops


def _package(module: str) -> str:
    """``torpor.a.b`` → ``a``; ``torpor`` itself → ``torpor``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(src: Path = SRC) -> dict[str, set[str]]:
    """``{package: packages it imports from}`` over the modules under ``src`` (every import,
    also those under ``TYPE_CHECKING`` or inside a function: a loop is a loop however lazy)."""
    graph: dict[str, set[str]] = {}
    for f in sorted(src.rglob("*.py")):
        parts = list(f.relative_to(src.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        here = _package(".".join(parts))
        deps = graph.setdefault(here, set())
        for node in ast.walk(ast.parse(f.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts if is_pkg else parts[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # ``from torpor import faults`` / ``from .. import serde``: the names are modules
                whole = target == src.name
                targets = [f"{target}.{a.name}" for a in node.names] if whole else [target]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t.split(".")[0] == src.name and _package(t) not in (here, src.name):
                    deps.add(_package(t))
    return graph


def loops(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import loops of ``graph``: its strongly connected components of more than one
    package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            ring = set()
            while True:
                w = stack.pop()
                ring.add(w)
                if w == v:
                    break
            if len(ring) > 1:
                out.append(ring)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_store_is_in_no_package_import_loop() -> None:
    graph = package_graph()
    assert graph.get("store"), "the scan found the store package"
    with_store = [ring for ring in loops(graph) if "store" in ring]
    assert with_store == [], f"store/ is in an import loop: {with_store}"
    above = {p for p, deps in graph.items() if "store" in deps}
    assert {"engine", "queues", "schedules", "episodes", "retention"} <= above
    assert not above & graph["store"], "a package the store imports imports the store"


def test_the_loop_finder_finds_direct_and_longer_loops() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(map(sorted, loops(graph))) == [["a", "b"], ["c", "d", "e"]]
    assert loops({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# ------------------------------------------------------------------ the layers, module by module


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


def part_graph() -> dict[str, set[str]]:
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
    assert "memory" in part_graph()["agents"]  # the direction that is allowed, still used


def test_console_never_imports_cli() -> None:
    """console/ and cli/ are two faces over the same Client and run report (torpor.report):
    the console imports nothing of the CLI; the CLI imports the console only in the command
    that starts it (cli/console.py)."""
    assert importers("cli", into="console") == []
    assert set(importers("console", into="cli")) <= {"torpor.cli.console"}


def test_report_is_below_both_faces() -> None:
    """The run report is gathered below the CLI and the console that render it."""
    assert importers("cli", into="report") == importers("console", into="report") == []
    assert "report" in part_graph()["cli"] and "report" in part_graph()["console"]


def test_no_package_level_import_loops() -> None:
    """No two top-level parts of torpor import each other, directly or round a loop."""
    assert cycles(part_graph()) == []


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
    assert "history" in part_graph()["store"]
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
