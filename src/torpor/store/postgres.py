"""The PostgreSQL backend (psycopg 3 + psycopg-pool): many workers on many machines.

Same domain operations as SQLite (they live in :class:`~torpor.store.sqlstore.SQLStore`); this
module is only the driver: a connection pool, ``READ COMMITTED`` transactions, ``:name``
parameters rewritten to psycopg's ``%(name)s``, migrations, and ``LISTEN/NOTIFY`` wakeups.
Fencing (see :mod:`torpor.store.base`) holds under ``READ COMMITTED``: a plain append's insert
reads the run row's lease in its own statement and the events' primary key settles two writers
of one seq; an append that updates the run row takes its row lock first; dispatch uses
``FOR UPDATE SKIP LOCKED``; every lease decision uses the database clock (``torpor_now_ms()``).
"""

from __future__ import annotations

import re
import select
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ..errors import ConfigError, StoreError, StoreMissingError
from ..urls import display_url
from .base import check_schema
from .sqlstore import SQLStore

MIGRATIONS = Path(__file__).parent / "migrations" / "postgres"
_PARAM = re.compile(r"(?<![:\w]):(\w+)")
#: Advisory lock key that serializes concurrent migrations ("torpor" in ASCII).
_MIGRATION_LOCK = 0x746F72706F72


def _migrations() -> list[tuple[int, str]]:
    return [(int(f.name.split("_", 1)[0]), f.read_text()) for f in sorted(MIGRATIONS.glob("*.sql"))]


SCHEMA_VERSION = max(v for v, _ in _migrations())


def _is_dead(conn: Any) -> bool:
    """True when an idle connection is certainly unusable (closed, broken, or the server has
    sent something — its termination notice — while nothing was asked)."""
    if conn.closed or conn.broken:
        return True
    try:
        fd = conn.fileno()
        if hasattr(select, "poll"):  # no FD_SETSIZE limit (select() fails for fd >= 1024)
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)
    except Exception:  # no usable socket
        return True
    return bool(readable)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConfigError(
            "the PostgreSQL store needs psycopg: pip install 'torpor[postgres]'"
        ) from exc
    return psycopg


def _configure(conn: Any) -> None:
    """Session settings of every store connection (pooled or an appender), one round trip
    when it opens: ``jit = off``. The store's statements are short index searches, but the
    planner's cost of the claim (``claim_next`` with a worker's ``accept``) passes
    ``jit_above_cost`` on a store of a million runs, and compiling it took 113-174 ms of a
    0.1 ms execution (``EXPLAIN (ANALYZE)`` on the scale bench's store, ``bench/pg_plans.py``;
    PostgreSQL's docs, "When to JIT?": JIT pays off for long-running CPU-bound queries)."""
    conn.execute("SET jit = off")
    if not conn.autocommit:
        conn.commit()


def _configure_appender(conn: Any) -> None:
    """:func:`_configure`, and ``plan_cache_mode = force_generic_plan``: an appender runs only
    the one-statement writes and the claim (:meth:`PostgresDriver.write_one`,
    :meth:`PostgresDriver.fetch_one`), each a search by key or of short index walks whose plan
    has the same shape whatever the arguments, and psycopg prepares each after its first uses.
    Under the default (``auto``) PostgreSQL keeps a generic plan only while its estimated cost
    is not above the custom plans': on a store of a million runs the claim's generic estimate
    came out above them (an ``accept`` unknown to it, on the ~34,000 waiting runs it guesses
    due), so every claim was planned again, ~1.5 ms of a 0.2 ms execution (issue 48,
    ``bench/scale.py --backend postgres``). The generic plan is planned once per connection."""
    conn.execute("SET jit = off")
    conn.execute("SET plan_cache_mode = force_generic_plan")


class _Appender:
    """A thread's own autocommit connection for one-statement transactions (see
    :meth:`PostgresDriver.execute_one`), with one cursor kept open. Closed — and its slot given
    back — when its thread's storage is dropped (the thread ended) or the driver closes."""

    def __init__(self, conn: Any, slots: threading.BoundedSemaphore):
        self.conn = conn
        self.cur = conn.cursor()
        self._slots: threading.BoundedSemaphore | None = slots

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()
        slots, self._slots = self._slots, None
        if slots is not None:
            slots.release()

    def __del__(self) -> None:
        self.close()


class PostgresDriver:
    """Driver over a psycopg connection pool, plus one autocommit connection per thread for
    the one-statement appends of a run's lease holder."""

    dialect = "postgres"

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8):
        psycopg = _psycopg()
        from psycopg_pool import ConnectionPool

        self.url = url
        self._errors = psycopg.errors
        self._sql_cache: dict[str, str] = {}
        self.pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=True,
            kwargs={"autocommit": False},
            configure=_configure,
            timeout=30,
        )
        self._lock = threading.Lock()
        self._repeatable_read = psycopg.IsolationLevel.REPEATABLE_READ
        self._connect = psycopg.Connection.connect
        self._local = threading.local()
        self._appenders: weakref.WeakSet[_Appender] = weakref.WeakSet()
        #: At most as many append connections as the pool holds (a worker with 200 threads
        #: must not open 200 connections); a thread without one appends through the pool.
        self._appender_slots = threading.BoundedSemaphore(max_size)
        self._connect_kw = {} if "connect_timeout" in url else {"connect_timeout": 10}
        self._closed = False
        #: Nothing to tell whoever opened the store (see :attr:`Driver.note`).
        self.note: str | None = None

    def _sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))
            self._sql_cache[sql] = out
        return out

    def _getconn(self) -> Any:
        """A pooled connection, skipping ones whose server end is gone.

        A backend that was terminated (``pg_terminate_backend``, a server restart, an idle
        timeout) leaves its idle pooled connection unusable, and the pool cannot know until the
        connection is used. An idle connection in this pool never legitimately receives data
        (it does not LISTEN), so one whose socket is readable carries the server's FATAL
        goodbye or EOF: close it and take another, without a round trip for healthy ones.
        """
        for _ in range(self.pool.max_size + 1):
            conn = self.pool.getconn()
            if not _is_dead(conn):
                return conn
            conn.close()
            self.pool.putconn(conn)
        return self.pool.getconn()

    @contextmanager
    def _tx(self, *, read_only: bool) -> Iterator[Any]:
        try:
            conn = self._getconn()
        except self._errors.OperationalError as exc:  # includes PoolTimeout / PoolClosed
            raise StoreError(f"postgres: {exc}".strip()) from exc
        try:
            # Applied by psycopg to the next BEGIN: no extra round trip.
            if conn.read_only != read_only:
                conn.read_only = read_only
            iso = self._repeatable_read if read_only else None
            if conn.isolation_level != iso:
                conn.isolation_level = iso
            with conn.transaction(), conn.cursor() as cur:
                yield cur
        except self._errors.OperationalError as exc:
            raise StoreError(f"postgres: {exc}".strip()) from exc
        finally:
            self.pool.putconn(conn)

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction, ``READ COMMITTED``: the fenced ``UPDATE`` of the run row takes
        its row lock first, which serializes writers of one run."""
        return self._tx(read_only=False)

    def read(self) -> AbstractContextManager[Any]:
        """A read-only ``REPEATABLE READ`` transaction: every query in it sees one snapshot.

        Under ``READ COMMITTED`` each statement takes a new snapshot, so reading the run row and
        then its events could straddle a concurrent append (a history longer than the row
        says). A read-only transaction at this level never fails with a serialization error.
        """
        return self._tx(read_only=True)

    def execute(self, cur: Any, sql: str, params: dict[str, Any]) -> int:
        cur.execute(self._sql(sql), params)
        return int(cur.rowcount)

    def executemany(self, cur: Any, sql: str, rows: Sequence[dict[str, Any]]) -> None:
        cur.executemany(self._sql(sql), rows)

    def fetchone(self, cur: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        cur.execute(self._sql(sql), params)
        row = cur.fetchone()
        return tuple(row) if row is not None else None

    def fetchall(self, cur: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cur.execute(self._sql(sql), params)
        return [tuple(r) for r in cur.fetchall()]

    def _appender(self) -> _Appender | None:
        """This thread's autocommit connection, (re)opened when missing or closed; None when
        every slot is taken by other threads. (No probe of its socket per call, unlike pooled
        connections: a statement on a connection whose backend is gone fails before anything
        is written, the append reads back and retries, and the next call opens a new one.)"""
        app: _Appender | None = getattr(self._local, "appender", None)
        if app is not None and not app.conn.closed and not app.conn.broken:
            return app
        if app is not None:
            app.close()
            self._local.appender = None
        if self._closed:
            raise StoreError("postgres: the store is closed")
        if not self._appender_slots.acquire(blocking=False):
            return None
        try:
            conn = self._connect(self.url, autocommit=True, **self._connect_kw)
            _configure_appender(conn)
        except self._errors.OperationalError as exc:
            self._appender_slots.release()
            raise StoreError(f"postgres: {exc}".strip()) from exc
        app = _Appender(conn, self._appender_slots)
        self._local.appender = app
        self._appenders.add(app)
        return app

    def write_one(self, sql: str, params: dict[str, Any]) -> int | None:
        """One statement in a transaction of its own, on the calling thread's autocommit
        connection: no ``BEGIN``/``COMMIT`` round trips, no pool checkout, and the statement
        is prepared on that connection after its first uses (psycopg's ``prepare_threshold``).
        It is durable (the WAL flushed, as for any commit) when this returns. Returns the row
        count, or None for a unique violation (nothing written). A connection error raises
        StoreError (the statement may or may not have committed: the caller reads back) and
        the connection is replaced on the next call. A thread beyond the first ``max_size``
        uses a pooled connection in autocommit for the statement instead."""
        app = self._appender()
        if app is None:
            return self._write_one_pooled(sql, params)
        try:
            app.cur.execute(self._sql(sql), params)
            return int(app.cur.rowcount)
        except self._errors.UniqueViolation:
            return None
        except (self._errors.OperationalError, self._errors.InterfaceError) as exc:
            app.close()
            self._local.appender = None
            raise StoreError(f"postgres: {exc}".strip()) from exc

    def fetch_one(self, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One statement in a transaction of its own (as :meth:`write_one`, on the thread's
        autocommit connection) and its first row: it commits on the server as the statement
        ends, with no round trip to this process while its locks are held."""
        app = self._appender()
        if app is None:
            with self.transaction() as cur:
                return self.fetchone(cur, sql, params)
        try:
            app.cur.execute(self._sql(sql), params)
            row = app.cur.fetchone()
            return tuple(row) if row is not None else None
        except (self._errors.OperationalError, self._errors.InterfaceError) as exc:
            app.close()
            self._local.appender = None
            raise StoreError(f"postgres: {exc}".strip()) from exc

    def _write_one_pooled(self, sql: str, params: dict[str, Any]) -> int | None:
        try:
            conn = self._getconn()
        except self._errors.OperationalError as exc:  # includes PoolTimeout / PoolClosed
            raise StoreError(f"postgres: {exc}".strip()) from exc
        try:
            if conn.read_only:
                conn.read_only = False
            conn.autocommit = True
            try:
                with conn.cursor() as cur:
                    cur.execute(self._sql(sql), params)
                    return int(cur.rowcount)
            finally:
                if not conn.closed and not conn.broken:
                    conn.autocommit = False
        except self._errors.UniqueViolation:
            return None
        except (self._errors.OperationalError, self._errors.InterfaceError) as exc:
            raise StoreError(f"postgres: {exc}".strip()) from exc
        finally:
            self.pool.putconn(conn)

    def unique_violation(self, exc: BaseException) -> str | None:
        """The violated index or constraint for a unique violation, else None."""
        if isinstance(exc, self._errors.UniqueViolation):
            return str(exc.diag.constraint_name or "unique")
        return None

    def reclaim_pages(self, *, convert: bool = False) -> str:
        """Nothing to do: autovacuum reuses the space (see :meth:`Driver.reclaim_pages`)."""
        return "nothing to do on PostgreSQL (autovacuum reuses the space)"

    def close(self) -> None:
        self._closed = True
        for app in list(self._appenders):
            app.close()
        self.pool.close()

    def listen_forever(
        self, channel: str, on_notify: Callable[[str], None], stop: threading.Event
    ) -> None:
        """Deliver NOTIFY payloads on ``channel`` to ``on_notify`` until ``stop`` is set;
        reconnects after a dropped connection (and calls ``on_notify("")`` then, since
        notifications may have been missed)."""
        psycopg = _psycopg()
        while not stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {channel}")
                    on_notify("")
                    while not stop.is_set():
                        for n in conn.notifies(timeout=0.5):
                            on_notify(n.payload)
            except psycopg.Error:
                stop.wait(0.5)


def migrate(driver: PostgresDriver, url: str) -> int:
    """Apply every known migration not yet applied, under an advisory lock; refuse a database
    whose newest migration is newer than :data:`SCHEMA_VERSION`."""
    with driver.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS torpor_schema ("
            "version integer PRIMARY KEY, applied_at_ms bigint NOT NULL)"
        )
        # Numbered by the change that made them, not merged in order: a version missing below
        # the newest applied one is applied too.
        applied = {int(r[0]) for r in conn.execute("SELECT version FROM torpor_schema")}
        check_schema(max(applied, default=0), SCHEMA_VERSION, url)
        for version, sql in _migrations():
            if version in applied:
                continue
            conn.execute(sql)
            conn.execute(
                "INSERT INTO torpor_schema (version, applied_at_ms) VALUES (%s, %s)",
                (version, int(time.time() * 1000)),
            )
    return SCHEMA_VERSION


def _check_exists(driver: PostgresDriver, url: str) -> None:
    """StoreMissingError when there is no torpor store on the connection's search path."""
    with driver.pool.connection() as conn:
        row = conn.execute("SELECT to_regclass('torpor_schema')").fetchone()
    if row is None or row[0] is None:
        raise StoreMissingError(
            f"no torpor store in {display_url(url)} (no torpor_schema table on the "
            "connection's search path); nothing was created: only `torpor start` or "
            "`torpor init` creates a store. Check --db and TORPOR_DATABASE_URL"
        )


def _check_existing(driver: PostgresDriver, url: str) -> None:
    """A read-only open: the store must exist at this schema version (nothing is written)."""
    with driver.pool.connection() as conn:
        row = conn.execute("SELECT to_regclass('torpor_schema')").fetchone()
        if row is None or row[0] is None:
            raise StoreMissingError(
                f"no torpor store in {display_url(url)} (no torpor_schema table on the "
                "connection's search path); nothing was created: only `torpor start` or "
                "`torpor init` creates a store. Check --db and TORPOR_DATABASE_URL"
            )
        applied = {int(r[0]) for r in conn.execute("SELECT version FROM torpor_schema")}
    version = max(applied, default=None)
    check_schema(version, SCHEMA_VERSION, url)
    # Migration numbers are assigned per change and merged in any order: a store is current
    # only when every known migration is recorded, not just the newest.
    missing = sorted({v for v, _ in _migrations()} - applied)
    if missing:
        raise StoreError(
            f"{display_url(url)} lacks migrations {missing} of this torpor (schema version "
            f"{version}), and a command that only reads does not migrate it: run one that "
            "writes (e.g. torpor worker) once"
        )


class PostgresStore(SQLStore):
    """SQLStore on PostgreSQL, with LISTEN/NOTIFY wakeups.

    Lease expiry, fencing and dispatch are judged by the database clock inside the SQL. Event
    timestamps and timer deadlines come from the worker's clock (``now_ms``); a timer therefore
    fires late or early by the skew between that worker and the database (NTP keeps it to ms).
    An inbox message's arrival is stamped by the poster's store clock, the clock deadlines are
    fixed by: whether it came before a wait's deadline is judged within that skew.
    """

    driver: PostgresDriver

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._wake = threading.Event()
        self._listener: threading.Thread | None = None
        self._closing = threading.Event()
        self._listener_lock = threading.Lock()

    def _ensure_listener(self) -> None:
        with self._listener_lock:
            if self._listener is None:
                self._listener = threading.Thread(
                    target=self.driver.listen_forever,
                    args=("torpor_wake", lambda _p: self._wake.set(), self._closing),
                    daemon=True,
                    name="torpor-listen",
                )
                self._listener.start()

    def wait_for_wake(self, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Block until a NOTIFY on ``torpor_wake`` (any run made runnable) or ``timeout_s``.

        A listener connection stays open for the store's life, so a notification that arrives
        while the caller is busy is not lost: the next call returns at once.
        """
        self._ensure_listener()
        end = time.monotonic() + timeout_s
        while not stop():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self._wake.wait(min(left, 0.25)):
                self._wake.clear()
                return True
        return False

    def close(self) -> None:
        self._closing.set()
        if self._listener is not None:
            self._listener.join(timeout=2)
        super().close()


def open_postgres(
    url: str,
    *,
    clock: Callable[[], float] = time.time,
    read_only: bool = False,
    create: bool = True,
) -> PostgresStore:
    """Open (migrating) a ``postgresql://`` store; with ``read_only``, open an existing one
    without creating or migrating anything (StoreMissingError when there is none on the
    connection's search path, StoreError when it needs migrating); without ``create``,
    StoreMissingError instead of creating a store where there is none."""
    from psycopg_pool import PoolTimeout

    psycopg = _psycopg()
    for attempt in range(3):
        try:
            # One direct connection first: a clear, immediate error instead of a pool timeout.
            psycopg.connect(url, connect_timeout=10).close()
            driver = PostgresDriver(url)
            break
        except psycopg.Error as exc:
            # A server that answered but terminated this backend (an administrator command,
            # a restart in progress) is asked again; any other failure is reported at once.
            if attempt < 2 and "administrator command" in str(exc):
                time.sleep(0.2)
                continue
            raise StoreError(f"postgres {display_url(url)} is unreachable: {exc}".strip()) from exc
    for attempt in range(3):
        try:
            if read_only:
                _check_existing(driver, url)
            else:
                if not create:
                    _check_exists(driver, url)
                migrate(driver, url)
            break
        except (PoolTimeout, psycopg.OperationalError) as exc:
            # The server answered just now: a connection lost while migrating (a terminated
            # backend, a restart) is retried on a fresh one before the store gives up.
            if isinstance(exc, PoolTimeout) or attempt == 2:
                driver.close()
                raise StoreError(
                    f"postgres {display_url(url)} is unreachable: {exc}".strip()
                ) from exc
            time.sleep(0.2)
        except BaseException:
            driver.close()
            raise
    store = PostgresStore(driver, url, clock=clock)
    return store
