"""The ``torpor`` pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

- ``torpor_clock`` — a :class:`~torpor.testing.FakeClock`;
- ``torpor_runtime`` — a :class:`~torpor.Runtime` on a SQLite file in ``tmp_path`` using that
  clock (timers and deadlines pass as soon as the run waits for them);
- ``torpor_explore`` — ``torpor_explore("pkg.flows:my.workflow", input, ledger=..., ...)``
  runs the crash-point explorer, prints its summary, and returns the
  :class:`~torpor.testing.Report` (call ``report.assert_ok()``).

Options: ``--torpor-seed N`` (or ``TORPOR_EXPLORE_SEED``) replays a seeded sample;
``--torpor-sample N`` (or ``TORPOR_EXPLORE_SAMPLE``) caps the cases per exploration.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..runtime import Runtime
from .clock import FakeClock
from .explorer import explore
from .report import Report, Target


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torpor")
    group.addoption(
        "--torpor-seed", type=int, default=None, help="seed of the crash-point explorer"
    )
    group.addoption(
        "--torpor-sample",
        type=int,
        default=None,
        help="at most this many crash cases per exploration (default: the test's own)",
    )


@pytest.fixture
def torpor_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def torpor_runtime(tmp_path: Path, torpor_clock: FakeClock) -> Iterator[Runtime]:
    rt = Runtime(
        f"sqlite:///{tmp_path / 'torpor.db'}", str(tmp_path / "artifacts"), clock=torpor_clock
    )
    yield rt
    rt.close()


@pytest.fixture
def torpor_explore(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Report]:
    cfg = request.config
    seed_opt = cfg.getoption("--torpor-seed", None) or os.environ.get("TORPOR_EXPLORE_SEED")
    sample_opt = cfg.getoption("--torpor-sample", None) or os.environ.get("TORPOR_EXPLORE_SAMPLE")

    def run(
        spec: str,
        input: Any = None,
        *,
        sample: int | None = None,
        seed: int | None = None,
        **kw: Any,
    ) -> Report:
        module, _, workflow = spec.partition(":")
        target_kw = {k: kw.pop(k) for k in list(kw) if k in Target.__dataclass_fields__}
        target = Target(module=module, workflow=workflow, input=input, **target_kw)
        s = seed if seed is not None else int(seed_opt) if seed_opt else None
        s = random.SystemRandom().randrange(1 << 30) if s is None else s
        n = int(sample_opt) if sample_opt else sample
        report = explore(target, sample=n, seed=s, workdir=kw.pop("workdir", tmp_path), **kw)
        print("\n" + report.summary() + f"\n  (replay: --torpor-seed {s})")
        return report

    return run
