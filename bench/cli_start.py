"""Read commands import only what they print (issue 48 item 2): ``torpor ls`` and ``torpor
show RUN`` on a store of ``--runs`` runs (default 10,000, bulk-loaded as in :mod:`scale`) against
``torpor --version``, each a fresh process, with a bytecode cache (``PYTHONPYCACHEPREFIX``,
filled by one untimed pass) and with none (``PYTHONDONTWRITEBYTECODE=1``, no cache: every
module compiled in every process, as in this environment). Goal: each within 3x
``--version``, measured by the CPU time of the child (user + sys), the median of ``--reps``
interleaved repetitions; wall time is reported beside it.

    uv run python bench/cli_start.py [--runs 10000] [--reps 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import save, table  # noqa: E402

GOAL = 3.0


def _child(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``python -m torpor.cli ARGV`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "torpor.cli", *argv], env=env, capture_output=True, check=False
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise RuntimeError(f"torpor {' '.join(argv)}: {p.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def run(runs: int, reps: int) -> dict[str, Any]:
    from scale import build

    tmp = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    cache = tmp / "pycache"
    try:
        s = build(f"sqlite:///{tmp / 'torpor.db'}", runs, 0, 1)
        base = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPYCACHE")}
        base.update(
            PYTHONPATH=str(HERE.parent / "src"), TORPOR_HOME=str(tmp), COLUMNS="120"
        )  # fmt: skip
        envs = {
            "no cache": {**base, "PYTHONDONTWRITEBYTECODE": "1"},
            "cache": {
                **{k: v for k, v in base.items() if k != "PYTHONDONTWRITEBYTECODE"},
                "PYTHONPYCACHEPREFIX": str(cache),
            },
        }
        cmds = {
            "--version": ["--version"],
            "ls": ["--db", s["url"], "ls"],
            "show": ["--db", s["url"], "show", s["shown"]],
        }
        for argv in cmds.values():  # fill the cache (untimed)
            _child(argv, envs["cache"])
        cpu: dict[str, dict[str, list[float]]] = {e: {c: [] for c in cmds} for e in envs}
        wall: dict[str, dict[str, list[float]]] = {e: {c: [] for c in cmds} for e in envs}
        for _ in range(reps):
            for e, env in envs.items():
                for c, argv in cmds.items():
                    u, w = _child(argv, env)
                    cpu[e][c].append(u)
                    wall[e][c].append(w)
        res: dict[str, Any] = {"runs": runs, "reps": reps, "figures": {}}
        for e in envs:
            v = statistics.median(cpu[e]["--version"])
            for c in ("ls", "show"):
                m = statistics.median(cpu[e][c])
                res["figures"][f"{c} ({e})"] = {
                    "cpu_s": m,
                    "version_cpu_s": v,
                    "ratio": m / v,
                    "wall_s": statistics.median(wall[e][c]),
                    "version_wall_s": statistics.median(wall[e]["--version"]),
                    "holds": m / v <= GOAL,
                }
        res["samples"] = {"cpu": cpu, "wall": wall}
        return res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def lines(res: dict[str, Any]) -> list[str]:
    rows = [
        [k, f"{f['cpu_s'] * 1e3:.0f}", f"{f['version_cpu_s'] * 1e3:.0f}", f"{f['ratio']:.1f}x",
         f"{f['wall_s'] * 1e3:.0f} / {f['version_wall_s'] * 1e3:.0f}",
         "yes" if f["holds"] else "NO"]
        for k, f in res["figures"].items()
    ]  # fmt: skip
    return [
        f"`torpor ls` / `torpor show` on a {res['runs']:,}-run SQLite store against "
        f"`torpor --version` (CPU of the child, median of {res['reps']}; goal <= {GOAL}x).",
        "",
        table(
            ["command", "CPU ms", "--version CPU ms", "ratio", "wall ms (cmd / version)", "holds"],
            rows,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    res = run(args.runs, args.reps)
    print("\n".join(lines(res)))
    print(save("cli_start", res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
