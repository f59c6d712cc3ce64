"""The suite's three tiers, and the check that keeps the fast one honest (a pytest plugin loaded
by ``conftest.py``).

- ``uv run pytest -m fast`` — the fast tier: no subprocess. PostgreSQL only where the test is
  about the stores (a test that asks for ``pg_url`` / ``store_url``: the conformance suite runs
  every store operation on both backends in every tier).
- ``uv run pytest -m "not slow"`` — the default tier: the fast tier plus process-level scenarios
  (real subprocesses, CLI runs, SIGKILL) on one backend, SQLite.
- ``uv run pytest`` — everything (CI, the README's test command): adds the ``slow`` tier, the
  long scenarios (the flagship agent, the explorer, the browser, many workers) and every
  process-level scenario's PostgreSQL variant.

Markers (``--strict-markers``): a test that starts a process is marked ``proc`` (or ``slow``);
``fast`` is never written by hand — it is given here to every test that is neither. A test in
the fast tier that starts a process anyway (seen by an audit hook on ``subprocess.Popen``,
``os.fork``, ``os.posix_spawn``, ``os.exec``) fails, naming the marker it needs. A ``proc`` test
whose ``store_url`` parameter is ``postgres`` is put in the ``slow`` tier.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

#: The markers, as registered (``pyproject.toml`` lists them too, for ``pytest --markers``).
FAST = "fast"
PROC = "proc"
SLOW = "slow"

#: Audit events that start another process.
_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec"}
)

#: The test being watched (a fast-tier test), and what it started.
_watching: dict[str, Any] = {"item": None, "spawned": []}


def _spawned(event: str, args: tuple[Any, ...]) -> None:
    if event not in _SPAWN_EVENTS or _watching["item"] is None:
        return
    what = event
    if event == "subprocess.Popen" and args:
        exe, argv = args[0], args[1]
        first = argv if isinstance(argv, str | bytes) else (list(argv)[:1] or [exe])[0]
        what = f"{event} {os.fspath(first)!r}"
        if "pgserver" in str(exe) or "pgserver" in str(first):
            return  # the private PostgreSQL server (a session fixture), not the test
    _watching["spawned"].append(what)


sys.addaudithook(_spawned)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("store_url") if callspec is not None else None
        if item.get_closest_marker(PROC) is not None and backend == "postgres":
            item.add_marker(SLOW)
        if item.get_closest_marker(PROC) is None and item.get_closest_marker(SLOW) is None:
            item.add_marker(FAST)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    fast = item.get_closest_marker(FAST) is not None
    _watching["item"], _watching["spawned"] = (item if fast else None), []
    try:
        return (yield)
    finally:
        _watching["item"] = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    if _watching["item"] is item and _watching["spawned"] and report.when == "teardown":
        started = "; ".join(dict.fromkeys(_watching["spawned"]))
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} is in the fast tier but started a process ({started}): "
            f"mark it @pytest.mark.{PROC} (tests/tiers.py)"
        )
    return report
