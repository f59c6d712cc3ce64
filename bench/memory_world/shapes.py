"""Tool outputs of realistic shape, full of identifiers that are not facts: timestamps,
paths, hashes, ids, durations, counts. A fact's lines (``insert``) go in the middle or the
tail. ``noisy`` outputs carry cue words in lines that state nothing (a retry warning, an
``xfailed`` count), the noise a cue-word extractor would keep; an output that plants a cue-free
fact is never noisy.

``dev`` shapes: pytest runs, build-and-upload logs, JSON API responses, ``ls -l`` listings,
service logs. ``heldout`` shapes: Go/Java stack dumps, CSV exports, ``git log``, ``kubectl``
tables, ``journalctl`` and ``psql`` output.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DIRS = ("src", "lib", "pkg", "internal", "app", "cmd", "tests", "scripts", "deploy", "conf")
MODS = (
    "models",
    "handlers",
    "storage",
    "routing",
    "codec",
    "auth",
    "metrics",
    "client",
    "pool",
    "schema",
    "tasks",
    "views",
    "util",
    "paging",
    "streams",
)
VERBS = ("GET", "POST", "PUT", "DELETE", "PATCH")
HOSTS = ("ip-10-0-3-17", "ip-10-0-9-204", "runner-7f2k", "build-04", "node-c3", "edge-2b")
_EVENTS = ("Started session", "Reloading", "Accepted publickey for deploy", "cgroup")
PEOPLE = ("mkovacs", "aokafor", "lchen", "rdiaz", "tnakamura", "sbergstrom", "jpatel", "eliu")


@dataclass
class Distract:
    """Distractor values from a seeded RNG, never one of the world's reserved numbers."""

    rng: random.Random
    reserved: set[int]
    seen: set[int] = field(default_factory=set)
    #: How many times longer than usual the next output is (set per output).
    scale: int = 1

    def n(self, lo: int, hi: int) -> int:
        while True:
            v = self.rng.randint(lo, hi)
            if v not in self.reserved:
                if v >= 100:
                    self.seen.add(v)
                return v

    def lines(self, lo: int, hi: int) -> int:
        """A line count: ``scale`` times one in [lo, hi]."""
        return self.rng.randint(lo, hi) * self.scale

    def ts(self) -> str:
        r = self.rng
        return (
            f"2026-11-{r.randint(1, 30):02d}T{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:"
            f"{r.randint(0, 59):02d}.{r.randint(0, 999):03d}Z"
        )

    def hexs(self, k: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(k))

    def uuid(self) -> str:
        h = self.hexs(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def ver(self) -> str:
        return f"{self.n(0, 9)}.{self.n(0, 40)}.{self.n(0, 30)}"

    def dur(self) -> str:
        return f"{self.n(0, 59)}.{self.n(10, 99)}s"

    def mod_path(self) -> str:
        r = self.rng
        return f"{r.choice(DIRS)}/{r.choice(MODS)}/{r.choice(MODS)}_{self.n(1, 60)}.py"

    def abs_path(self) -> str:
        r = self.rng
        root = r.choice(("/home/ci/work", "/var/lib/runner", "/opt/app", "/tmp/build"))
        ext = r.choice(("o", "so", "json", "log", "txt"))
        return f"{root}/{r.choice(DIRS)}/{r.choice(MODS)}/{self.hexs(6)}.{ext}"

    def pick(self, seq: tuple[str, ...]) -> str:
        return self.rng.choice(seq)


def _place(lines: list[str], insert: list[str], rng: random.Random, tail: bool) -> list[str]:
    if not insert:
        return lines
    at = len(lines) - rng.randint(0, min(3, len(lines))) if tail else len(lines) // 2
    at = max(1, min(at, len(lines)))
    return lines[:at] + insert + lines[at:]


# ------------------------------------------------------------------ dev shapes


def pytest_run(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    n_files = d.lines(8, 22)
    lines = [
        "============================= test session starts ==============================",
        f"platform linux -- Python 3.11.{d.n(2, 9)}, pytest-8.{d.n(0, 3)}.{d.n(0, 4)}, "
        "pluggy-1.5.0",
        f"rootdir: /home/ci/work/{d.hexs(8)}",
        "configfile: pyproject.toml, testpaths: tests",
        f"plugins: xdist-3.{d.n(1, 6)}.0, cov-5.0.0, timeout-2.3.1",
        "created: 2/2 workers",
        f"collected {d.n(120, 900)} items",
        "",
    ]
    for _ in range(n_files):
        dots = "." * d.n(5, 60)
        lines.append(f"tests/test_{d.pick(MODS)}_{d.n(1, 99)}.py {dots:<60} [{d.n(1, 99):3d}%]")
    lines.append("")
    lines.append("============================= slowest 5 durations ==============================")
    for _ in range(5):
        lines.append(
            f"{d.dur()} call     tests/test_{d.pick(MODS)}.py::test_{d.pick(MODS)}_{d.n(1, 40)}"
        )
    if noisy:
        lines.append(
            f"WARNING  conftest.py:{d.n(10, 300)} error budget at {d.n(1, 9)}% (no action)"
        )
    summary = f"{d.n(100, 900)} passed, {d.n(0, 9)} skipped"
    if noisy:
        summary += f", {d.n(1, 3)} xfailed"
    lines.append(f"================= {summary} in {d.dur()} =================")
    return "\n".join(_place(lines, insert, d.rng, tail))


def build_log(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = [f"$ uv build --wheel && ./scripts/upload.sh  # {d.ts()}"]
    for _ in range(d.lines(10, 24)):
        lines.append(
            f"[{d.ts()}] {d.pick(('compile', 'copy', 'link', 'strip', 'hash'))} "
            f"{d.mod_path()} -> build/lib.linux-x86_64-cpython-311/{d.hexs(8)}.so "
            f"({d.n(2, 900)} kB)"
        )
    if noisy:
        lines.append(f"[{d.ts()}] retry 1/5 after transient error (HTTP 503, request {d.uuid()})")
    lines.append(f"[{d.ts()}] sha256 {d.hexs(64)}  dist/{d.hexs(10)}.tar.gz")
    lines.append(f"[{d.ts()}] done in {d.dur()} (cache hits {d.n(10, 99)}/{d.n(100, 200)})")
    return "\n".join(_place(lines, insert, d.rng, tail))


def service_log(d: Distract, insert: list[str], noisy: bool, tail: bool, svc: str = "api") -> str:
    lines = []
    for _ in range(d.lines(14, 30)):
        lines.append(
            f"{d.ts()} INFO  {svc}[{d.n(1000, 65000)}] {d.pick(VERBS)} /v1/{d.pick(MODS)}/"
            f"{d.n(1, 99999)} {d.pick(('200', '200', '204', '201', '304'))} {d.n(1, 900)}ms "
            f"req={d.uuid()[:13]} host={d.pick(HOSTS)}"
        )
    if noisy:
        lines.append(
            f"{d.ts()} WARN  {svc}[{d.n(1000, 65000)}] slow query result set {d.n(1, 9)}k rows"
        )
    return "\n".join(_place(lines, insert, d.rng, tail))


def listing(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = [f"total {d.n(100, 9000)}"]
    for _ in range(d.lines(12, 26)):
        lines.append(
            f"-rw-r--r-- 1 {d.pick(PEOPLE)} staff {d.n(100, 9_000_000):>9} Nov {d.n(1, 30):2d} "
            f"{d.n(0, 23):02d}:{d.n(0, 59):02d} {d.pick(MODS)}-{d.hexs(7)}."
            f"{d.pick(('json', 'parquet', 'log', 'csv'))}"
        )
    if noisy:
        lines.append(f"-rw-r--r-- 1 ci staff {d.n(10, 900):>9} Nov  2 10:00 result-{d.hexs(4)}.txt")
    return "\n".join(_place(lines, insert, d.rng, tail))


def api_response(
    d: Distract, insert: dict[str, Any] | None, noisy: bool, tail: bool
) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for _ in range(d.lines(5, 12)):
        items.append(
            {
                "id": f"{d.pick(('evt', 'job', 'run', 'obj'))}_{d.hexs(12)}",
                "created_at": d.ts(),
                "updated_at": d.ts(),
                "owner": d.pick(PEOPLE),
                "size_bytes": d.n(100, 9_000_000),
                "etag": d.hexs(32),
                "path": d.mod_path(),
                "status": d.pick(("ok", "queued", "running", "done")),
            }
        )
    if insert is not None:
        items.insert(len(items) - 1 if tail else len(items) // 2, insert)
    body: dict[str, Any] = {
        "request_id": d.uuid(),
        "served_by": d.pick(HOSTS),
        "took_ms": d.n(3, 900),
        "page": {"cursor": d.hexs(24), "limit": 50, "count": len(items)},
        "items": items,
    }
    if noisy:
        body["errors"] = []
    return body


# ------------------------------------------------------------------ heldout shapes


def stack_dump(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = [f"goroutine {d.n(1, 900)} [running]:"]
    for _ in range(d.lines(8, 16)):
        meth = d.pick(("Serve", "Flush", "Read", "Apply", "Wait"))
        fn = f"{d.pick(MODS)}.(*{d.pick(MODS).title()}).{meth}"
        lines.append(f"{fn}(0xc{d.hexs(9)}, 0x{d.hexs(4)})")
        lines.append(
            f"\t/go/src/app/{d.pick(DIRS)}/{d.pick(MODS)}.go:{d.n(10, 900)} +0x{d.hexs(3)}"
        )
    if noisy:
        lines.append("exit status 2 (error code propagated)")
    return "\n".join(_place(lines, insert, d.rng, tail))


def csv_export(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = ["ts,tenant,job_id,rows,bytes,duration_ms,node"]
    for _ in range(d.lines(15, 30)):
        lines.append(
            f"{d.ts()},t{d.n(100, 999)},{d.hexs(10)},{d.n(1, 90000)},{d.n(1000, 9_000_000)},"
            f"{d.n(1, 9000)},{d.pick(HOSTS)}"
        )
    if noisy:
        lines.append(f"# export result: {d.n(15, 30)} rows")
    return "\n".join(_place(lines, insert, d.rng, tail))


def git_log(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = []
    for _ in range(d.lines(6, 12)):
        who = d.pick(PEOPLE)
        lines += [
            f"commit {d.hexs(40)}",
            f"Author: {who} <{who}@example.org>",
            f"Date:   Thu Nov {d.n(1, 30)} {d.n(0, 23):02d}:{d.n(0, 59):02d}:"
            f"{d.n(0, 59):02d} 2026 +0000",
            "",
            f"    {d.pick(('Bump', 'Tidy', 'Rename', 'Move', 'Split', 'Inline'))} "
            f"{d.pick(MODS)} {d.pick(('helpers', 'fixtures', 'constants', 'types'))} "
            f"(#{d.n(100, 9000)})",
            "",
        ]
    if noisy:
        lines += [f"commit {d.hexs(40)}", "", "    Handle the error path in paging (#88)", ""]
    return "\n".join(_place(lines, insert, d.rng, tail))


def kubectl_table(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = ["NAME                                READY   STATUS    RESTARTS   AGE    NODE"]
    for _ in range(d.lines(10, 22)):
        lines.append(
            f"{d.pick(MODS)}-{d.hexs(10)}-{d.hexs(5):<12} 1/1     Running   "
            f"{d.n(0, 4):<10} {d.n(1, 59)}h    {d.pick(HOSTS)}"
        )
    if noisy:
        lines.append(
            f"{d.pick(MODS)}-{d.hexs(10)}-{d.hexs(5):<12} 0/1     Error     1          2m     "
            "node-c3"
        )
    return "\n".join(_place(lines, insert, d.rng, tail))


def journal(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = [f"-- Logs begin at Mon 2026-11-{d.n(1, 9):02d} 00:00:{d.n(10, 59)} UTC. --"]
    for _ in range(d.lines(14, 28)):
        lines.append(
            f"Nov {d.n(10, 30)} {d.n(0, 23):02d}:{d.n(0, 59):02d}:{d.n(0, 59):02d} "
            f"{d.pick(HOSTS)} "
            f"{d.pick(('systemd', 'sshd', 'kernel', 'containerd', 'cron'))}[{d.n(100, 65000)}]: "
            f"{d.pick(_EVENTS)} "
            f"{d.hexs(12)}"
        )
    if noisy:
        lines.append("Nov 30 04:00:01 build-04 kernel: EDAC MC0: 1 CE memory read error on CPU#0")
    return "\n".join(_place(lines, insert, d.rng, tail))


def psql_table(d: Distract, insert: list[str], noisy: bool, tail: bool) -> str:
    lines = ["   relname    | n_live_tup | n_dead_tup |      last_autovacuum", "-" * 62]
    for _ in range(d.lines(8, 18)):
        lines.append(
            f" {d.pick(MODS):<12} | {d.n(1, 9_000_000):>10} | {d.n(0, 90000):>10} | {d.ts()}"
        )
    lines.append(f"({d.n(8, 18)} rows)")
    if noisy:
        lines.append("NOTICE:  result truncated to 18 rows")
    return "\n".join(_place(lines, insert, d.rng, tail))


TextShape = Callable[[Distract, list[str], bool, bool], str]
DEV_SHAPES: dict[str, TextShape] = {
    "pytest": pytest_run,
    "build": build_log,
    "service-log": service_log,
    "listing": listing,
}
HELDOUT_SHAPES: dict[str, TextShape] = {
    "stack": stack_dump,
    "csv": csv_export,
    "git-log": git_log,
    "kubectl": kubectl_table,
    "journal": journal,
    "psql": psql_table,
}
