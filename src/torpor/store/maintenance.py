"""What the store does for retention and garbage collection (driven by :mod:`torpor.retention`):
retention policies, finished runs past them, deleting a run, collecting unreferenced chunks,
the artifacts still referred to, archiving a run's history and restoring it, storage figures,
and reclaiming SQLite pages.

Only a finished run is ever deleted, and never one a person can still reopen (``unresolved``,
``blocked``): the run row is deleted under its lock only while it says so, in the same
transaction as its events, inbox and blob references. A chunk is collected only when no row of
``blob_refs`` names it *and* it was not written or confirmed for the grace period (see
:mod:`.chunkio`). A value about to be offloaded to the artifact store is referenced first
(:meth:`MaintenanceStore.pin_blob`), so no pass collects it under the step that stores it.

Episodes (and anything else that keeps chunks or artifacts alive outside a run) record their
references in ``blob_refs`` under an owner id that is not a run id (``episode:<id>``): run
retention never deletes those rows, and such an owner's own policy deletes them (a collector
registered with :func:`torpor.retention.register_collector`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import serde
from ..errors import CorruptRecordError, StoreError

if TYPE_CHECKING:
    from ..history import Event

from . import codec
from .base import Driver
from .chunkio import ChunkIO
from .domain import RetentionPolicy, RunSize
from .ledger import delete_ledger
from .streams import delete_streams

#: The first line of a run's archive (JSON Lines): its format.
ARCHIVE_FORMAT = "torpor-run-archive/1"


class MaintenanceStore:
    """Retention and collection: a mixin of :class:`~torpor.store.sqlstore.SQLStore` (the
    :class:`~torpor.store.domain.MaintenanceOps` part of its protocol)."""

    driver: Driver
    q: dict[str, str]
    now_ms: Callable[[], int]
    chunkio: ChunkIO

    # ------------------------------------------------------------- policies

    def retention_policies(self) -> list[RetentionPolicy]:
        """Every workflow's retention policy (a workflow without one keeps its runs forever)."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["retention_policies"], {})
        return [
            RetentionPolicy(w, None if d is None else float(d), None if n is None else int(n), u)
            for w, d, n, u in rows
        ]

    def set_retention_policy(self, policy: RetentionPolicy) -> None:
        """Record ``policy`` for its workflow (replacing any); a policy that keeps runs forever
        and archives nothing removes the row."""
        with self.driver.transaction() as cur:
            if policy.forever and policy.archive_url is None:
                self.driver.execute(cur, self.q["delete_retention"], {"workflow": policy.workflow})
                return
            params = {
                "workflow": policy.workflow,
                "keep_days": policy.keep_days,
                "keep_last": policy.keep_last,
                "archive_url": policy.archive_url,
                "now_ms": self.now_ms(),
            }
            self.driver.execute(cur, self.q["set_retention"], params)

    def expired_runs(self, policy: RetentionPolicy, limit: int = 1000) -> list[str]:
        """Finished runs of ``policy.workflow`` past it, oldest first."""
        if policy.forever:
            return []
        before = None
        if policy.keep_days is not None:
            before = self.now_ms() - int(policy.keep_days * 86_400_000)
        params = {
            "workflow": policy.workflow,
            "before_ms": before,
            "keep_last": policy.keep_last,
            "limit": limit,
        }
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["expired_runs"], params)
        return [str(r[0]) for r in rows]

    # ------------------------------------------------------------- deletion

    def delete_run(self, run_id: str) -> bool:
        """Delete a finished, not reopenable run: its row, events, inbox, blob references and
        stream items,
        in one transaction. False (nothing deleted) when it is not such a run (any more)."""
        with self.driver.transaction() as cur:
            if self.driver.fetchone(cur, self.q["delete_run"], {"run_id": run_id}) is None:
                return False
            for name in ("delete_run_events", "delete_run_inbox", "delete_run_refs"):
                self.driver.execute(cur, self.q[name], {"run_id": run_id})
            delete_ledger(self.driver, cur, run_id)
            delete_streams(self.driver, cur, run_id)
        self.chunkio.forget(run_id)
        return True

    def collectable_chunks(self, grace_ms: int) -> tuple[int, int]:
        """``(count, bytes)`` of the chunks :meth:`collect_chunks` would delete now."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(
                cur, self.q["collectable_chunks"], {"grace_ms": grace_ms, "now_ms": self.now_ms()}
            )
        assert row is not None
        return int(row[0]), int(row[1])

    def collect_chunks(self, grace_ms: int) -> tuple[int, int]:
        """Delete the chunks no row of ``blob_refs`` names and unused for ``grace_ms``;
        ``(count, bytes)`` of those found just before (an estimate when writers are busy)."""
        found = self.collectable_chunks(grace_ms)
        with self.driver.transaction() as cur:
            self.driver.execute(
                cur, self.q["collect_chunks"], {"grace_ms": grace_ms, "now_ms": self.now_ms()}
            )
        return found

    def pin_blob(self, run_id: str, sha256: str, size: int) -> None:
        """Record that ``run_id`` refers to the artifact ``sha256`` (``size`` bytes) *before*
        it is written to the artifact store: the in-flight pin that keeps a collection pass,
        whatever its grace, from deleting a value a running step has just stored and not yet
        recorded (issue 35). It is the run's ordinary reference (a ``blob_refs`` row), kept
        while the run is, so a step that dies before recording leaves a reference that goes
        with the run."""
        self.chunkio.put(run_id, {}, {sha256: size})

    def referenced_artifacts(self) -> set[str]:
        """The sha256 of every artifact a run refers to, or a pending inbox message carries
        (a large signal payload offloaded by its sender, not yet in any history)."""
        with self.driver.read() as cur:
            refs = {
                str(r[0]) for r in self.driver.fetchall(cur, self.q["referenced_artifacts"], {})
            }
            bodies = [str(r[0]) for r in self.driver.fetchall(cur, self.q["pending_bodies"], {})]
        return refs | set(codec.artifact_refs(bodies))

    def run_references(self, limit: int = 1_000_000) -> list[tuple[str, str, str, int, bool]]:
        """``(run id, kind, sha256, size, present)`` of every reference of every run in the
        store (kind ``chunk`` or ``artifact``; ``present``: a chunk is in the database, always
        True for an artifact, which lives outside it), by run."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(cur, self.q["run_references"], {"limit": limit})
        return [(str(r), str(k), str(h), int(n or 0), bool(p)) for r, k, h, n, p in rows]

    def chunk_problem(self, sha256: str) -> str | None:
        """What is wrong with the stored chunk ``sha256`` (missing, or its text does not hash
        to its name), or None."""
        with self.driver.read() as cur:
            try:
                self.chunkio.fetcher(cur, "?")(sha256)
            except CorruptRecordError as exc:
                return "missing" if "missing" in str(exc) else "does not match its hash"
        return None

    def reclaim_pages(self, *, convert: bool = False) -> str:
        """Give freed pages back to the file system (SQLite ``PRAGMA incremental_vacuum``).
        A file made before torpor chose incremental auto-vacuum needs one full ``VACUUM`` to
        switch (``convert``; it rewrites the whole file and needs it to itself for a while).
        PostgreSQL: nothing (autovacuum reuses the space). Returns what was done."""
        return self.driver.reclaim_pages(convert=convert)

    # ------------------------------------------------------------- storage figures

    def run_blob_bytes(self, run_id: str) -> tuple[int, int]:
        """``(chunk bytes, artifact bytes)`` a run refers to."""
        with self.driver.read() as cur:
            row = self.driver.fetchone(cur, self.q["run_blob_bytes"], {"run_id": run_id})
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def largest_runs(self, limit: int = 20, workflow: str | None = None) -> list[RunSize]:
        """Runs by what they occupy, largest first."""
        with self.driver.read() as cur:
            rows = self.driver.fetchall(
                cur, self.q["largest_runs"], {"limit": limit, "workflow": workflow}
            )
        return [
            RunSize(str(r[0]), str(r[1]), str(r[2]), r[3], *(int(v) for v in r[4:8])) for r in rows
        ]

    # ------------------------------------------------------------- archive

    def archive_lines(self, record: dict[str, Any], events: Iterable[Event]) -> Iterator[str]:
        """A run's archive as JSON Lines: a header with the run row's ``record``, then one
        line per event (its payload whole: chunks joined, so the archive stands alone)."""
        yield serde.dumps({"format": ARCHIVE_FORMAT, "run": record})
        for e in events:
            row = codec.encode(e)
            yield serde.dumps(
                {
                    "seq": e.seq,
                    "type": e.type,
                    "epoch": e.epoch,
                    "at_ms": e.at_ms,
                    "v": row["v"],
                    "payload": serde.loads(row["payload"]),
                }
            )

    def restore_run(self, lines: Iterable[str], where: str) -> str:
        """Bring an archived run back (its history, its run row rebuilt by folding it, its
        chunks and references); returns its id. StoreError when the run exists already,
        CorruptRecordError naming ``where`` and the line for an archive that cannot be read."""
        from ..history import RunState, apply

        it = iter(lines)
        try:
            head = serde.loads(next(it))
            if head.get("format") != ARCHIVE_FORMAT:
                raise ValueError(f"not a torpor run archive (format {head.get('format')!r})")
            rec = head["run"]
            run_id = str(rec["run_id"])
            events: list[Event] = []
            for n, line in enumerate(it, start=2):
                if not line.strip():
                    continue
                d = serde.loads(line)
                row = (
                    d["seq"],
                    d["type"],
                    d["epoch"],
                    d["at_ms"],
                    d["v"],
                    serde.dumps(d["payload"]),
                )
                try:
                    events.append(codec.decode(run_id, row))
                except CorruptRecordError as exc:
                    raise ValueError(f"line {n}: {exc}") from None
        except RecursionError:
            raise CorruptRecordError(
                f"{where}: cannot restore: a line is nested too deeply to be a torpor archive"
            ) from None
        except (ValueError, KeyError, TypeError, AttributeError, StopIteration) as exc:
            raise CorruptRecordError(f"{where}: cannot restore: {exc}") from None
        state = RunState(run_id=run_id)
        for e in events:
            apply(state, e)
        sink: dict[str, str] = {}
        rows = [codec.encode(e, sink) for e in events]
        arts = codec.artifact_refs([r["payload"] for r in rows] + list(sink.values()), events)
        checkpoint = codec.checkpoint_text(state, sink)
        with self.driver.transaction() as cur:
            self.chunkio.write(cur, run_id, sink, arts)
            params = {
                "run_id": run_id,
                "workflow": rec["workflow"],
                "version": state.version or rec["version"],
                "status": state.status.value,
                "outcome": state.outcome.value if state.outcome else None,
                "created_at_ms": rec["created_at_ms"],
                "updated_at_ms": rec["updated_at_ms"],
                "wake_at_ms": rec.get("wake_at_ms"),
                "last_seq": state.seq,
                "checkpoint_seq": state.seq,
                "checkpoint": checkpoint,
                "attention": state.attention or None,
                # Epochs only grow: a lease taken later must fence off every recorded one.
                "lease_epoch": max([int(rec.get("lease_epoch") or 0)] + [e.epoch for e in events]),
                "infra_retries": int(rec.get("infra_retries") or 0),
            }
            if not self.driver.execute(cur, self.q["restore_run"], params):
                raise StoreError(f"{where}: run {run_id!r} exists already; not restored")
            for r in rows:
                self.driver.execute(cur, self.q["insert_event"], r)
        return run_id


__all__ = ["ARCHIVE_FORMAT", "MaintenanceStore", "RetentionPolicy", "RunSize"]
