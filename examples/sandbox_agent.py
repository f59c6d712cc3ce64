"""An agent whose code runs in a microVM that sleeps while it waits for a person (issue 44).

The agent writes a small shell program and its tests into its sandbox's workspace, places a
wheel there (``tinycalc``, built here from a few bytes: no network), installs it into the
workspace (unpacked, every file checked against the wheel's RECORD — what pip does for a pure
wheel; the guest image is busybox, so the package is a shell module), runs its tests, then asks
for approval to cut a release. While it waits the VM is asleep: its workspace (disk chunks,
saved memory, manifest) is recorded as artifacts of the run and no process is left. Approved —
in another process, on another machine with the same database and artifact store — the VM is
restored (rebuilt from the artifact store where this machine has no workspace) and the agent
continues where it stopped: the release is a tarball of the tested code and the installed package.

::

    uv run python -m examples.sandbox_agent --run-id sb-1            # stops at the approval
    uv run python -m examples.sandbox_agent --resume sb-1 --auto-approve

Kill it (``kill -9``) anywhere and ``--resume``: every effect happens once (the guest records each
op on the workspace disk; a write is reconciled by content), and the workspace is intact.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import sys
import zipfile
from typing import Any

import torpor
from torpor import Agent, CodePlanner, PlanView, Proposal, step
from torpor.history import Policy
from torpor.sandbox import Limits, Sandbox, op_id, sandbox_tools

WORKFLOW = "examples.sandbox_agent"
LIMITS = Limits(cpus=1, memory_mb=128, disk_mb=32, tmp_mb=8)
WHEEL = "tinycalc-1.0-py3-none-any.whl"

CALC = """# tinycalc: integer arithmetic for shell programs
add() { echo $(($1 + $2)); }
mul() { echo $(($1 * $2)); }
"""

#: The agent's own program: sums its arguments with the installed package.
STATS = """. "$(dirname "$0")/../site/tinycalc/calc.sh"
total=0
for n in "$@"; do total=$(add "$total" "$n"); done
echo "$total"
"""

TESTS = """set -u
fail=0
check() { if [ "$2" = "$3" ]; then echo "ok $1"; else echo "FAIL $1: $2 != $3"; fail=1; fi; }
check sum "$(sh app/stats.sh 1 2 3 4)" 10
check empty "$(sh app/stats.sh)" 0
check negative "$(sh app/stats.sh 5 -7)" -2
exit $fail
"""

#: ``sh install.sh WHEEL TARGET``: unpack a pure wheel into TARGET and check every file it
#: installed against the wheel's RECORD (urlsafe base64 sha256, no padding).
INSTALL = """set -eu
wheel=$1; target=$2
echo "$wheel" >> installs.log
mkdir -p "$target"
unzip -oq "$wheel" -d "$target"
record=$(ls -d "$target"/*.dist-info)/RECORD
while IFS=, read -r path hash size; do
  [ -n "$hash" ] || continue
  hex=$(sha256sum "$target/$path" | cut -d' ' -f1)
  got=$(printf "$(echo "$hex" | sed 's/../\\\\x&/g')" | base64 | tr '+/' '-_' | tr -d '=')
  [ "sha256=$got" = "$hash" ] || { echo "RECORD mismatch: $path" >&2; exit 1; }
done < "$record"
echo sandbox-agent > "$(dirname "$record")/INSTALLER"
echo "installed $(ls "$target" | tr '\\n' ' ')"
"""


def build_wheel() -> bytes:
    """The ``tinycalc`` wheel's bytes: the same bytes every time (fixed dates, sorted)."""
    files = {
        "tinycalc/calc.sh": CALC.encode(),
        "tinycalc-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinycalc\nVersion: 1.0\n",
        "tinycalc-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: examples.sandbox_agent\n"
            b"Root-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files["tinycalc-1.0.dist-info/RECORD"] = (record + "tinycalc-1.0.dist-info/RECORD,,\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(files):
            z.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), files[path])
    return out.getvalue()


def sandbox_for(run_id: str) -> Sandbox:
    """The run's sandbox: ``$TORPOR_HOME/sandboxes/<hash of the run id>``."""
    return Sandbox.for_run(run_id, limits=LIMITS)


def make_agent(sb: Sandbox) -> Agent:
    """The agent (a code planner: no model), its tools those of ``sb`` plus ``release``."""
    tools = sandbox_tools(sb)  # an approval this agent waits for puts ``sb`` to sleep
    exec_tool = tools["sandbox.exec"]

    @tools.tool(
        policy=Policy.EFFECT,
        requires_approval=True,
        reconcile=exec_tool.reconcile,  # the guest's record of the op, as for sandbox.exec
        description="Pack the tested program and the installed package into out/release.tgz.",
    )
    def release(version: str, idempotency_key: str) -> dict[str, Any]:
        script = (
            f"echo {version} >> releases.log && mkdir -p out"
            f" && tar czf out/release-{version}.tgz app site"
            f" && sha256sum out/release-{version}.tgz"
        )
        sb.start()
        done = sb.exec(["sh", "-c", script], op=op_id(idempotency_key), timeout_s=60)
        return done.as_dict() | {"workspace": sb.workspace_digest()}

    wheel = base64.b64encode(build_wheel()).decode()

    def planner(view: PlanView) -> Proposal:
        if view.version > 0:
            return Proposal.finish("released")
        install = f"base64 -d {WHEEL}.b64 > {WHEEL} && sh install.sh {WHEEL} site"
        return Proposal(
            steps=[
                step("code", "sandbox.write", path="app/stats.sh", content=STATS),
                step("tests", "sandbox.write", path="app/test_stats.sh", content=TESTS),
                step("wheel", "sandbox.write", path=f"{WHEEL}.b64", content=wheel),
                step("installer", "sandbox.write", path="install.sh", content=INSTALL),
                step(
                    "install",
                    "sandbox.exec",
                    after=["wheel", "installer"],
                    argv=["sh", "-c", install],
                ),
                step(
                    "test",
                    "sandbox.exec_readonly",
                    after=["code", "tests", "install"],
                    argv=["sh", "app/test_stats.sh"],
                ),
                step("release", "release", after=["test"], version="1.0"),
            ]
        )

    def tested(ctx: Any) -> bool:
        test = ctx.results().get("test") or {}
        return bool(test.get("exit_code") == 0)

    def released(ctx: Any) -> bool:
        rel = ctx.results().get("release") or {}
        return bool(rel.get("exit_code") == 0)

    return Agent(
        WORKFLOW,
        goal="write a summing program, install tinycalc from its wheel, test it, release it",
        tools=tools,
        planner=CodePlanner(planner),
        criteria={"tests pass": tested, "released": released},
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.sandbox_agent")
    p.add_argument("--run-id", default="sandbox-agent-1", help="the run to start")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run instead of starting one")
    p.add_argument("--auto-approve", action="store_true", help="approve as this process's user")
    p.add_argument("--db", default=None, help="database URL (default: $TORPOR_DATABASE_URL)")
    args = p.parse_args(argv)
    run_id = args.resume or args.run_id
    sb = sandbox_for(run_id)
    agent = make_agent(sb)
    rt = torpor.Runtime(
        args.db, auto_approve=os.environ.get("USER", "you") if args.auto_approve else None
    )
    try:
        res = rt.resume(run_id) if args.resume else rt.run(agent, None, run_id=run_id)
    finally:
        rt.close()
    print(f"run {res.run_id}: {res.status} {res.outcome or ''} {res.reason or ''}".rstrip())
    if res.status == "waiting":
        print(f"asleep: {sb.workspace} (no VM process; its workspace is in the artifact store)")
        print(f"approve: uv run torpor approve {res.run_id} --as YOU   (see torpor keys init)")
        print(f"then:    uv run python -m examples.sandbox_agent --resume {res.run_id}")
    elif sb.running:
        sb.close()
    return 0 if res.outcome in (None, "succeeded") else 1


if __name__ == "__main__":
    sys.exit(main())
