"""Opt-in network with an allow-list (a VM of its own, so the full run only): the allowed host
service is reachable at its guest address; another port of the same host, the host's own
address and anything else are not. Then the same VM stops answering (SIGSTOP): the host kills
it at the exec's timeout plus the grace."""

from __future__ import annotations

import os
import signal

import pytest

from sandbox_kit import listener, vm_image
from torpor.errors import SandboxGoneError
from torpor.sandbox import Network, Sandbox

pytestmark = pytest.mark.slow


def test_only_the_allowed_service_is_reachable() -> None:
    image = vm_image()
    allowed_srv, allowed_seen = listener()
    other_srv, other_seen = listener()
    allowed = f"127.0.0.1:{allowed_srv.getsockname()[1]}"
    other_port = other_srv.getsockname()[1]
    net = Network(allow=(allowed,))
    guest_ip, guest_port = net.guest_address(allowed).split(":")
    try:
        with Sandbox(network=net, image=image) as sb:
            r = sb.exec(
                ["sh", "-c",
                 f"echo hi | timeout 8 nc {guest_ip} {guest_port}; echo allowed=$?;"
                 f" for h in 10.0.2.2 10.0.2.3 {guest_ip}; do"
                 f" echo hi | timeout 8 nc $h {other_port}; echo other=$?; done"],
                timeout_s=240,  # a hang guard: each probe ends within its own `timeout 8`
            )  # fmt: skip
            qemu = int((sb.workspace / "qemu.pid").read_text())
            os.kill(qemu, signal.SIGSTOP)  # a guest that can never answer again
            sb.grace_s = 2.0  # fires by construction: the stopped guest cannot answer
            with pytest.raises(SandboxGoneError, match="sandbox VM killed"):
                sb.exec(["true"], timeout_s=1)
            assert not os.path.exists(f"/proc/{qemu}"), "QEMU was killed (and reaped)"
    finally:
        allowed_srv.close()
        other_srv.close()
    out = r.stdout.decode()
    assert len(allowed_seen) == 1, out  # the allowed service got exactly the one connection
    assert other_seen == [], out  # the other port of the same host got none
    assert "allowed=" in out and out.count("other=0") == 0, out
    with pytest.raises(ValueError, match="is not host:port"):
        Network(allow=("example.org",))
