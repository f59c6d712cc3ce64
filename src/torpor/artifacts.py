"""Content-addressed artifact storage: blobs named by their sha256, on any fsspec filesystem.

A blob is written once under ``<root>/sha256/<aa>/<hex>`` (write to a temporary name, then
rename), so a crash can leave at most an orphan temporary file, never a torn blob. Reads verify
the hash: a blob that does not match its name is refused. A hash that is not 64 lowercase hex
digits (a hand-edited record, ``../../etc/passwd``) is refused before any path is built or any
file opened.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from functools import cached_property
from typing import Any

from .errors import CorruptRecordError, TorporError
from .serde import sha256_hex

_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactStore:
    """Blobs by sha256 under an fsspec URL (a local folder path works as is). The filesystem
    is opened on first use, and folders are created by the first :meth:`put`: fsspec is not
    imported by a process that never touches an artifact, and nothing is created by one that
    only reads them."""

    def __init__(self, url: str):
        self.url = url

    @cached_property
    def _fs_root(self) -> tuple[Any, str]:
        import fsspec

        fs, root = fsspec.core.url_to_fs(self.url)
        return fs, root

    @property
    def fs(self) -> Any:
        """The fsspec filesystem holding the blobs."""
        return self._fs_root[0]

    @property
    def root(self) -> str:
        """The blobs' root folder on :attr:`fs`."""
        return self._fs_root[1]

    def _path(self, sha256: str) -> str:
        if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
            raise CorruptRecordError(
                f"artifact hash {str(sha256)[:80]!r} is not a sha256 (64 lowercase hex digits); "
                "nothing was opened"
            )
        return f"{self.root}/sha256/{sha256[:2]}/{sha256}"

    def put(self, data: bytes) -> str:
        """Store ``data``; return its sha256 hex. Idempotent."""
        digest = sha256_hex(data)
        path = self._path(digest)
        if self.fs.exists(path):
            # Stored already: refresh its time, so that garbage collection (which spares what
            # is younger than its grace period) cannot take it before the run that stores it
            # again records its reference.
            with contextlib.suppress(NotImplementedError, ValueError, OSError):
                self.fs.touch(path, truncate=False)
            return digest
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
        self.fs.mv(tmp, path)
        return digest

    def get(self, sha256: str) -> bytes:
        """The blob's bytes. Raises TorporError if missing, CorruptRecordError if altered."""
        path = self._path(sha256)
        if not self.fs.exists(path):
            raise TorporError(f"artifact sha256:{sha256} is missing from {self.url}")
        with self.fs.open(path, "rb") as f:
            data: bytes = f.read()
        if sha256_hex(data) != sha256:
            raise CorruptRecordError(
                f"artifact sha256:{sha256} in {self.url} does not match its hash"
            )
        return data

    def exists(self, sha256: str) -> bool:
        path = self._path(sha256)
        return bool(self.fs.exists(path))
