"""A real microVM (TCG where KVM cannot boot a stock kernel), shared by this module's tests:
the agent's verbs, limits, and escape attempts from the guest that must fail — the host's
files, its environment and secrets, the network when off, the agent's own channel and ledger.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

import torpor
import torpor.sandbox
from sandbox_kit import listener, vm_image
from torpor.errors import SandboxError
from torpor.sandbox import Limits, Sandbox

pytestmark = pytest.mark.proc

SECRET_VAR = "SANDBOX_TEST_HOST_SECRET"


@pytest.fixture(scope="module")
def host_secret() -> Iterator[str]:
    """A secret in this (host) process's environment while the VM boots and runs."""
    value = "s3cr3t-" + secrets.token_hex(12)
    os.environ[SECRET_VAR] = value
    yield value
    os.environ.pop(SECRET_VAR, None)


@pytest.fixture(scope="module")
def host_dir(tmp_path_factory: pytest.TempPathFactory, host_secret: str) -> Path:
    """A host folder with a canary file and a secrets file the guest must not reach."""
    d = tmp_path_factory.mktemp("host")
    (d / "canary.txt").write_text("host canary\n")
    (d / "secrets.env").write_text(f"TOKEN={host_secret}\n")
    return d


@pytest.fixture(scope="module")
def vm(host_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    image = vm_image()
    limits = Limits(cpus=1, memory_mb=192, disk_mb=24, tmp_mb=16, max_output_bytes=4096)
    # The workspace lives next to the host's secrets: the guest sees its disk, not the folder.
    sb = Sandbox(host_dir / "ws", limits=limits, image=image)
    with sb:
        yield sb


def sh(vm: Sandbox, script: str, **kw: object) -> tuple[int, str, str]:
    r = vm.exec(["sh", "-c", script], **kw)  # type: ignore[arg-type]
    return r.exit_code, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def test_the_agents_verbs_round_trip_bytes_argv_and_exit_codes(vm: Sandbox) -> None:
    r = vm.exec(
        [
            "sh",
            "-c",
            'printf "%s|" "$@"; cat; echo oops >&2; exit 3',
            "sh",
            "a b",
            "",
            "-c",
            "it's\ntwo  lines\t",
        ],
        stdin=b"in\x00put",
    )
    assert (r.exit_code, r.stdout, r.stderr) == (
        3,
        b"a b||-c|it's\ntwo  lines\t|in\x00put",
        b"oops\n",
    )
    assert r.isolation == "vm" and not r.timed_out
    blob = bytes(range(256)) * 4
    assert vm.write_file("src/data.bin", blob) == __import__("hashlib").sha256(blob).hexdigest()
    assert vm.read_file("src/data.bin") == blob
    assert [(e.name, e.kind, e.size) for e in vm.ls("src")] == [("data.bin", "file", 1024)]
    assert ("src", "dir") in [(e.name, e.kind) for e in vm.ls()]
    with pytest.raises(SandboxError, match="nope"):
        vm.read_file("nope")
    # Output beyond max_output_bytes is cut, and said to be.
    r = vm.exec(["sh", "-c", "yes | head -c 10000"])
    assert len(r.stdout) == 4096 and r.stdout_truncated


def test_timeout_kills_the_command_group_and_the_vm_lives_on(vm: Sandbox) -> None:
    r = vm.exec(["sh", "-c", "sleep 71 & sleep 72; echo never"], timeout_s=1)
    assert r.timed_out and r.exit_code == 137 and b"never" not in r.stdout
    _code, out, _ = sh(vm, "ps -o args | grep -c '^sleep 7[12]'; true")
    assert out.strip() == "0", "the background child of the timed-out command was killed too"


def test_read_only_exec_cannot_change_the_workspace(vm: Sandbox) -> None:
    vm.write_file("keep.txt", "before")
    code, _, err = sh(vm, "echo after > keep.txt", read_only=True)
    assert code != 0 and "Read-only" in err
    assert vm.read_file("keep.txt") == b"before"
    assert sh(vm, "echo after > keep.txt")[0] == 0  # writable again afterwards


def test_an_op_runs_at_most_once_and_its_result_is_kept(vm: Sandbox) -> None:
    first = vm.exec(["sh", "-c", "echo x >> ops.log; wc -l < ops.log"], op="a1" * 16)
    again = vm.exec(["sh", "-c", "echo x >> ops.log; wc -l < ops.log"], op="a1" * 16)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.stdout == first.stdout and vm.read_file("ops.log") == b"x\n"
    assert vm.status("a1" * 16).state == "done" and vm.status("b2" * 16).state == "absent"


def test_limits_hold_cpu_memory_and_disk(vm: Sandbox) -> None:
    assert sh(vm, "nproc")[1].strip() == "1"
    mem_kb = int(sh(vm, "awk '/MemTotal/ {print $2}' /proc/meminfo")[1])
    assert mem_kb <= 192 * 1024
    # The workspace disk is 24 MB: a 64 MB file does not fit, whatever the host has free.
    assert "No space left" in sh(vm, "dd if=/dev/zero of=big bs=1M count=64 2>&1; rm -f big")[1]


def test_the_guest_cannot_reach_the_hosts_files(vm: Sandbox, host_dir: Path) -> None:
    before = {p.name: p.read_bytes() for p in host_dir.iterdir() if p.is_file()}
    canary = host_dir / "canary.txt"
    _code, out, _err = sh(
        vm,
        f"cat {canary}; ls {host_dir}; echo pwned > {canary} 2>&1;"
        f" mkdir -p {host_dir} && echo pwned > {canary};"
        " mount; ls /dev | tr '\\n' ' '; grep -rl 'host canary' /work /tmp 2>/dev/null; true",
    )
    assert "host canary" not in out
    assert {p.name: p.read_bytes() for p in host_dir.iterdir() if p.is_file()} == before
    # Nothing of the host is mounted in: the guest's own disks only, no 9p/virtiofs share.
    mounts = [line.split()[0:3] for line in out.splitlines() if " on " in line]
    assert not any(m[0] in ("9p", "virtiofs") or "host" in m[0] for m in mounts)


def test_the_guest_sees_none_of_the_hosts_environment_or_secrets(
    vm: Sandbox, host_secret: str
) -> None:
    assert os.environ[SECRET_VAR] == host_secret  # it is in the host process, as the VM runs
    _code, out, err = sh(
        vm,
        "env; cat /proc/cmdline; cat /proc/1/environ 2>&1; "
        f"grep -rs {host_secret!r} /etc /work /tmp /torpor /sbin /proc/cmdline 2>&1;"
        f" grep -c {host_secret!r} /bin/busybox; echo end",
    )
    assert out.rstrip().endswith("end")
    assert host_secret not in out + err and SECRET_VAR not in out + err
    assert "TORPOR_SIGNING_KEY" not in out and "PYTHONPATH" not in out
    assert "HOME=/work" in out and "USER=agent" in out


def test_the_network_is_off(vm: Sandbox) -> None:
    srv, accepted = listener()
    port = srv.getsockname()[1]
    try:
        # (busybox's static wget crashes on name lookup; nc speaks TCP by address.)
        _, out, _ = sh(
            vm,
            "ip -o link | cut -d: -f2; for h in 10.0.2.2 10.0.2.100 127.0.0.1; do"
            f" echo hi | timeout 5 nc $h {port} 2>&1; echo rc=$?; done; echo end",
            timeout_s=60,
        )
    finally:
        srv.close()
    assert [line.strip() for line in out.splitlines()[:1]] == ["lo"] and "eth0" not in out
    assert out.count("Network is unreachable") == 2, out  # no route off the guest at all
    assert "rc=0" not in out and out.rstrip().endswith("end")
    assert accepted == []  # the host's listener saw no connection


def test_the_command_cannot_forge_the_agents_channel_or_ledger(vm: Sandbox) -> None:
    _code, out, err = sh(
        vm,
        "for p in /dev/vport*; do echo 'R x ok' > $p; done; ls /ws;"
        " echo fake > /ws/ops/x 2>&1; id -u",
    )
    assert "Permission denied" in err and out.strip().endswith("1000")
    assert vm.exec(["true"]).ok  # the channel still works, untouched


def test_the_docs_snippet_runs_as_written(vm: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/sandbox.md's first snippet, on this module's VM (a boot saved): ``Sandbox(...)``
    hands back the running one, and its ``with`` block leaves it running."""
    import contextlib
    import io
    import re

    import torpor.sandbox

    text = (Path(__file__).parent.parent / "docs" / "sandbox.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", text, re.S)
    assert snippet is not None

    @contextlib.contextmanager
    def shared(**_kw: object) -> Iterator[Sandbox]:
        yield vm

    monkeypatch.setattr(torpor.sandbox, "Sandbox", shared)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(snippet.group(1), {})
    lines = out.getvalue().splitlines()
    assert lines[:3] == ["0 print(6 * 7)", "ok", " vm"]
    assert "'hello.py'" in lines[3]


def test_an_agent_writes_runs_and_reads_through_the_sandbox_tools(
    vm: Sandbox, runtime: torpor.Runtime, client: torpor.Client
) -> None:
    from torpor import Agent, CodePlanner, PlanView, Proposal, step
    from torpor.sandbox import sandbox_tools

    tools = sandbox_tools(vm)
    script = "n=0; for i in 1 2 3 4; do n=$((n + i)); done; echo $n > sum.txt; cat sum.txt"

    def planner(view: PlanView) -> Proposal:
        if view.version == 0:
            return Proposal(
                steps=[
                    step("w", "sandbox.write", path="agent/sum.sh", content=script),
                    step(
                        "x", "sandbox.exec", after=["w"], argv=["sh", "-c", "cd agent && sh sum.sh"]
                    ),
                    step("r", "sandbox.read", after=["x"], path="agent/sum.txt"),
                ]
            )
        return Proposal.finish("summed")

    agent = Agent(
        "test.sandbox.agent",
        goal="sum 1..4 in the sandbox",
        tools=tools,
        planner=CodePlanner(planner),
        criteria={"summed": lambda ctx: ctx.results().get("r") == "10\n"},
    )
    res = runtime.run(agent, None, run_id="sb-agent")
    assert res.outcome == "succeeded", res.reason
    results = client.state("sb-agent").plan
    assert {k: v.status for k, v in results.items()} == {
        "w": "succeeded",
        "x": "succeeded",
        "r": "succeeded",
    }
    intents = [e.payload for e in client.events("sb-agent") if e.type == "effect_intended"]
    assert len(intents) == 2  # the write and the exec are effects; the read is not
    assert vm.status(torpor.sandbox.op_id(intents[1].key)).state == "done"  # the guest's record
