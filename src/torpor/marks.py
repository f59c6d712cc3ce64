"""This host's high-water marks of the stores it works on (issue 33, G16).

A store can be moved back by an ordinary fault or hand: its history rolled back by a writer of
the database, an older copy of the file restored, a new store created where another stood. What
it then says has "already happened" is wrong, and an effect could run twice. So each host keeps,
**outside the database and outside ``TORPOR_HOME``** — beside the keyring, in the config folder
(:meth:`torpor.Settings.config_dir`, ``marks/``) — one mark per store:

- the store's **identity** (``store_identity``, migration 0014), pinned the first time this
  host works on the store at that location;
- the highest seq this host saw committed, per run (at most :data:`MAX_RUNS` runs, the most
  recently advanced kept), advanced when an execution ends and at its lease renewals — never
  per effect;
- whether the store was found **behind** (and why), and the decisions people recorded with
  ``torpor store accept-restore`` (who, when, what).

The file is JSON with an HMAC-SHA256 (RFC 2104) over its canonical bytes, under a key of 32
random bytes kept beside it (``marks/key``, mode 0600): a file edited or swapped by someone
without that key is refused (:class:`~torpor.errors.MarkError`), never trusted. It is replaced
atomically and fsynced (file and folder), under an OS lock (``<mark>.lock``) so two processes
of this host never lose each other's advances. A mark is per host: with PostgreSQL each worker
host keeps its own, and a host that saw a higher seq refuses, whatever other hosts saw.

A store is **behind** when its identity is not the pinned one, or a run's history ends before
this host's mark for it. Then no execution on this store runs an effect or consumes a decision
(:class:`~torpor.errors.StoreBehindMarkError`, named on the run and by ``torpor doctor``)
until a person records ``torpor store accept-restore``; the effects of each run that was behind
are then reconciled with the outside world before any new effect (see :mod:`torpor.runtime`).

What this cannot see: a run this host never executed (or evicted past :data:`MAX_RUNS`), a
rollback of the events written after the last advance of a process killed meanwhile (at most
one renewal interval), and a store moved back by a writer who also holds this host's key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import MarkError

#: Runs whose seq one mark keeps (the most recently advanced): bounds the file (~60 bytes a run).
MAX_RUNS = 5000

#: Version of the file's format.
VERSION = 1


@dataclass
class Mark:
    """One store's mark on this host (see the module docstring)."""

    location: str
    store_id: str
    host: str = field(default_factory=socket.gethostname)
    #: run id -> [highest seq seen committed, when it was advanced (epoch ms)]
    runs: dict[str, list[int]] = field(default_factory=dict)
    #: Why the store was found behind (one line), or "".
    behind: str = ""
    #: run id -> the seq this host had seen before a restore was accepted: the run's new effects
    #: are reconciled with the outside world first until its history passes it again.
    reconcile: dict[str, int] = field(default_factory=dict)
    #: The decisions recorded by ``torpor store accept-restore`` (who, when, why, what).
    accepted: list[dict[str, Any]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        return {
            "v": VERSION,
            "location": self.location,
            "store_id": self.store_id,
            "host": self.host,
            "runs": self.runs,
            "behind": self.behind,
            "reconcile": self.reconcile,
            "accepted": self.accepted,
        }

    def seq(self, run_id: str) -> int:
        got = self.runs.get(run_id)
        return int(got[0]) if got else 0

    def advance(self, run_id: str, seq: int, now_ms: int) -> bool:
        """Raise the run's mark to ``seq`` (False: it was there already)."""
        if seq <= self.seq(run_id):
            return False
        self.runs[run_id] = [int(seq), now_ms]
        if len(self.runs) > MAX_RUNS:
            keep = sorted(self.runs.items(), key=lambda kv: kv[1][1])[-MAX_RUNS:]
            self.runs = dict(keep)
        done = self.reconcile.get(run_id)
        if done is not None and seq > done:
            del self.reconcile[run_id]
        return True


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


class MarkFile:
    """The mark of the store at ``location`` in ``folder`` (``config_dir/marks``)."""

    def __init__(self, folder: Path, location: str):
        self.folder = folder
        self.location = location
        digest = hashlib.sha256(location.encode()).hexdigest()[:24]
        self.path = folder / f"{digest}.json"
        self._cache: tuple[tuple[int, int, int], Mark] | None = None

    # ------------------------------------------------------------------ key

    def _key(self) -> bytes:
        path = self.folder / "key"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self._make_folder()
            data = secrets.token_bytes(32)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return self._key()  # made by another process meanwhile
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            _fsync_dir(self.folder)
        except OSError as exc:
            raise MarkError(f"cannot read the high-water mark key {path}: {exc.strerror}") from None
        if len(data) != 32:
            raise MarkError(f"the high-water mark key {path} is not 32 bytes: it was damaged")
        return data

    def _make_folder(self) -> None:
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise MarkError(
                f"cannot create the high-water mark folder {self.folder}: {exc.strerror}"
            ) from None

    # ------------------------------------------------------------------ read, write

    def load(self) -> Mark | None:
        """The mark (None when this host never worked on this store). MarkError for a file
        that is malformed or whose HMAC does not verify (edited by someone without the key)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        if self._cache is not None and self._cache[0] == seen:
            return self._cache[1]
        try:
            raw = json.loads(self.path.read_bytes())
            mac = raw.pop("mac")
            body = {k: raw[k] for k in ("v", "location", "store_id", "host", "runs")}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise MarkError(
                f"the high-water mark {self.path} is not a torpor mark (malformed): it was "
                "damaged or edited; remove it only if you know the store is current"
            ) from None
        expect = hmac.new(self._key(), _canonical(raw), hashlib.sha256).hexdigest()
        if not isinstance(mac, str) or not hmac.compare_digest(mac, expect):
            raise MarkError(
                f"the high-water mark {self.path} does not verify with this host's key "
                f"{self.folder / 'key'}: it was edited or replaced; not trusted"
            )
        mark = Mark(
            location=str(body["location"]),
            store_id=str(body["store_id"]),
            host=str(body["host"]),
            runs={str(k): [int(x) for x in v] for k, v in dict(body["runs"]).items()},
            behind=str(raw.get("behind", "")),
            reconcile={str(k): int(v) for k, v in dict(raw.get("reconcile", {})).items()},
            accepted=list(raw.get("accepted", [])),
        )
        self._cache = (seen, mark)
        return mark

    def _save(self, mark: Mark) -> None:
        body = mark.body()
        body["mac"] = hmac.new(self._key(), _canonical(mark.body()), hashlib.sha256).hexdigest()
        data = json.dumps(body, sort_keys=True).encode()
        fd, tmp = tempfile.mkstemp(prefix=".mark-", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(self.folder)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise MarkError(
                f"cannot write the high-water mark {self.path}: {exc.strerror}"
            ) from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._make_folder()
        lock = self.path.with_suffix(".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def update(self, store_id: str, change: Callable[[Mark], bool]) -> Mark:
        """Read the mark under its lock (a new one pinning ``store_id`` if there is none),
        apply ``change`` and write it back when ``change`` says it changed something."""
        with self._locked():
            self._cache = None
            mark = self.load()
            fresh = mark is None
            if mark is None:
                mark = Mark(location=self.location, store_id=store_id)
            if change(mark) or fresh:
                self._save(mark)
            return mark


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def now_ms() -> int:
    """Wall-clock epoch ms: only when a mark was advanced or a decision recorded (for people)."""
    return int(time.time() * 1000)


__all__ = ["MAX_RUNS", "Mark", "MarkFile", "now_ms"]
