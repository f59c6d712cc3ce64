"""A sleeping workspace into an artifact store and back (issue 44), without a VM: zero chunks are
not stored, a chunk stored once is shared, the rebuilt folder has the same disk digest and stream,
and a tampered chunk or a blob that is no workspace manifest is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torpor.artifacts import ArtifactStore
from torpor.errors import CorruptRecordError, SandboxSnapshotError
from torpor.sandbox.snapshot import CHUNK, MANIFEST, SNAPSHOT, disk_digest, file_sha256
from torpor.sandbox.workspace import checkpoint_of, materialize, pack


def asleep(ws: Path, marks: dict[int, bytes], stream: bytes) -> None:
    """A folder shaped like a sleeping workspace: a sparse 8 MiB disk with ``marks`` (chunk
    index -> bytes at its start), a stream and the sleep manifest."""
    ws.mkdir()
    with open(ws / "disk.img", "wb") as f:
        f.truncate(8 * CHUNK)
        for index, data in marks.items():
            f.seek(index * CHUNK)
            f.write(data)
    (ws / SNAPSHOT).write_bytes(stream)
    sleep = {
        "disk_digest": disk_digest(ws / "disk.img"),
        "snapshot_sha256": file_sha256(ws / SNAPSHOT),
    }
    (ws / MANIFEST).write_text(json.dumps(sleep))


def test_a_workspace_packs_by_chunk_and_rebuilds_the_same(tmp_path: Path) -> None:
    store = ArtifactStore(str(tmp_path / "artifacts"))
    pinned: list[str] = []
    a = tmp_path / "a"
    asleep(a, {0: b"superblock", 5: b"files", 6: bytes(100)}, b"memory of a")
    raw, manifest = pack(a, store, lambda sha, _n: pinned.append(sha))
    assert sorted(manifest["chunks"], key=int) == ["0", "5"]  # holes and zeros are not stored
    assert set(pinned) == {*manifest["chunks"].values(), manifest["snapshot"]}
    digest = store.put(raw)

    # A workspace that differs in one chunk shares the others' blobs.
    b = tmp_path / "b"
    asleep(b, {0: b"superblock", 5: b"files, changed"}, b"memory of b")
    _, other = pack(b, store, lambda _sha, _n: None)
    assert other["chunks"]["0"] == manifest["chunks"]["0"]
    assert other["chunks"]["5"] != manifest["chunks"]["5"]

    there = tmp_path / "elsewhere"
    there.mkdir()
    (there / "disk.img").write_bytes(b"stale")  # whatever was there is replaced
    materialize(there, store, digest)
    assert disk_digest(there / "disk.img") == disk_digest(a / "disk.img")
    assert (there / SNAPSHOT).read_bytes() == b"memory of a"
    assert json.loads((there / MANIFEST).read_text()) == json.loads((a / MANIFEST).read_text())
    assert checkpoint_of(there) == digest
    assert (there / "disk.img").stat().st_blocks * 512 < 4 * CHUNK  # sparse again

    chunk = Path(store.root) / "sha256" / manifest["chunks"]["5"][:2] / manifest["chunks"]["5"]
    chunk.write_bytes(b"files, tampered")
    with pytest.raises(CorruptRecordError, match="does not match its hash"):
        materialize(tmp_path / "again", store, digest)
    with pytest.raises(SandboxSnapshotError, match="not a workspace manifest"):
        materialize(tmp_path / "again", store, store.put(b'{"format": "something else"}'))
