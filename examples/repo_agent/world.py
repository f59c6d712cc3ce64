"""Look at the outside world the agent changed: the remote's commits and the delivered mail.

Independent of torpor's records on purpose — this is how a person (or the kill test) checks
that a run that was killed and resumed many times still pushed once and emailed once::

    uv run python -m examples.repo_agent.world RUN_ID [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import effects
from .smtp import MailStore


def remote_commits_with_key(remote: str | Path, key: str) -> list[str]:
    """Every commit in any ref of ``remote`` whose message carries the key's trailer (none when
    the run has not created its remote yet)."""
    if not (Path(remote) / "HEAD").exists():
        return []
    out = effects.git(
        "log",
        "--all",
        "--fixed-strings",
        f"--grep={effects.TRAILER}: {key}",
        "--format=%H",
        git_dir=remote,
    ).stdout.split()
    return out


def push_log(remote: str | Path) -> list[tuple[str, str, str]]:
    """Ref updates of the default remote: (old, new, ref). From its reflogs, which git writes
    with each update (so a push whose pusher was killed before the post-receive hook ran is
    still there), and the hook's log (remotes made before reflogs were enabled)."""
    rows: list[tuple[str, str, str]] = []
    logs = Path(remote) / "logs"
    for f in sorted(logs.rglob("*")) if logs.is_dir() else ():
        if f.is_file() and f.relative_to(logs).parts[0] == "refs":
            ref = str(f.relative_to(logs))
            for line in f.read_text().splitlines():
                parts = line.split(maxsplit=2)
                if len(parts) >= 2:
                    rows.append((parts[0], parts[1], ref))
    hook = Path(remote) / "torpor-push.log"
    for line in hook.read_text().splitlines() if hook.exists() else ():
        parts = line.split()
        if len(parts) == 3 and (parts[0], parts[1], parts[2]) not in rows:
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def emails_with_key(maildir: str | Path, key: str) -> list[str]:
    """Delivered messages (file names) whose Message-ID is the one derived from ``key``."""
    mid = effects.message_id_for(key)
    return [m.path.name for m in MailStore(maildir).find(mid)]


def world_report(
    run_id: str, workdir: str | Path, remote: str | Path | None = None
) -> dict[str, Any]:
    """Counts of the run's effects as the world sees them."""
    root = Path(workdir)
    remote = remote or root / "remote.git"
    push_key, email_key = f"{run_id}/push", f"{run_id}/email"
    commits = remote_commits_with_key(remote, push_key)
    mails = emails_with_key(root / "mail", email_key)
    return {
        "run_id": run_id,
        "push_key": push_key,
        "commits_with_key": commits,
        "ref_updates_logged": [r for r in push_log(remote) if r[1] in commits],
        "email_key": email_key,
        "message_id": effects.message_id_for(email_key),
        "emails_with_message_id": mails,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.repo_agent.world")
    p.add_argument("run_id")
    p.add_argument("--workdir", help="default: $TORPOR_HOME/repo_agent/RUN_ID")
    p.add_argument("--remote", help="default: the workdir's remote.git")
    args = p.parse_args(argv)
    import torpor

    workdir = Path(args.workdir or torpor.Settings.from_env().home / "repo_agent" / args.run_id)
    if not workdir.is_dir():
        print(f"error: no work directory {workdir} for run {args.run_id!r}", file=sys.stderr)
        return 1
    try:
        report = world_report(args.run_id, workdir, args.remote)
    except Exception as exc:  # e.g. the run has not created its remote yet
        print(
            f"error: cannot read the outside world of run {args.run_id!r}: {exc}".splitlines()[0],
            file=sys.stderr,
        )
        return 1
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
