"""Helpers for the sandbox tests: a VM boundary or a skip that says why (the doctor's reason,
and only where QEMU is absent: a missing image is built, into the user's cache, once)."""

from __future__ import annotations

import pytest

from torpor.sandbox import Image, build_image
from torpor.sandbox.host import qemu_path, refusal_reason


def vm_image() -> Image:
    """The guest image (built and cached on first use); skips where QEMU is absent."""
    if qemu_path() is None:
        pytest.skip(f"no VM boundary: {refusal_reason()}")
    return build_image()
