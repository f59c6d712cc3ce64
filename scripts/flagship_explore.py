"""The crash-point explorer on the flagship agent (examples/repo_agent).

    uv run python scripts/flagship_explore.py                 # every boundary (exhaustive)
    uv run python scripts/flagship_explore.py --sample 30 --seed 7

Each case is a fresh world: a copy of the standard library's ``json`` package, a bare git
remote, an SMTP maildir and a SQLite store. The *ledger* is the world itself: commits on the
remote carrying the push key's trailer, delivered messages carrying the email key's Message-ID
(:mod:`examples.repo_agent.world`). Exit status 1 when a violation is found.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from torpor.testing import Report, Target, explore  # noqa: E402

WORKFLOW = "repo_agent.modernize"


def flagship_input(packages: tuple[str, ...] = ("json",)) -> dict[str, object]:
    """The run input of ``python -m examples.repo_agent --auto-approve`` in ``{world}``."""
    from examples.repo_agent import codemod

    return {
        "source": {"kind": "stdlib", "packages": list(packages)},
        "workdir": "{world}/work",
        "remote": "{world}/work/remote.git",
        "create_remote": True,
        "branch": "torpor/explore",
        "email": {"to": "maintainers@example.org", "from": "torpor-repo-agent@localhost"},
        "select": "UP",
        "target": codemod.target_version(),
        "unsafe_fixes": False,
        "planner": "code",
        "tests": [],
        "test_packages": list(packages),
    }


def ledger(world: Path, run_id: str) -> Mapping[str, int]:
    """What the outside world received, per idempotency key (independent of torpor)."""
    from examples.repo_agent import world as w

    rep = w.world_report(run_id, Path(world) / "work")
    return {
        rep["push_key"]: len(rep["commits_with_key"]),
        rep["email_key"]: len(rep["emails_with_message_id"]),
    }


def target() -> Target:
    return Target(
        module="examples.repo_agent.workflow",
        workflow=WORKFLOW,
        input=flagship_input(),
        paths=[str(ROOT)],
        ledger=ledger,
        # The commit's date is the wall clock of its first attempt; the remote is per world.
        ignore_result_keys=("commit", "remote"),
        timeout_s=240,
    )


def run(
    *,
    sample: int | None = None,
    seed: int | None = None,
    jobs: int | None = None,
    kinds: tuple[str, ...] = ("crash", "ack", "break"),
    recovery_crashes: int = 1,
    workdir: Path | None = None,
    quiet: bool = False,
) -> Report:
    return explore(
        target(),
        sample=sample,
        seed=seed,
        jobs=jobs,
        kinds=kinds,
        recovery_crashes=recovery_crashes,
        workdir=workdir,
        progress=None if quiet else (lambda line: print(line, flush=True)),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sample", type=int, help="at most N cases (default: every boundary)")
    p.add_argument("--seed", type=int, help="seed of the sample and of the recovery crashes")
    p.add_argument("--jobs", "-j", type=int, help="cases at once (default: CPUs, at most 4)")
    p.add_argument("--kinds", default="crash,ack,break", help="fault kinds (default: %(default)s)")
    p.add_argument("--workdir", type=Path, help="keep the worlds here")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    report = run(
        sample=args.sample,
        seed=args.seed,
        jobs=args.jobs,
        kinds=tuple(k for k in args.kinds.split(",") if k),
        workdir=args.workdir,
    )
    print(report.summary())
    print(f"wall time {time.monotonic() - t0:.0f} s")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
