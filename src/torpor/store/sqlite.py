"""The embedded SQLite backend (stdlib ``sqlite3``, WAL).

One connection per thread. Writes run in ``BEGIN IMMEDIATE`` transactions, so two processes
sharing a file serialize their fenced appends. ``synchronous=FULL`` by default: a committed
boundary survives power loss, not only a process crash (``NORMAL`` is offered for speed).

A damaged file is refused loudly (G10): SQLite's "not a database" and "malformed" errors become
one :class:`~torpor.errors.DamagedStoreError` naming the file and ``torpor doctor``, never a
traceback or a partial answer. The file's device and inode are recorded when it is opened and
compared at every lease renewal and before every effect call
(:meth:`SQLiteStore.check_database_file`): a store whose file was deleted or replaced while in
use stops with :class:`~torpor.errors.StoreFileChangedError` before the next effect, instead of
writing on into a file nobody can open again. ``open_sqlite(url, read_only=True)`` (what
``ls``, ``show``, ``events``, ``artifacts`` and ``doctor`` use) never creates or migrates a
database: it opens the file ``mode=ro``, or ``immutable=1`` when its folder is not writable
(then it cannot see other processes' writes while it reads, and says so in
:attr:`SQLiteDriver.note`).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import parse_qs, urlparse

from ..errors import (
    ConfigError,
    DamagedStoreError,
    StoreError,
    StoreFileChangedError,
    StoreFoundDamagedError,
    StoreMissingError,
)
from . import damage
from .base import check_schema
from .sqlite_leases import OSLockedLeases

MIGRATIONS = Path(__file__).parent / "migrations" / "sqlite"
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def _migrations() -> list[tuple[int, str]]:
    out = []
    for f in sorted(MIGRATIONS.glob("*.sql")):
        out.append((int(f.name.split("_", 1)[0]), f.read_text()))
    return out


SCHEMA_VERSION = max(v for v, _ in _migrations())


class SQLiteDriver:
    """Driver for one SQLite file. Thread-safe: a connection per thread."""

    dialect = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 10_000,
        mode: str = "rwc",
    ):
        if synchronous.upper() not in SYNCHRONOUS:
            raise ConfigError(f"sqlite synchronous must be one of {SYNCHRONOUS}, not {synchronous}")
        if mode not in ("rwc", "ro", "immutable"):
            raise ConfigError(f"sqlite mode must be rwc, ro or immutable, not {mode!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        #: ``rwc`` (read, write, create), ``ro`` (read-only), ``immutable`` (read-only, and
        #: the file is assumed not to change: no locks, no WAL index; for a read-only folder).
        self.mode = mode
        #: ``(st_dev, st_ino)`` of the file when the store was opened (None: not checked).
        self.file_id: tuple[int, int] | None = None
        #: Something whoever opened the store should be told (an immutable read-only open).
        self.note: str | None = None
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        #: Judges an expired lease a claim meets (:mod:`.sqlite_leases`); None: take it.
        self.may_take: Callable[..., bool] | None = None

    def connect(self) -> sqlite3.Connection:
        """A new plain connection to the file, in this driver's mode (nothing configured)."""
        if self.mode == "rwc" or self.path == ":memory:":
            target, uri = self.path, False
        else:
            query = "mode=ro" if self.mode == "ro" else "immutable=1"
            target, uri = f"{Path(self.path).resolve().as_uri()}?{query}", True
        conn = sqlite3.connect(
            target,
            uri=uri,
            isolation_level=None,
            check_same_thread=False,
            timeout=self.busy_timeout_ms / 1000,
        )
        conn.create_function("torpor_may_take", 5, self._may_take)
        return conn

    def _may_take(self, *row: Any) -> int:
        """SQL ``torpor_may_take(run id, owner, epoch, expires at, ttl ms)``: whether a claim
        may take an expired lease (:attr:`may_take`, set by the store; yes when unset)."""
        return 1 if self.may_take is None else int(self.may_take(*row))

    def conn(self) -> sqlite3.Connection:
        c: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if c is None:
            try:
                c = self.connect()
                c.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
                if self.mode == "rwc":
                    # A new file gives the pages garbage collection frees back (PRAGMA
                    # incremental_vacuum); chosen before anything is written to it (for an
                    # existing file this only takes effect with a VACUUM: torpor gc --vacuum).
                    c.execute("PRAGMA auto_vacuum = INCREMENTAL")
                    c.execute("PRAGMA journal_mode = WAL")
                    c.execute(f"PRAGMA synchronous = {self.synchronous}")
                c.execute("PRAGMA foreign_keys = ON")
            except sqlite3.DatabaseError as exc:
                raise self.damaged(exc) from exc
            self._local.conn = c
            with self._lock:
                self._all.append(c)
        return c

    def damaged(self, exc: BaseException) -> BaseException:
        """``exc`` as the error to raise: SQLite saying the file is not a (sound) database
        becomes one DamagedStoreError naming the file and ``torpor doctor``."""
        if not is_damage(exc):
            return damage.io_error(self.path, exc)
        # SQLite quotes the undecodable bytes it met: never print them (terminal sequences).
        reason = damage.printable(exc)
        damage.mark(self.path, reason)  # writers refuse this store from now on
        return DamagedStoreError(
            f"sqlite database {self.path} is damaged ({reason}); nothing was read from it as "
            f"sound: run torpor doctor (torpor --db sqlite:///{self.path} doctor)"
        )

    def check_file(self) -> None:
        """Raise StoreFileChangedError when the file opened is gone or another file took its
        path (device and inode compared with :attr:`file_id`), StoreFoundDamagedError when
        another process found it damaged since (its marker, :mod:`.damage`)."""
        if self.file_id is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreFileChangedError(
                f"sqlite database {self.path} was deleted while in use; stopped before the "
                "next effect (writes to a deleted file are lost)"
            ) from None
        if (st.st_dev, st.st_ino) != self.file_id:
            raise StoreFileChangedError(
                f"sqlite database {self.path} was replaced by another file while in use; "
                "stopped before the next effect (this process still writes to the old one)"
            )
        why = damage.read_mark(self.path)
        if why is not None:
            raise StoreFoundDamagedError(
                f"sqlite database {self.path} was found damaged while in use ({why}); stopped "
                "before the next effect: run torpor doctor"
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        c = self.conn()
        cur = c.cursor()
        self._begin(cur)
        try:
            yield cur
        except BaseException as exc:
            self._abort(c, exc)
        self._commit(c)

    def _abort(self, c: sqlite3.Connection, exc: BaseException) -> NoReturn:
        """Roll back after ``exc``; raise it (an OperationalError as StoreError)."""
        with suppress(sqlite3.Error):
            c.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.IntegrityError
        ):
            raise self.damaged(exc) from exc
        raise exc

    def _commit(self, c: sqlite3.Connection) -> None:
        try:
            c.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            with suppress(sqlite3.Error):
                c.execute("ROLLBACK")
            raise self.damaged(exc) from exc

    def _begin(self, cur: sqlite3.Cursor) -> None:
        for attempt in range(50):
            try:
                cur.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:  # busy beyond busy_timeout
                if "locked" not in str(exc):
                    raise damage.io_error(self.path, exc) from exc
                if attempt == 49:
                    raise StoreError(f"sqlite {self.path}: cannot begin a write: {exc}") from exc
                time.sleep(0.01)

    def fetch_one(self, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        """One statement as a transaction of its own and its first row (see
        :meth:`~torpor.store.base.Driver.fetch_one`), under ``BEGIN IMMEDIATE``."""
        with self.transaction() as cur:
            return self.fetchone(cur, sql, params)

    def write_one(self, sql: str, params: dict[str, Any]) -> int | None:
        """One statement as a transaction of its own (see
        :meth:`~torpor.store.base.Driver.write_one`): in autocommit mode, so SQLite takes the
        write lock as the statement starts (waiting up to ``busy_timeout``) and commits when it
        ends — one call instead of ``BEGIN IMMEDIATE``/statement/``COMMIT``: this runs once per
        plain step. On the thread's kept cursor."""
        cur = self._cursor()
        try:
            return int(cur.execute(sql, params).rowcount)
        except sqlite3.IntegrityError as exc:
            if self.unique_violation(exc) is None:
                raise
            return None
        except sqlite3.DatabaseError as exc:
            raise self.damaged(exc) from exc

    def _cursor(self) -> sqlite3.Cursor:
        cur: sqlite3.Cursor | None = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self.conn().cursor()
        return cur

    @contextmanager
    def read(self) -> Iterator[sqlite3.Cursor]:
        c = self.conn()
        cur = c.cursor()
        try:
            if c.in_transaction:
                yield cur
                return
            cur.execute("BEGIN")
            try:
                yield cur
            finally:
                c.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise self.damaged(exc) from exc

    def execute(self, cur: Any, sql: str, params: dict[str, Any]) -> int:
        cur.execute(sql, params)
        return int(cur.rowcount)

    def executemany(self, cur: Any, sql: str, rows: Sequence[dict[str, Any]]) -> None:
        cur.executemany(sql, rows)

    def fetchone(self, cur: Any, sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
        cur.execute(sql, params)
        row = cur.fetchone()
        return tuple(row) if row is not None else None

    def fetchall(self, cur: Any, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        cur.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()]

    def unique_violation(self, exc: BaseException) -> str | None:
        """``"events.run_id, events.seq"`` (say) for a unique violation, else None."""
        if isinstance(exc, sqlite3.IntegrityError) and "UNIQUE constraint failed" in str(exc):
            return str(exc).split(":", 1)[1].strip()
        return None

    def reclaim_pages(self, *, convert: bool = False) -> str:
        """The driver hook of :meth:`~torpor.store.maintenance.MaintenanceStore.reclaim_pages`:
        ``PRAGMA incremental_vacuum``, or one full ``VACUUM`` to switch an older file to
        incremental auto-vacuum (``convert``). Returns what was done."""
        conn = self.conn()
        mode = int(conn.execute("PRAGMA auto_vacuum").fetchone()[0])
        if mode != 2:
            if not convert:
                return (
                    "this SQLite file does not reclaim pages incrementally; "
                    "run `torpor gc --vacuum` once to switch it (a full VACUUM)"
                )
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("VACUUM")
            return "converted the file to incremental auto-vacuum (VACUUM)"
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        # (executescript: the statement must run to completion; a cursor frees one page a step)
        conn.executescript("PRAGMA incremental_vacuum;")
        return f"reclaimed {free} free pages"

    def close(self) -> None:
        with self._lock:
            for c in self._all:
                with suppress(sqlite3.Error):
                    c.close()
            self._all.clear()
        self._local = threading.local()


class SQLiteStore(OSLockedLeases):
    """SQLStore on SQLite. Wakeups poll ``PRAGMA data_version``, which changes whenever another
    connection commits: a cheap shared-memory read, so an idle worker notices a signal within
    milliseconds without querying the tables."""

    driver: SQLiteDriver

    def check_database_file(self) -> None:
        """See :meth:`~torpor.store.base.Store.check_database_file` (device and inode)."""
        self.driver.check_file()

    def check_sound(self) -> None:
        """See :meth:`~torpor.store.base.Store.check_sound` (:func:`.damage.quick_check`)."""
        damage.quick_check(self.driver.path)

    @contextmanager
    def _lease_transaction(self) -> Iterator[Any]:
        """A transaction that only moves a lease commits without its own fsync
        (``synchronous=NORMAL`` for it alone): the same reasoning as PostgreSQL's
        ``synchronous_commit`` off in :meth:`SQLStore._lease_transaction`. In WAL mode the
        commit is still atomic; only a power loss could undo it, and the holder's first append
        (a FULL commit, which syncs the WAL up to and including the claim) makes it durable
        before anything is done on its strength. Saves a disk flush on every claim, takeover,
        renewal and release — one of them is on the path from resume to the first new step."""
        conn = self.driver.conn()
        relax = self.driver.synchronous in ("FULL", "EXTRA") and not conn.in_transaction
        if relax:
            conn.execute("PRAGMA synchronous = NORMAL")
        try:
            with self.driver.transaction() as cur:
                yield cur
        finally:
            if relax:
                conn.execute(f"PRAGMA synchronous = {self.driver.synchronous}")

    def wait_for_wake(self, timeout_s: float, stop: Callable[[], bool] = lambda: False) -> bool:
        conn = self.driver.conn()
        first = conn.execute("PRAGMA data_version").fetchone()[0]
        end = time.monotonic() + timeout_s
        while not stop():
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.002))
            if conn.execute("PRAGMA data_version").fetchone()[0] != first:
                return True
        return False


def migrate(driver: SQLiteDriver, url: str) -> int:
    """Apply every known migration not yet applied (also one numbered below the newest
    applied: numbers are assigned per change, merged in any order); refuse a newer database
    untouched.

    The file is first inspected through a plain connection that changes nothing (the driver's
    connections switch the file to WAL, which rewrites its header): a database from a newer
    schema, or an SQLite database that is not a torpor store, is refused before any write.
    """
    found, applied = _inspect(driver, url)
    check_schema(found, SCHEMA_VERSION, url)
    driver.conn()  # now configure the file (WAL) for use
    if _current(applied):
        return SCHEMA_VERSION
    with driver.transaction() as cur:
        # Re-check under the write lock: another process may have migrated meanwhile.
        cur.execute(
            "CREATE TABLE IF NOT EXISTS torpor_schema ("
            "version INTEGER PRIMARY KEY, applied_at_ms INTEGER NOT NULL)"
        )
        applied = _applied(cur)
        check_schema(max(applied, default=0), SCHEMA_VERSION, url)
        for version, sql in _migrations():
            if version in applied:
                continue
            for stmt in _split(sql):
                cur.execute(stmt)
            cur.execute(
                "INSERT INTO torpor_schema (version, applied_at_ms) VALUES (?, ?)",
                (version, int(time.time() * 1000)),
            )
    return SCHEMA_VERSION


def _applied(conn: Any) -> set[int]:
    """The migration versions recorded in ``torpor_schema``."""
    return {int(r[0]) for r in conn.execute("SELECT version FROM torpor_schema").fetchall()}


def _current(applied: set[int]) -> bool:
    """Whether every known migration is recorded. Migrations are numbered by the change that
    made them, not merged in order: a database may be at the newest version yet miss an
    older-numbered one (which migrating then applies)."""
    return applied >= {v for v, _ in _migrations()}


def _inspect(driver: SQLiteDriver, url: str) -> tuple[int | None, set[int]]:
    """The schema version of the file (None when it is empty) and the migrations it
    recorded, read without writing.

    Raises StoreError for an SQLite database that has tables but is not a torpor store, and
    lets sqlite3.DatabaseError through for a file that is not SQLite at all.
    """
    c = driver.connect()
    try:
        c.execute(f"PRAGMA busy_timeout = {driver.busy_timeout_ms}")
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return None, set()
        if "torpor_schema" not in tables:
            raise StoreError(
                f"{url}: this SQLite database is not a torpor store (it has tables "
                f"{sorted(tables)[:5]} and no torpor_schema); refusing to modify it"
            )
        versions = _applied(c)
        return (max(versions, default=None), versions)
    finally:
        c.close()


def _split(script: str) -> list[str]:
    """Split a migration script into statements (no semicolons inside our DDL literals)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def open_sqlite(
    url: str,
    *,
    clock: Callable[[], float] = time.time,
    read_only: bool = False,
    create: bool = True,
    check: bool = False,
) -> SQLiteStore:
    """Open (creating and migrating) a ``sqlite:///path`` store; with ``read_only``, open an
    existing one without creating, migrating or writing anything (see the module docstring).

    Query options: ``?synchronous=NORMAL`` (default FULL). ``sqlite:///relative/path`` is
    relative to the working directory; ``sqlite:////abs/path`` is absolute. Raises ConfigError
    for a bad URL, DamagedStoreError for a file that is not a sound SQLite database,
    StoreMissingError (read-only, or without ``create``) when there is no store at the path,
    SchemaVersionError for a newer schema. A store once found damaged (:mod:`.damage`) is
    refused for writing (DamagedStoreError) until ``torpor doctor --clear-damaged``; with
    ``check`` (a command that deletes or rewrites), SQLite's quick check runs before the file
    is opened for writing (:func:`.damage.quick_check`).
    """
    parsed = urlparse(url)
    path = path_of(url)
    opts = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(opts) - {"synchronous"}
    if unknown:
        raise ConfigError(f"unknown sqlite URL option(s) {sorted(unknown)} in {url}")
    synchronous = opts.get("synchronous", "FULL")
    if read_only and path != ":memory:":
        return _open_read_only(url, path, synchronous, clock)
    if path != ":memory:":
        why = damage.read_mark(path)
        if why is not None:
            raise damage.refusal(path, why)
        if not create and not Path(path).is_file():
            raise damage.missing(path)
        if check and Path(path).is_file():
            damage.quick_check(path)  # before this process writes a byte to the file
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    driver = SQLiteDriver(path, synchronous=synchronous)
    try:
        migrate(driver, url)
        _remember_file(driver)
    except sqlite3.DatabaseError as exc:
        driver.close()
        raise driver.damaged(exc) from exc
    except BaseException:
        driver.close()
        raise
    return SQLiteStore(driver, url, clock=clock)


def path_of(url: str) -> str:
    """The file a ``sqlite:///path`` URL names (ConfigError for another URL)."""
    if urlparse(url).scheme != "sqlite":
        raise ConfigError(f"not a sqlite URL: {url}")
    path = url.split("://", 1)[1].split("?", 1)[0]
    if path.startswith("/"):
        path = path[1:]  # sqlite:///rel -> "rel", sqlite:////abs -> "/abs"
    if not path:
        raise ConfigError(f"sqlite URL needs a file path: {url}")
    return path


def _remember_file(driver: SQLiteDriver) -> None:
    if driver.path != ":memory:":
        st = os.stat(driver.path)
        driver.file_id = (st.st_dev, st.st_ino)


def _open_read_only(
    url: str, path: str, synchronous: str, clock: Callable[[], float]
) -> SQLiteStore:
    file = Path(path)
    if not file.is_file():
        raise damage.missing(path)
    folder_writable = os.access(file.parent, os.W_OK | os.X_OK)
    driver = SQLiteDriver(
        path, synchronous=synchronous, mode="ro" if folder_writable else "immutable"
    )
    if not folder_writable:
        driver.note = (
            f"{file.parent} is not writable: {path} was opened immutable, so writes other "
            "processes make while this command reads are not seen"
        )

    try:
        found, applied = _inspect(driver, url)
        _remember_file(driver)
    except sqlite3.DatabaseError as exc:
        driver.close()
        raise driver.damaged(exc) from exc
    except BaseException:
        driver.close()
        raise
    if found is None:
        raise StoreMissingError(f"{path} ({url}) is an empty database, not a torpor store")
    check_schema(found, SCHEMA_VERSION, url)
    if not _current(applied):
        if folder_writable and os.access(path, os.W_OK):
            return open_sqlite(url, clock=clock)  # an older store: migrated as any open does
        missing = sorted({v for v, _ in _migrations()} - applied)
        raise StoreError(
            f"{url} lacks migrations {missing} of this torpor (schema version {found}), and "
            "cannot be migrated read-only: run a command that writes with write access once"
        )
    return SQLiteStore(driver, url, clock=clock)


def is_damage(exc: BaseException) -> bool:
    """Whether SQLite says the file is not a database or is malformed (SQLITE_NOTADB,
    SQLITE_CORRUPT), as opposed to a constraint, a lock, or a misuse."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    if type(exc) is sqlite3.DatabaseError:
        return True
    text = str(exc).lower()
    return any(m in text for m in ("malformed", "not a database", "could not decode"))
