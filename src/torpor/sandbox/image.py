"""The sandbox's guest image, built reproducibly from Debian's packages and cached by content.

Three files, made without root and without loop mounts:

- ``vmlinuz``: the stock kernel of ``linux-image-cloud-amd64`` (the cloud flavour boots fastest
  and builds everything a ``microvm`` guest needs), taken from the package with
  ``apt-get download`` + ``dpkg-deb --fsys-tarfile``;
- ``initrd.img``: a gzip'd cpio archive (:mod:`torpor.sandbox.cpio`, written here, so no
  ``cpio`` binary and identical bytes each build) holding the static busybox of
  ``busybox-static``, the kernel's ``virtio_mmio``/``virtio_blk``/``virtio_console`` modules (the
  6.1 cloud kernel builds them as modules; ``virtio_net`` and its two dependencies too, loaded
  only when a network is opted into) and an ``/init`` that mounts the root disk;
- ``rootfs.ext4``: busybox, its applet links and the guest agent, made with ``mke2fs -d`` from a
  staging folder (fixed UUID, hash seed and timestamps, so the same inputs give the same bytes).

The image's key is the sha256 of its inputs (both packages' sha256 as Debian's index states
them and checks them, this builder's version, the guest scripts); the image lives in
``<cache>/images/<key>/`` with a ``manifest.json`` of every file's sha256, which is checked
before a VM boots from it. ``<cache>`` is ``$TORPOR_SANDBOX_CACHE``, else
``$XDG_CACHE_HOME/torpor/sandbox``, else ``~/.cache/torpor/sandbox`` — outside any repository.
Nothing is downloaded except Debian's two packages, through the machine's apt, at build time.

Run ``torpor sandbox build`` (or :func:`build_image`) once; ``.ci/run`` does before the tests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import SandboxImageError
from . import cpio

#: Bump when the build's output for the same inputs changes.
BUILDER_VERSION = "2"
KERNEL_PACKAGE = "linux-image-cloud-amd64"
BUSYBOX_PACKAGE = "busybox-static"
#: Modules the initramfs loads, in order; the last three only with a network.
MODULES = ("virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console")
NET_MODULES = ("failover", "net_failover", "virtio_net")
ROOTFS_MB = 24
#: The filesystem identity pinned for reproducible ``mke2fs`` output.
_FS_UUID = "5a4d0b0e-7f1a-4c3e-9a56-746f72706f72"
_FS_HASH_SEED = "8b1c3f4e-2d5a-4e6f-8a7b-746f72706f72"
_GUEST_FILES = ("initramfs_init.sh", "rootfs_init.sh", "agent.sh")


def cache_dir() -> Path:
    """Where images (and the downloaded packages) are cached; see the module docstring."""
    env = os.environ.get("TORPOR_SANDBOX_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "torpor" / "sandbox"


@dataclass(frozen=True)
class Image:
    """A built image: its folder, its key and the manifest (file name -> sha256, plus the
    packages' names and versions)."""

    root: Path
    key: str
    manifest: dict[str, object]

    @property
    def kernel(self) -> Path:
        return self.root / "vmlinuz"

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def rootfs(self) -> Path:
        return self.root / "rootfs.ext4"

    def verify(self) -> None:
        """Raise SandboxImageError naming the first file whose sha256 is not the manifest's."""
        files = self.manifest.get("files")
        if not isinstance(files, dict):
            raise SandboxImageError(f"image {self.root}: manifest.json has no files")
        for name, want in sorted(files.items()):
            path = self.root / name
            if not path.is_file():
                raise SandboxImageError(f"image {self.root}: {name} is missing")
            if _sha256(path.read_bytes()) != want:
                raise SandboxImageError(f"image {self.root}: {name} does not match its sha256")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _guest_script(name: str) -> bytes:
    return resources.files("torpor.sandbox").joinpath("guest", name).read_bytes()


def _run(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=600
        )
    except FileNotFoundError as exc:
        raise SandboxImageError(f"building the sandbox image needs {argv[0]}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SandboxImageError(f"{' '.join(argv[:3])} failed ({done.returncode}): {tail[0]}")
    return done.stdout


def _package(name: str) -> tuple[str, str, str]:
    """(package, version, sha256) of what apt would install for ``name``: a metapackage
    (``linux-image-cloud-amd64``) resolves to the kernel package it depends on."""
    show = _run(["apt-cache", "show", "--no-all-versions", name])
    fields = dict(
        line.split(": ", 1) for line in show.splitlines() if ": " in line and line[0] != " "
    )
    depends = fields.get("Depends", "")
    if name == KERNEL_PACKAGE and depends.startswith("linux-image-"):
        return _package(depends.split()[0].rstrip(","))
    if "SHA256" not in fields:
        raise SandboxImageError(f"apt-cache show {name}: no SHA256 (run apt-get update?)")
    return fields["Package"], fields["Version"], fields["SHA256"]


def _download(package: str, version: str, sha256: str, debs: Path) -> Path:
    """The package's .deb in ``debs``, downloaded with apt-get when missing, sha256-checked."""
    debs.mkdir(parents=True, exist_ok=True)
    for old in debs.glob(f"{package}_*.deb"):
        if _sha256(old.read_bytes()) == sha256:
            return old
    with tempfile.TemporaryDirectory(dir=debs) as tmp:
        _run(["apt-get", "download", "-q", f"{package}={version}"], cwd=Path(tmp))
        got = next(Path(tmp).glob("*.deb"), None)
        if got is None or _sha256(got.read_bytes()) != sha256:
            raise SandboxImageError(f"apt-get download {package}={version}: sha256 mismatch")
        return Path(shutil.move(str(got), debs / got.name))


def _members(deb: Path, wanted: dict[str, str]) -> dict[str, bytes]:
    """Files of ``deb`` by suffix: ``wanted`` maps a label to a path suffix inside the package."""
    tar_bytes = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    found: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        for member in tar:
            for label, suffix in wanted.items():
                if member.isfile() and member.name.endswith(suffix) and label not in found:
                    f = tar.extractfile(member)
                    if f is not None:
                        found[label] = f.read()
    missing = sorted(set(wanted) - set(found))
    if missing:
        raise SandboxImageError(f"{deb.name} has no {', '.join(missing)}")
    return found


def _inputs() -> tuple[dict[str, tuple[str, str, str]], str]:
    packages = {"kernel": _package(KERNEL_PACKAGE), "busybox": _package(BUSYBOX_PACKAGE)}
    h = hashlib.sha256(f"torpor-sandbox-image/{BUILDER_VERSION}/{ROOTFS_MB}\n".encode())
    for label in sorted(packages):
        h.update(f"{label} {' '.join(packages[label])}\n".encode())
    for name in _GUEST_FILES:
        h.update(f"{name} {_sha256(_guest_script(name))}\n".encode())
    return packages, h.hexdigest()


def load_image(root: Path) -> Image | None:
    """The image in ``root`` if it has a manifest (not verified; see :meth:`Image.verify`)."""
    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return Image(root=root, key=root.name, manifest=manifest)


def current_image() -> Image | None:
    """The image last built into this cache (``<cache>/current`` names its key), or None."""
    try:
        key = (cache_dir() / "current").read_text().strip()
    except OSError:
        return None
    return load_image(cache_dir() / "images" / key) if key else None


def build_image(force: bool = False) -> Image:
    """Build the image for the packages apt offers now (or return the cached one with that
    key, verified). Raises SandboxImageError naming the step that failed (apt, dpkg-deb,
    mke2fs)."""
    packages, key = _inputs()
    root = cache_dir() / "images" / key
    cached = load_image(root)
    if cached is not None and not force:
        cached.verify()
        _set_current(key)
        return cached
    debs = cache_dir() / "debs"
    kdeb = _download(*packages["kernel"], debs)
    bdeb = _download(*packages["busybox"], debs)
    kver = packages["kernel"][0].removeprefix("linux-image-")
    wanted = {"vmlinuz": f"boot/vmlinuz-{kver}"}
    wanted |= {m: f"/{m}.ko" for m in MODULES + NET_MODULES}
    kfiles = _members(kdeb, wanted)
    busybox = _members(bdeb, {"busybox": "bin/busybox"})["busybox"]
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=".build-") as tmp:
        out = Path(tmp) / "out"
        out.mkdir()
        (out / "vmlinuz").write_bytes(kfiles["vmlinuz"])
        (out / "initrd.img").write_bytes(_initramfs(busybox, kfiles))
        _rootfs(busybox, Path(tmp) / "stage", out / "rootfs.ext4")
        files = {p.name: _sha256(p.read_bytes()) for p in sorted(out.iterdir())}
        manifest = {
            "key": key,
            "builder": BUILDER_VERSION,
            "packages": {
                k: {"name": v[0], "version": v[1], "sha256": v[2]} for k, v in packages.items()
            },
            "files": files,
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        if root.exists():
            shutil.rmtree(root)
        out.rename(root)
    _set_current(key)
    image = load_image(root)
    assert image is not None
    return image


def _set_current(key: str) -> None:
    tmp = cache_dir() / f".current.{os.getpid()}"
    tmp.write_text(key + "\n")
    tmp.replace(cache_dir() / "current")


def _initramfs(busybox: bytes, kfiles: dict[str, bytes]) -> bytes:
    entries = [cpio.directory(d) for d in ("bin", "dev", "lib", "lib/modules", "newroot")]
    entries += [cpio.directory("proc", 0o555), cpio.directory("sys", 0o555)]
    entries.append(cpio.file("bin/busybox", busybox, 0o755))
    entries.append(cpio.symlink("bin/sh", "busybox"))
    entries.append(cpio.file("init", _guest_script("initramfs_init.sh"), 0o755))
    for m in MODULES + NET_MODULES:
        entries.append(cpio.file(f"lib/modules/{m}.ko", kfiles[m], 0o644))
    return cpio.gzipped(entries)


_PASSWD = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/work:/bin/sh\n"
_GROUP = "root:x:0:\nagent:x:1000:\n"


def _rootfs(busybox: bytes, stage: Path, image: Path) -> None:
    for d in (
        "bin",
        "sbin",
        "etc",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "ws",
        "work",
        "root",
        "torpor",
    ):
        (stage / d).mkdir(parents=True)
    bb = stage / "bin" / "busybox"
    bb.write_bytes(busybox)
    bb.chmod(0o755)
    applets = _run([str(bb), "--list"]).split()
    for applet in applets:
        if applet not in ("busybox", "init", "linuxrc"):
            (stage / "bin" / applet).symlink_to("busybox")
    init = stage / "sbin" / "init"
    init.write_bytes(_guest_script("rootfs_init.sh"))
    init.chmod(0o755)
    (stage / "torpor" / "agent.sh").write_bytes(_guest_script("agent.sh"))
    (stage / "etc" / "passwd").write_text(_PASSWD)
    (stage / "etc" / "group").write_text(_GROUP)
    (stage / "etc" / "hostname").write_text("sandbox\n")
    (stage / "tmp").chmod(0o1777)
    (stage / "root").chmod(0o700)
    for path in sorted(stage.rglob("*"), reverse=True):
        os.utime(path, (0, 0), follow_symlinks=False)
    os.utime(stage, (0, 0))
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "E2FSPROGS_FAKE_TIME": "1",
    }
    _run(
        [
            "mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-L", "torpor-root",
            "-U", _FS_UUID, "-E", f"hash_seed={_FS_HASH_SEED},root_owner=0:0",
            "-d", str(stage), str(image), f"{ROOTFS_MB}M",
        ],
        env=env,
    )  # fmt: skip
    # mke2fs -d copies each file's ctime (which utime cannot set) and stamps crtime with now:
    # zero both with debugfs, so the same inputs give the same bytes.
    paths = ["/", "/lost+found"] + [
        "/" + p.relative_to(stage).as_posix() for p in sorted(stage.rglob("*"))
    ]
    script = "".join(f'sif "{p}" ctime 0\nsif "{p}" crtime 0\n' for p in paths)
    done = subprocess.run(
        ["debugfs", "-w", "-f", "-", str(image)], input=script, env=env,
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SandboxImageError(f"debugfs {image}: {done.stderr.strip()[-200:]}")
