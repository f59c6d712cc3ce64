"""The audit behind the rule that no test asserts a wall-clock budget (issue 26): a test's times
are causes and effects, a calibration taken in the same test, or a fake clock; a timeout that
guards against a hang is generous (at least :data:`HANG_GUARD_S`) and says so.

:func:`findings` reads a test module's syntax tree and reports, with file and line:

- an ``assert`` that bounds a wall-clock reading from above by less than :data:`HANG_GUARD_S`
  (``time.monotonic() - t0 < 1``; ``fired_ms - t < 1500`` where ``fired_ms`` came from a clock
  or a timestamp the test took; a polling loop's ``time.monotonic() < deadline`` where
  ``deadline = time.monotonic() + 5``). A lower bound (``elapsed >= 1``) cannot fail because
  the machine is slow and is allowed;
- a process or I/O wait — ``timeout=`` on ``wait``, ``communicate``, ``run``, ``run_python``,
  ``collect``, ``drive``, ``wait_for_file``, ``urlopen``, ``join``, ``check_output`` — below
  :data:`HANG_GUARD_S`.

A line may opt out with the comment ``# timing-audit: <why>`` — a product timeout under test
that fires whatever the load (its work outlasts it by construction), or a bound that is a
calibration. ``tests/test_timing_audit.py`` runs it over every test module (and proves it
flags each pattern). What it cannot see (a product timeout that must *not* fire, a sleep used
as a handshake) was audited by hand; the list is in ``tests/README.md`` ("The suite's clock").
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

#: The shortest a hang guard may be, in seconds (a loaded 2-core machine has been seen to take
#: 7 s to start an interpreter).
HANG_GUARD_S = 10.0

#: The comment that marks a line as audited by hand.
OPT_OUT = "# timing-audit:"

#: Calls whose ``timeout=`` only guards against a hang.
WAITS = frozenset(
    {
        "wait",
        "communicate",
        "run",
        "run_python",
        "collect",
        "drive",
        "wait_for_file",
        "urlopen",
        "join",
        "check_output",
        "HTTPConnection",
    }
)

#: Names that say a value is a moment or a duration (for ``a - b < n``).
_TEMPORAL = re.compile(r"_ms\b|_s\b|elapsed|\bt0\b|_at\b|started|took|\bt\b")

_CLOCKS = frozenset({"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns"})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _is_clock(node: ast.AST) -> bool:
    """``time.monotonic()`` / ``_time.time()`` / ``perf_counter()``, anywhere inside ``node``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in _CLOCKS and (
                not isinstance(f, ast.Attribute) or getattr(f.value, "id", "").endswith("time")
            ):
                return True
    return False


def _number(node: ast.AST) -> float | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class _Scan(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str]) -> None:
        self.path, self.lines = path, lines
        self.out: list[Finding] = []
        self.clocked: set[str] = set()  # names holding a clock reading (or a recorded time)
        self.spans: dict[str, float] = {}  # deadline names: clock + a literal span

    def _flag(self, node: ast.AST, what: str) -> None:
        line = node.lineno  # type: ignore[attr-defined]
        end = getattr(node, "end_lineno", line) or line
        if any(OPT_OUT in self.lines[i - 1] for i in range(line, end + 1)):
            return
        self.out.append(Finding(self.path, line, what))

    def _clocky(self, node: ast.AST) -> bool:
        """A clock reading, a name holding one, or a difference of times (``a_ms - b_ms``)."""
        if _is_clock(node) or any(
            isinstance(n, ast.Name) and n.id in self.clocked for n in ast.walk(node)
        ):
            return True
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Sub)
            and bool(_TEMPORAL.search(ast.unparse(node)))
        )

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        saved = (set(self.clocked), dict(self.spans))
        self.generic_visit(node)
        self.clocked, self.spans = saved

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Assign(self, node: ast.Assign) -> None:
        if self._clocky(node.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.clocked.add(target.id)
                    v = node.value
                    if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Add):
                        span = _number(v.right)
                        if span is not None and _is_clock(v.left):
                            self.spans[target.id] = span
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._bounds(node, node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._bounds(node, node.test)  # a polling loop's limit
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        self._bounds(node, node.test)
        self.generic_visit(node)

    def _bounds(self, node: ast.AST, test: ast.AST) -> None:
        for cmp in (n for n in ast.walk(test) if isinstance(n, ast.Compare)):
            sides = [cmp.left, *cmp.comparators]
            for left, op, right in zip(sides, cmp.ops, sides[1:], strict=False):
                if isinstance(op, ast.Gt | ast.GtE):
                    left, right = right, left  # a > b is b < a
                elif not isinstance(op, ast.Lt | ast.LtE):
                    continue
                if not self._clocky(left):
                    continue  # only an upper bound on a clock reading is a budget
                bound = _number(right)
                if bound is None and isinstance(right, ast.Name):
                    bound = self.spans.get(right.id)
                    if bound is None:
                        continue  # a bound by a recorded moment: order, not a budget
                if bound is not None and bound < HANG_GUARD_S * _unit(left):
                    self._flag(node, f"a wall-clock budget of {bound:g}: {_src(cmp)}")

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in WAITS:
            for kw in node.keywords:
                value = _number(kw.value) if kw.arg == "timeout" else None
                if value is not None and value < HANG_GUARD_S:
                    self._flag(node, f"{name}(timeout={value:g}): a hang guard under 10 s")
        self.generic_visit(node)


def _unit(node: ast.AST) -> float:
    """1000 when the reading is in milliseconds (``* 1000`` or a ``..._ms`` name), else 1."""
    for n in ast.walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and _number(n.right) == 1000:
            return 1000.0
        if isinstance(n, ast.Name) and n.id.endswith("_ms"):
            return 1000.0
    return 1.0


def _src(node: ast.AST) -> str:
    return ast.unparse(node)


def findings(source: str, path: str = "<test>") -> list[Finding]:
    """Every wall-clock budget and short hang guard in ``source`` (a test module's text)."""
    scan = _Scan(path, source.splitlines())
    scan.visit(ast.parse(source))
    return scan.out


def audit(folder: Path) -> list[Finding]:
    """:func:`findings` for every ``*.py`` under ``folder``."""
    out: list[Finding] = []
    for file in sorted(folder.rglob("*.py")):
        out.extend(findings(file.read_text(), str(file.relative_to(folder.parent))))
    return out
