"""Workflow registration: a name, a code version, compatibility, and completion criteria."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import ConfigError, UnknownWorkflowError, VersionMismatchError

F = TypeVar("F", bound=Callable[..., Any])

#: Longest run id accepted (it is part of every default idempotency key).
MAX_RUN_ID_CHARS = 200


def check_run_id(run_id: object) -> None:
    """Refuse a run id that cannot serve as one (ConfigError naming what is wrong): empty or
    blank, not a string, over :data:`MAX_RUN_ID_CHARS`, control characters, or ``/`` — the
    default idempotency key is ``<run_id>/<step_id>``, so a ``/`` in a run id could give two
    runs' effects the same key (run ``a`` step ``b/c`` and run ``a/b`` step ``c``), and the
    outside world would take one for the other — or the prefix ``episode:`` (owner ids of
    episodes' artifact references, :mod:`torpor.episodes.gc`)."""
    if not isinstance(run_id, str):
        raise ConfigError(f"run_id must be a string, not {type(run_id).__name__}")
    if not run_id.strip():
        raise ConfigError(f"run_id {run_id!r} is empty; omit it to have one generated")
    if len(run_id) > MAX_RUN_ID_CHARS:
        raise ConfigError(f"run_id is {len(run_id)} characters, over {MAX_RUN_ID_CHARS}")
    bad = next((c for c in run_id if c == "/" or not c.isprintable()), None)
    if bad is not None:
        raise ConfigError(
            f"run_id {run_id!r} contains {bad!r}; run ids may not contain '/' (it separates "
            "run and step in default idempotency keys) or control characters"
        )
    if run_id.startswith("episode:"):
        raise ConfigError(
            f"run_id {run_id!r} starts with 'episode:', which names episodes' references to "
            "stored artifacts (garbage collection would take one for the other)"
        )


@dataclass(frozen=True)
class WorkflowDef:
    """A registered workflow.

    ``version`` is recorded when a run starts; resuming under another version is refused unless
    the recorded one is listed in ``compatible`` (DESIGN.md; issue 2, code version).
    ``criteria`` name the verifications (``run.verify(name, ...)``) that must all pass for the
    run to end ``succeeded`` (G5).
    """

    name: str
    fn: Callable[..., Any]
    version: str = "1"
    compatible: frozenset[str] = field(default_factory=frozenset)
    criteria: tuple[str, ...] = ()
    goal: str = ""
    #: Reconciles known by operation name, asked at takeover before the code runs again
    #: (an agent registers its tools'); see :func:`torpor.engine.effects.reconcile_at_takeover`.
    reconcilers: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: Attempts of one step that killed their process after which a run is parked
    #: ``blocked`` (``torpor retry`` reopens it); 0: no limit.
    crash_limit: int = 5
    #: The task type its runs' episodes are filed under (:mod:`torpor.episodes`); None: its
    #: runs get no episodes. Agents declare one (their name by default).
    task_type: str | None = None
    #: Whether its runs take an operator's steering messages (``torpor steer``): an agent's
    #: loop does, before each model call; a plain workflow function has no such boundary, so
    #: a steering message to its run is refused on the record when it arrives (G11).
    steerable: bool = False

    def accepts(self, recorded_version: str) -> bool:
        return recorded_version == self.version or recorded_version in self.compatible

    def check_version(self, run_id: str, recorded_version: str) -> None:
        """Raise VersionMismatchError unless this code may continue a run recorded under
        ``recorded_version``."""
        if not self.accepts(recorded_version):
            raise VersionMismatchError(
                f"run {run_id!r} was recorded under version {recorded_version!r} of workflow "
                f"{self.name!r}, but the code is version {self.version!r} and does not declare "
                f"compatibility with it; resume with the old code, or add "
                f"compatible=[{recorded_version!r}] if the recorded steps still match. "
                "Nothing was changed."
            )


_REGISTRY: dict[str, WorkflowDef] = {}


def workflow(
    name: str | None = None,
    *,
    version: str = "1",
    compatible: Iterable[str] = (),
    criteria: Iterable[str] = (),
    goal: str = "",
    reconcilers: Mapping[str, Callable[[Any], Any]] | None = None,
    crash_limit: int = 5,
    task_type: str | None = None,
    steerable: bool = False,
) -> Callable[[F], F]:
    """Register ``fn(run, input)`` (sync or async) as a workflow.

    Example::

        @torpor.workflow(version="2", compatible=["1"], criteria=["tests pass"])
        def release(run: torpor.Run, input: dict) -> str: ...
    """

    def deco(fn: F) -> F:
        wname = name or f"{fn.__module__}.{fn.__qualname__}"
        _REGISTRY[wname] = WorkflowDef(
            name=wname,
            fn=fn,
            version=version,
            compatible=frozenset(compatible),
            criteria=tuple(criteria),
            goal=goal or (fn.__doc__ or "").strip().split("\n")[0],
            reconcilers=dict(reconcilers or {}),
            crash_limit=crash_limit,
            task_type=task_type,
            steerable=steerable,
        )
        fn.__torpor_workflow__ = wname  # type: ignore[attr-defined]
        return fn

    return deco


def get_workflow(name_or_fn: str | Callable[..., Any], module: str = "") -> WorkflowDef:
    """Look up a registered workflow by name or by its function.

    ``module``: the defining module recorded with the run; imported when the name is not
    registered yet (so ``torpor resume RUN`` works without ``--import``). Raises
    UnknownWorkflowError when the workflow still cannot be found.
    """
    name = (
        name_or_fn
        if isinstance(name_or_fn, str)
        else getattr(name_or_fn, "__torpor_workflow__", None)
    )
    if name is not None and name not in _REGISTRY and module and module != "__main__":
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise UnknownWorkflowError(
                f"workflow {name!r} is defined in module {module!r}, which cannot be imported "
                f"here ({exc}); run from the project directory or pass --import"
            ) from exc
    if name is None or name not in _REGISTRY:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise UnknownWorkflowError(
            f"no workflow registered as {name_or_fn!r} (registered: {known}); "
            "import the module that defines it (--import MODULE)"
        )
    return _REGISTRY[name]


def accepted_versions() -> dict[str, list[str]]:
    """``{workflow name: [recorded versions this code can continue]}`` for every registered
    workflow: what a worker in this process can execute (its claim filter)."""
    return {name: [wf.version, *sorted(wf.compatible)] for name, wf in _REGISTRY.items()}


def import_modules(modules: Iterable[str]) -> None:
    """Import modules so their ``@workflow`` decorators register."""
    for m in modules:
        importlib.import_module(m)
