"""The public API is what ``torpor.__all__`` names, pinned here (as httpx pins its exported
members): adding or removing a name is a decision, made by editing this list. Everything else is
reached through its module (``torpor.errors``, ``torpor.history``, ``torpor.agents``,
``torpor.testing``)."""

from __future__ import annotations

import pytest

import torpor

PUBLIC = [
    "Absent",
    "Agent",
    "Applied",
    "Approval",
    "ArtifactHash",
    "ArtifactRef",
    "ArtifactStore",
    "Budget",
    "Child",
    "ChildResult",
    "Client",
    "CodePlanner",
    "ConfigError",
    "EffectCall",
    "EffectNotApplied",
    "Event",
    "LeaseHeldError",
    "ModelJudge",
    "NonDeterminismError",
    "Outcome",
    "PayloadError",
    "PlanView",
    "Policy",
    "Proposal",
    "ReActPlanner",
    "Retry",
    "Run",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "Secret",
    "Settings",
    "StepError",
    "Timeout",
    "Tools",
    "TorporError",
    "TransientError",
    "Unknown",
    "WaitTimeout",
    "effect",
    "open_store",
    "register_type",
    "step",
    "workflow",
]


#: Every name ``torpor`` exported at the top level in any earlier version: the union of the names
#: that ``git log -p -- src/torpor/__init__.py`` shows in ``__all__`` / the lazy table, from the
#: first commit (d47342e) on. A user's ``except torpor.LeaseHeldError:`` must not become an
#: AttributeError: a name leaves this list only with a CHANGELOG line saying it is gone.
EVER_EXPORTED = [
    "Absent",
    "Agent",
    "AgentContext",
    "Applied",
    "Approval",
    "ApprovalDeniedError",
    "ApprovalError",
    "ApprovalInvalidError",
    "ArtifactHash",
    "ArtifactRef",
    "ArtifactStore",
    "Budget",
    "Child",
    "ChildResult",
    "Cancelled",
    "Client",
    "CodePlanner",
    "ConfigError",
    "CorruptRecordError",
    "EffectCall",
    "EffectNotApplied",
    "Event",
    "LeaseHeldError",
    "LeaseLostError",
    "ModelJudge",
    "NonDeterminismError",
    "Outcome",
    "PayloadError",
    "PlanView",
    "Planner",
    "PlannerError",
    "Policy",
    "Proposal",
    "ProposedStep",
    "ReActPlanner",
    "Retry",
    "Run",
    "RunInterrupt",
    "RunNotFoundError",
    "RunResult",
    "RunState",
    "RunStatus",
    "Runtime",
    "SchemaVersionError",
    "Secret",
    "Settings",
    "StepError",
    "StoreError",
    "Suspended",
    "Timeout",
    "Tool",
    "Tools",
    "TorporError",
    "TransientError",
    "TransitionError",
    "Unknown",
    "VersionMismatchError",
    "WaitTimeout",
    "effect",
    "open_store",
    "register_type",
    "step",
    "workflow",
]


def test_all_is_pinned_and_sorted() -> None:
    assert torpor.__all__ == PUBLIC
    assert sorted(PUBLIC, key=lambda n: (n[0].islower(), n)) == PUBLIC


def test_every_public_name_exists_and_has_a_docstring() -> None:
    for name in torpor.__all__:
        obj = getattr(torpor, name)
        assert (obj.__doc__ or "").strip(), f"torpor.{name} has no docstring"


def test_every_exception_derives_from_the_one_root() -> None:
    """Every exception torpor defines is in torpor.errors, under TorporError — except the run
    interrupts, which must not be caught by ``except Exception`` (they derive BaseException)."""
    import inspect

    import torpor.errors as errors

    for name, cls in inspect.getmembers(errors, inspect.isclass):
        if cls.__module__ != errors.__name__:
            continue
        if issubclass(cls, errors.RunInterrupt):
            assert not issubclass(cls, Exception), name
        else:
            assert issubclass(cls, errors.TorporError), name


@pytest.mark.proc  # a fresh interpreter: no earlier import may hide a missing name
def test_every_name_an_earlier_version_exported_still_imports() -> None:
    """``torpor.X`` and ``from torpor import X`` work for every name any earlier version
    exported, in a fresh interpreter (nothing imported beforehand masks a missing name)."""
    import subprocess
    import sys

    assert set(PUBLIC) <= set(EVER_EXPORTED)
    code = (
        "import torpor\n"
        f"names = {EVER_EXPORTED!r}\n"
        "missing = [n for n in names if not hasattr(torpor, n)]\n"
        "assert not missing, missing\n"
        "from torpor import LeaseHeldError, ConfigError, TransitionError\n"
        "assert issubclass(LeaseHeldError, torpor.TorporError)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in EVER_EXPORTED:
        assert name in dir(torpor), name


def test_typing_imports_mirror_the_lazy_tables() -> None:
    """The ``if TYPE_CHECKING:`` imports of ``torpor/__init__.py`` name exactly the lazy
    tables' names, from the same modules, each exported explicitly (``X as X``)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(torpor))
    [block] = [
        n
        for n in tree.body
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    ]
    typed: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom), ast.dump(node)
        for alias in node.names:
            assert alias.asname == alias.name, f"{alias.name} is not exported explicitly"
            typed[alias.name] = "." * node.level + (node.module or "")
    tables = {**torpor._LAZY, **torpor._KEPT}
    assert typed == tables
    assert not set(torpor._LAZY) & set(torpor._KEPT)


def test_internal_modules_are_marked_once_and_exist() -> None:
    """``torpor._INTERNAL`` names real modules, and no public name's docs page points a user
    at one (``docs/api.md`` documents objects by the module that defines them, so a public
    name defined in an internal module is fine; a whole internal module is not)."""
    import importlib.util
    import pathlib

    for mod in torpor._INTERNAL:
        assert importlib.util.find_spec(mod) is not None, mod
    api = pathlib.Path(__file__).parent.parent / "docs" / "api.md"
    for line in api.read_text().splitlines():
        if line.startswith("::: "):
            target = line[4:].strip()
            assert target not in torpor._INTERNAL, f"docs/api.md documents internal {target}"
