"""What this host offers a sandbox, probed once and recorded: QEMU, KVM, the image.

KVM is used only where a stock guest kernel boots under it. ``/dev/kvm`` may exist and still be
unusable for that: on PVM hosts (the ``kvm_pvm`` module, a paravirtual nested KVM) a VM and a
vCPU can be created but a stock Debian kernel hangs at boot (PVM needs a PVM-enabled guest
kernel). Where KVM is not usable QEMU's emulation (TCG) runs the same kernel: still a VM
boundary (its own kernel on emulated hardware), only slower. The choice and its reason are
recorded in ``<cache>/accel-<host>.json`` (keyed by the host kernel's release) so the probe runs
once per host, not per sandbox; ``torpor sandbox doctor`` prints them.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from .image import cache_dir, current_image

QEMU = "qemu-system-x86_64"


@dataclass(frozen=True)
class Accel:
    """The accelerator a sandbox uses (``kvm`` or ``tcg``) and why it was chosen."""

    name: str
    reason: str


@dataclass(frozen=True)
class Fact:
    """One line of the doctor: what (``qemu``, ``kvm``, ``accel``, ``image``, ``isolation``),
    whether it is fine, and the detail."""

    what: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{self.what:<10} {'ok ' if self.ok else 'no '} {self.detail}"


def qemu_path() -> str | None:
    """The QEMU binary on PATH (``qemu-system-x86_64``), or None."""
    return shutil.which(QEMU)


def kvm_unusable_reason() -> str | None:
    """Why KVM cannot boot a stock guest kernel here without trying (None: worth a probe)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return f"the host is {platform.machine()}, the guest image is x86_64"
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "/dev/kvm is not readable and writable by this user"
    if os.path.isdir("/sys/module/kvm_pvm"):
        return "KVM here is PVM (kvm_pvm, paravirtual nested KVM): a stock kernel hangs under it"
    return None


def _record_path() -> Path:
    return cache_dir() / f"accel-{platform.release()}.json"


def recorded_accel() -> Accel | None:
    """The accelerator recorded for this host by an earlier probe, or None."""
    try:
        data = json.loads(_record_path().read_text())
        return Accel(name=str(data["name"]), reason=str(data["reason"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def record_accel(accel: Accel) -> None:
    path = _record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps({"name": accel.name, "reason": accel.reason}) + "\n")
    tmp.replace(path)


def tsc_khz() -> int | None:
    """The host's TSC frequency in kHz (``cpu MHz`` of ``/proc/cpuinfo``), or None.

    Under TCG the guest's TSC is the host's (QEMU's ``cpu_get_host_ticks``), and a microvm has
    no HPET or PM timer to calibrate it against: without ``tsc_early_khz`` on its command line a
    loaded host makes the stock kernel's PIT calibration fail and its clock stand still at 0."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":", 1)[1]) * 1000)
    except (OSError, ValueError):
        return None
    return None


def facts() -> list[Fact]:
    """The doctor's facts, one per line: QEMU, KVM, the accelerator, the image, isolation."""
    out: list[Fact] = []
    qemu = qemu_path()
    out.append(
        Fact(
            "qemu",
            qemu is not None,
            qemu or f"{QEMU} not on PATH (apt-get install qemu-system-x86)",
        )
    )
    kvm = kvm_unusable_reason()
    out.append(Fact("kvm", kvm is None, kvm or "/dev/kvm usable (a boot probe decides)"))
    accel = recorded_accel()
    if accel is None and kvm:
        # Known without booting anything: KVM cannot boot a stock kernel here, so TCG.
        out.append(Fact("accel", qemu is not None, f"tcg: {kvm} (decided without a boot)"))
    elif accel is None:
        out.append(
            Fact(
                "accel",
                qemu is not None,
                "kvm or tcg: /dev/kvm is usable, so the first sandbox that starts boots a stock "
                "kernel under KVM to decide (at most a few seconds, recorded for this host); "
                "start one to probe now: python -c 'from torpor.sandbox import Sandbox; "
                "Sandbox().start().close()'",
            )
        )
    else:
        again = f"(recorded in {_record_path()}; delete it to probe again)"
        out.append(Fact("accel", True, f"{accel.name}: {accel.reason} {again}"))
    image = current_image()
    if image is None:
        out.append(Fact("image", False, f"not built in {cache_dir()} (torpor sandbox build)"))
    else:
        pk = image.manifest.get("packages", {})
        kernel = pk.get("kernel", {}) if isinstance(pk, dict) else {}
        out.append(
            Fact(
                "image", True, f"{image.root} (kernel {kernel.get('name')} {kernel.get('version')})"
            )
        )
    reason = refusal_reason(out)
    out.append(
        Fact(
            "isolation",
            reason is None,
            "vm: agent code runs behind a VM boundary"
            if reason is None
            else f"none: {reason}; torpor refuses (isolation='process' is for development only)",
        )
    )
    return out


def refusal_reason(found: list[Fact] | None = None) -> str | None:
    """Why no VM boundary can be had here (no QEMU, no image), or None when one can."""
    if qemu_path() is None:
        return f"{QEMU} is not installed"
    if current_image() is None:
        return f"the guest image is not built (torpor sandbox build; cache {cache_dir()})"
    return None
