"""The layers keep to their doors: read from the source itself (its syntax tree, so neither a
comment nor a docstring can hide a use or fake one).

- The Store is the only door to the database (issue 27): nothing outside ``torpor/store/``
  names a store's driver (``.driver``), its named queries (``.q``) or the concrete
  ``SQLStore``; everything above asks :class:`torpor.store.base.Store`.
- No package-level import loop: package ``a`` importing from ``b`` while ``b`` imports from
  ``a`` (directly or round a longer ring), counted by top-level subpackage of ``torpor`` (a
  top-level module counts as a package of its own). Each family of loops has its own test
  function below; they share :func:`package_graph` and :func:`loops`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
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
