"""The agent's two external effects, each with the reconcile that asks the world what happened.

**git push** — the modernized tree is committed in a private git directory (deterministic: fixed
author, committer and date, so rebuilding it gives the same sha) and pushed to a remote — a
local bare repository by default. The commit message carries the trailer
``Torpor-Idempotency-Key: <key>``. :func:`reconcile_push` looks in the *remote* for a commit
with that trailer on the pushed branch: ``Applied(commit)`` or ``Absent()``; a remote that
cannot be asked gives ``Unknown`` (the run becomes ``unresolved``, never a blind retry).

**email** — a notification over SMTP whose Message-ID is derived from the idempotency key
(:func:`message_id_for`). :func:`reconcile_email` searches the SMTP server's persisted store for
that Message-ID.

torpor records the intent before each call and the observation after it; if the process dies in
between, the next execution reconciles instead of performing the effect again.
"""

from __future__ import annotations

import hashlib
import os
import smtplib
import subprocess
import tempfile
import time
from email.message import EmailMessage
from email.utils import formatdate
from pathlib import Path
from typing import Any

from torpor import Absent, Applied, EffectCall, Unknown

from .proc import run as run_child
from .smtp import MailStore

TRAILER = "Torpor-Idempotency-Key"
AUTHOR = ("torpor repo agent", "repo-agent@torpor.invalid")

# A post-receive hook for the default bare remote: one line per ref update, so a test (or a
# curious person) can count pushes that changed the remote.
_HOOK = """#!/bin/sh
while read old new ref; do
  echo "$old $new $ref" >> "$GIT_DIR/torpor-push.log"
done
"""


class GitError(RuntimeError):
    """A git command failed (its stderr is in the message)."""


def git(
    *args: str,
    git_dir: Path | str | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run git without any user or system configuration leaking in."""
    full_env = {
        k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k == "GIT_EXEC_PATH"
    }
    full_env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    full_env.update(env or {})
    cmd = ["git", "-c", "init.defaultBranch=main"]
    if git_dir is not None:
        cmd.append(f"--git-dir={git_dir}")
    proc = run_child(
        [*cmd, *args], env=full_env, input=input, capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise GitError(
            f"git {' '.join(args[:3])} failed ({proc.returncode}): {proc.stderr[-1500:]}"
        )
    return proc


def init_bare_remote(path: Path) -> str:
    """Create the default remote (a bare repository with a push-log hook) if it is missing."""
    if not (path / "HEAD").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--bare", "-q", str(path))
        # A reflog of every ref update, written by git with the update itself: the push's
        # trace survives a pusher killed before the post-receive hook ran.
        git("config", "core.logAllRefUpdates", "always", git_dir=path)
    hook = path / "hooks" / "post-receive"
    if not hook.exists():
        hook.parent.mkdir(parents=True, exist_ok=True)
        hook.write_text(_HOOK)
        hook.chmod(0o755)
    return str(path)


def _commit_env(when: int, index: Path) -> dict[str, str]:
    stamp = f"{when} +0000"
    return {
        "GIT_AUTHOR_NAME": AUTHOR[0],
        "GIT_AUTHOR_EMAIL": AUTHOR[1],
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_NAME": AUTHOR[0],
        "GIT_COMMITTER_EMAIL": AUTHOR[1],
        "GIT_COMMITTER_DATE": stamp,
        "GIT_INDEX_FILE": str(index),
    }


def _write_tree(git_dir: Path, root: Path, paths: list[str], env: dict[str, str]) -> str:
    index = Path(env["GIT_INDEX_FILE"])
    index.unlink(missing_ok=True)
    git(
        f"--work-tree={root}",
        "add",
        "-f",
        "--pathspec-from-file=-",
        "--pathspec-file-nul",
        git_dir=git_dir,
        env=env,
        input="\0".join(paths),
    )
    return git("write-tree", git_dir=git_dir, env=env).stdout.strip()


def build_commits(
    git_dir: str,
    pristine: str,
    tree: str,
    paths: list[str],
    expected: dict[str, str],
    branch: str,
    message: str,
    baseline_message: str,
    when: int,
) -> dict[str, str]:
    """Commit the pristine copy (baseline) and the modernized tree on top of it.

    Deterministic: same content, messages and ``when`` give the same shas, so rebuilding after a
    crash changes nothing. Refuses if a modernized file no longer has the hash verified and
    approved (``expected``): the commit carries exactly the approved content.
    """
    gd, tree_p = Path(git_dir), Path(tree)
    for path, digest in expected.items():
        actual = hashlib.sha256((tree_p / path).read_bytes()).hexdigest()
        if actual != digest:
            raise RuntimeError(
                f"{tree_p / path} has sha256 {actual[:12]}, not the approved {digest[:12]}"
            )
    if not (gd / "HEAD").exists():
        git("init", "--bare", "-q", str(gd))
    with tempfile.TemporaryDirectory(prefix="torpor-git-") as tmp:
        env = _commit_env(when, Path(tmp) / "index")
        base_tree = _write_tree(gd, Path(pristine), paths, env)
        baseline = git(
            "commit-tree", base_tree, "-F", "-", git_dir=gd, env=env, input=baseline_message
        ).stdout.strip()
        new_tree = _write_tree(gd, tree_p, paths, env)
        commit = git(
            "commit-tree", new_tree, "-p", baseline, "-F", "-", git_dir=gd, env=env, input=message
        ).stdout.strip()
    # A local branch for people looking around; not needed by the push (it names the sha), so
    # a concurrent writer (an orphan of a killed process) holding the ref lock is not an error.
    git("update-ref", f"refs/heads/{branch}", commit, git_dir=gd, check=False)
    return {"baseline": baseline, "commit": commit, "tree": new_tree, "branch": branch}


def commit_message(subject: str, body: str, trailers: dict[str, str]) -> str:
    lines = [subject, "", body.strip(), ""]
    lines += [f"{k}: {v}" for k, v in trailers.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ effect: git push


def push_commit(
    git_dir: str, remote: str, commit: str, branch: str, *, idempotency_key: str
) -> dict[str, Any]:
    """Push ``commit`` to ``remote`` as ``refs/heads/<branch>`` (the effect)."""
    msg = git("log", "-1", "--format=%B", commit, git_dir=git_dir).stdout
    if f"{TRAILER}: {idempotency_key}" not in msg:
        raise RuntimeError(f"commit {commit[:12]} does not carry {TRAILER}: {idempotency_key}")
    git("push", "--porcelain", remote, f"{commit}:refs/heads/{branch}", git_dir=git_dir)
    return {"commit": commit, "remote": remote, "branch": branch, "via": "push"}


def find_pushed_commit(git_dir: str, remote: str, branch: str, key: str) -> str | None:
    """The commit on the remote's ``branch`` whose message has the key's trailer, or None.

    Raises GitError when the remote cannot be asked (that is *unknown*, not *absent*).
    """
    ref = f"refs/heads/{branch}"
    ls = git("ls-remote", "--exit-code", remote, ref, git_dir=git_dir, check=False)
    if ls.returncode == 2:
        return None  # the remote has no such branch: nothing was pushed to it
    if ls.returncode != 0:
        raise GitError(f"cannot list {remote}: {ls.stderr.strip()[-500:]}")
    check_ref = f"refs/torpor/reconcile/{branch}"
    git(
        "fetch",
        "-q",
        "--no-tags",
        "--no-write-fetch-head",
        remote,
        f"+{ref}:{check_ref}",
        git_dir=git_dir,
    )
    out = git(
        "log",
        check_ref,
        "--fixed-strings",
        f"--grep={TRAILER}: {key}",
        "--format=%H",
        git_dir=git_dir,
    ).stdout.split()
    return out[0] if out else None


def reconcile_push(call: EffectCall) -> Applied | Absent | Unknown:
    """Ask the remote whether the push happened (by the idempotency-key trailer)."""
    git_dir, remote, _commit, branch = call.args
    for attempt in range(3):
        try:
            found = find_pushed_commit(git_dir, remote, branch, call.idempotency_key)
            break
        except GitError as exc:  # a lock held by a dying process, a flaky remote: ask again
            if attempt == 2:
                return Unknown(f"the remote could not be asked: {exc}")
            time.sleep(0.5 * (attempt + 1))
    if found is None:
        return Absent()
    return Applied({"commit": found, "remote": remote, "branch": branch, "via": "reconcile"})


# ------------------------------------------------------------------ effect: email


def message_id_for(key: str) -> str:
    """The Message-ID derived from an idempotency key (the same key gives the same id)."""
    return f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@repo-agent.torpor.invalid>"


def send_email(
    host: str,
    port: int,
    sender: str,
    to: str,
    subject: str,
    body: str,
    *,
    idempotency_key: str,
) -> dict[str, Any]:
    """Send the notification (the effect). Its Message-ID carries the idempotency key."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=False)
    msg["Message-ID"] = message_id_for(idempotency_key)
    msg["X-Torpor-Idempotency-Key"] = idempotency_key
    msg.set_content(body)
    with smtplib.SMTP(host, port, timeout=30) as s:
        refused = s.send_message(msg)
    if refused:
        raise RuntimeError(f"the SMTP server refused {sorted(refused)}")
    return {"message_id": msg["Message-ID"], "to": to, "server": f"{host}:{port}", "via": "smtp"}


def reconcile_email(maildir: str, call: EffectCall) -> Applied | Absent | Unknown:
    """Search the SMTP server's persisted messages for the key's Message-ID."""
    mid = message_id_for(call.idempotency_key)
    try:
        found = MailStore(maildir).find(mid)
    except OSError as exc:
        return Unknown(f"the mail store {maildir} could not be read: {exc}")
    if not found:
        return Absent()
    return Applied(
        {
            "message_id": mid,
            "to": ", ".join(found[0].rcpt_to),
            "stored": found[0].path.name,
            "via": "reconcile",
        }
    )
