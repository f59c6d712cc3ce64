"""Per-step time of searches whose scope holds < 1,000 episodes as a SQLite store grows (issue
31): ``uv run python bench/episodes_small_filters.py 10000,100000,300000``. The skewed workload
bulk-loaded as ``bench/episodes.py`` does; the index's steps timed by wrapping them. Note: the
scopes under 1,000 episodes grow with the store (printed), so the sizes compared differ."""

from __future__ import annotations

import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile
from episodes import filter_sizes, load_sqlite
from episodes_workload import SkewedWorkload

from torpor.episodes import EpisodeStore
from torpor.store import episode_index as ei
from torpor.store import open_store

STEPS: dict[str, list[float]] = defaultdict(list)


def _wrap(name: str) -> None:
    orig = getattr(ei.SQLEpisodeIndex, name)

    def timed(self: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        r = orig(self, *a, **k)
        STEPS[name].append((time.perf_counter() - t0) * 1000)
        return r

    setattr(ei.SQLEpisodeIndex, name, timed)


def main(sizes_arg: str) -> None:
    for n in ("counted", "count", "scored", "recent", "rows"):
        _wrap(n)
    wl = SkewedWorkload()
    st = open_store(f"sqlite:///{tempfile.mkdtemp(dir='/var/tmp')}/p.db")
    es = EpisodeStore(st, embedder=None)
    done = 0
    for size in [int(x) for x in sizes_arg.split(",")]:
        t0 = time.time()
        load_sqlite(st, wl, done, size)
        done = size
        sizes = filter_sizes(st)
        qs = [q for q in wl.queries(600) if sizes.get((q[1], q[2]), 0) < 1000][:150]
        for q in qs[:20]:
            es.search(q[0], scope=q[1], task_type=q[2], limit=10)
        STEPS.clear()
        tot, scope_n = [], []
        for text, scope, tt in qs:
            t1 = time.perf_counter()
            es.search(text, scope=scope, task_type=tt, limit=10)
            tot.append((time.perf_counter() - t1) * 1000)
            scope_n.append(sizes.get((scope, None), 0))
        print(
            f"size {size} (load {time.time() - t0:.0f}s): {len(qs)} queries, scope sizes median "
            f"{sorted(scope_n)[len(scope_n) // 2]} max {max(scope_n)}; total p50 "
            f"{percentile(tot, 50):.2f} p95 {percentile(tot, 95):.2f} ms"
        )
        for k, v in STEPS.items():
            p50, p95 = percentile(v, 50), percentile(v, 95)
            print(f"   {k}: {len(v)} calls, p50 {p50:.2f} p95 {p95:.2f} ms")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "10000,100000,300000")
