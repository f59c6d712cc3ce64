"""Helpers for the sandbox tests: a VM boundary or a skip that says why (the doctor's reason,
and only where QEMU is absent: a missing image is built, into the user's cache, once)."""

from __future__ import annotations

import socket
import threading

import pytest

from torpor.sandbox import Image, build_image
from torpor.sandbox.host import qemu_path, refusal_reason


def vm_image() -> Image:
    """The guest image (built and cached on first use); skips where QEMU is absent."""
    if qemu_path() is None:
        pytest.skip(f"no VM boundary: {refusal_reason()}")
    return build_image()


def listener() -> tuple[socket.socket, list[object]]:
    """A TCP listener on all of the host's addresses that records every connection."""
    srv = socket.create_server(("0.0.0.0", 0))
    accepted: list[object] = []

    def serve() -> None:
        while True:
            try:
                conn, peer = srv.accept()
            except OSError:
                return
            accepted.append(peer)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, accepted
