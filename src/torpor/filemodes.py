"""Files torpor trusts must not be writable by anyone else (issue 34, item 4).

The keyring decides who may approve (G6), so a keyring file or folder that another user can
write is refused the way OpenSSH's ``StrictModes`` refuses a loose ``authorized_keys``
(``sshd(8)``): the file and the folder holding it must be owned by the current user or by root
and not writable by group or others. A folder with the sticky bit (``/tmp``, mode 1777) is
accepted: others may add files there but cannot replace or remove this one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import KeyringError

__all__ = ["check_private"]


def check_private(path: Path, what: str) -> None:
    """Refuse ``path`` (a file that exists) when it or its folder is loose: KeyringError with
    one line naming the path, its mode or owner, and the command that fixes it."""
    me = os.geteuid()
    file_st = path.stat()
    _check(path, file_st, what, me, folder=False)
    folder = path.resolve().parent
    _check(folder, folder.stat(), f"the folder of {what}", me, folder=True)


def _check(path: Path, st: os.stat_result, what: str, me: int, *, folder: bool) -> None:
    if st.st_uid not in (me, 0):
        raise KeyringError(
            f"{what} {path} is owned by uid {st.st_uid}, not by you (uid {me}) or root; whoever "
            f"owns it could make themselves an approver, so torpor refuses it: "
            f"fix: chown {me} {path} && chmod go-w {path}"
        )
    loose = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose and not (folder and st.st_mode & stat.S_ISVTX):
        who = "others" if loose & stat.S_IWOTH else "its group"
        raise KeyringError(
            f"{what} {path} is writable by {who} "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); whoever can write it could make themselves "
            f"an approver, so torpor refuses it (as ssh refuses a loose authorized_keys): "
            f"fix: chmod go-w {path}"
        )
