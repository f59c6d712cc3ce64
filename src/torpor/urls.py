"""Store URLs as they may be shown: :func:`display_url` is the one helper every message, log
line and page that names a database goes through, so a password in a URL is never printed
(DESIGN.md G12)."""

from __future__ import annotations

import re
import urllib.parse

_QUERY_SECRET = re.compile(r"(?i)((?:^|[?&;\s])(?:password|passwd|pass|sslpassword)=)[^&;\s]*")


def display_url(url: str) -> str:
    """``url`` with any password replaced by ``***``: in the netloc (``user:PASS@host``) and in
    ``password=`` query parameters or libpq ``key=value`` words. Other text is unchanged."""
    text = _QUERY_SECRET.sub(r"\1***", url)
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError:
        password = None
    if password:
        host = parts.netloc.rsplit("@", 1)
        user = host[0].split(":", 1)[0]
        text = urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host[1]}"))
    return text
