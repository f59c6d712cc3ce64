"""The public API is what ``torpor.__all__`` names, pinned here (as httpx pins its exported
members): adding or removing a name is a decision, made by editing this list. Everything else is
reached through its module (``torpor.errors``, ``torpor.history``, ``torpor.agents``,
``torpor.testing``)."""

from __future__ import annotations

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
    "Client",
    "CodePlanner",
    "EffectCall",
    "EffectNotApplied",
    "Event",
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
