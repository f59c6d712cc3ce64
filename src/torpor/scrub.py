"""One scrubber for every encoding of a secret, and the registry of the places it guards (G12).

A :data:`torpor.Secret` a tool or a model echoes is rarely echoed as it is: a URL carries it
percent-encoded (``%2B``, ``%2F``, ``%3D``, in either case of hex digit), JSON escapes its
quotes, backslashes and non-ASCII letters, ``repr`` escapes them another way, and an
``Authorization: Basic`` header or a data URL carries it in base64 — at one of three alignments,
depending on how many bytes come before it. :func:`encodings` lists every such form of a value
(and each form JSON-escaped once more, as it reads inside stored JSON text); a
:class:`Scrubber` replaces all of them, longest first, in one pass over each string of some
JSON data.

The base64 forms are the *core* of each alignment: the characters that depend on the secret's
bytes alone (``6*i >= 8*k`` and ``6*i + 6 <= 8*(k + n)`` for ``k`` bytes before it and ``n``
of its own), in the standard and the URL-safe alphabets — so a secret inside a longer base64
text is found whatever came before it. A form shorter than :data:`MIN_FORM` characters is not
looked for (it would match unrelated text).

**Sinks.** Every place torpor writes what a run produced — the journal (event payloads,
checkpoints, inbox messages as stored), telemetry (span status, attributes, exception events),
memory (the context a model is given and ``torpor context`` prints), episodes, log records, the
CLI's and the console's output — is a :class:`Sink` registered here with :func:`sink`, and
scrubs with the secrets this process knows (:func:`remember`, called by the agent's vault for
each secret of at least :data:`PROCESS_MIN_LEN` characters). The secrets are reachable only
through a registered sink: a module that writes somewhere new registers its sink (``sink("ledger",
"...")``) and calls it; ``tests/test_secret_encodings.py`` enumerates :func:`sinks` and fails for
a registered sink it has no probe for, and for a probe whose sink is gone. With no secret
known, a sink returns its input unchanged at the cost of one check. The secrets a process
learns are kept for its life (a worker that meets many distinct secrets keeps them all: a sink
cannot forget one safely).

What the journal sink changes is what is stored: a value a workflow recorded outside an
agent's vault that holds a known secret is stored with the marker, so a run resumed from the
record sees the marker, not the secret (the price of G12).
"""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = [
    "MIN_FORM",
    "PROCESS_MIN_LEN",
    "Scrubber",
    "Sink",
    "encodings",
    "remember",
    "sink",
    "sinks",
]

#: Forms shorter than this are not looked for (they would match unrelated text).
MIN_FORM = 4

#: Secrets shorter than this are scrubbed only from what their run's vault sees (the agent's
#: tool results, errors, model text), not by every sink of the process: a short value such as
#: ``prod`` would rewrite unrelated records (step ids, names) of every run.
PROCESS_MIN_LEN = 8

_HEX = re.compile(r"%[0-9A-F]{2}")


def _b64_cores(raw: bytes) -> set[str]:
    out: set[str] = set()
    n = len(raw)
    for k in range(3):
        first = -(-8 * k // 6)  # ceil
        last = (8 * (k + n)) // 6  # exclusive
        if last - first < MIN_FORM + 2:
            continue
        padded = b"\0" * k + raw
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            out.add(enc(padded).decode("ascii")[first:last])
    return out


def encodings(value: str) -> list[str]:
    """Every form of ``value`` a sink looks for, longest first: the value itself;
    percent-encoded (``quote`` with and without ``/`` safe, ``quote_plus``, upper- and
    lower-case hex); JSON-escaped (ASCII-only and not); ``repr``'d and ``ascii``'d (inside the
    quotes); the base64 cores at the three alignments (standard and URL-safe alphabets); and
    each of those JSON-escaped once more (how it reads inside stored JSON text)."""
    forms = {value}
    for q in (quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, safe="")):
        forms.add(q)
        forms.add(_HEX.sub(lambda m: m.group().lower(), q))
    forms.add(json.dumps(value)[1:-1])
    forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
    forms.add(repr(value)[1:-1])
    forms.add(ascii(value)[1:-1])
    forms |= _b64_cores(value.encode())
    forms |= {json.dumps(f)[1:-1] for f in list(forms)}
    forms |= {json.dumps(f, ensure_ascii=False)[1:-1] for f in list(forms)}
    return sorted((f for f in forms if len(f) >= MIN_FORM), key=lambda f: (-len(f), f))


@dataclass(frozen=True)
class Scrubber:
    """Replaces every form (:func:`encodings`) of each secret in ``pairs`` — ``(value,
    marker)`` — by its marker in JSON data (strings, and the strings inside lists and dicts,
    keys too); anything else is returned as it is. Picklable (an attempt in a child process
    takes one along)."""

    pairs: tuple[tuple[str, str], ...] = ()
    _pattern: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _marker: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.pairs:
            return
        marker: dict[str, str] = {}
        for value, mark in self.pairs:
            for form in encodings(value):
                marker.setdefault(form, mark)
        forms = sorted(marker, key=lambda f: (-len(f), f))
        object.__setattr__(self, "_marker", marker)
        object.__setattr__(self, "_pattern", re.compile("|".join(map(re.escape, forms))))

    @property
    def longest(self) -> int:
        """The length of the longest form looked for (0: no secret): a text cut anywhere
        keeps every form whole if this many characters less one are held back from the cut
        (:class:`torpor.streams.HoldBack`)."""
        return max(map(len, self._marker), default=0)

    def spans(self, s: str) -> list[tuple[int, int]]:
        """``(start, end)`` of each form of a secret found in ``s``, left to right, as
        :meth:`text` replaces them."""
        if self._pattern is None:
            return []
        return [m.span() for m in self._pattern.finditer(s)]

    def __add__(self, other: Scrubber) -> Scrubber:
        """One scrubber for the secrets of both."""
        if not other.pairs:
            return self
        if not self.pairs:
            return other
        return Scrubber(tuple(dict.fromkeys(self.pairs + other.pairs)))

    def text(self, s: str) -> str:
        """``s`` with every form of every secret replaced by its marker."""
        if self._pattern is None:
            return s
        return self._pattern.sub(lambda m: self._marker[m.group()], s)

    def __call__(self, data: Any) -> Any:
        if self._pattern is None:
            return data
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, list):
            return [self(x) for x in data]
        if isinstance(data, tuple):
            return tuple(self(x) for x in data)
        if isinstance(data, dict):
            return {self(k): self(v) for k, v in data.items()}
        return data


# ------------------------------------------------------------------ the process's secrets

_lock = threading.Lock()
_known: dict[str, str] = {}
_current = Scrubber()


def remember(value: str, marker: str) -> None:
    """Make every registered sink of this process scrub ``value`` (replaced by ``marker``)
    from now on. Values shorter than :data:`PROCESS_MIN_LEN` are ignored (see there)."""
    global _current
    if len(value) < PROCESS_MIN_LEN or value in _known:
        return
    with _lock:
        if value in _known:
            return
        first = not _known
        _known[value] = marker
        _current = Scrubber(tuple(_known.items()))
    if first:
        _guard_log_records()


@dataclass(frozen=True)
class Sink:
    """A place torpor writes to, registered with :func:`sink`: calling it returns JSON data
    (or a string) with every form of every secret this process knows replaced by its
    marker."""

    name: str
    where: str

    @property
    def active(self) -> bool:
        """Whether this process knows any secret (else the sink returns its input)."""
        return bool(_current.pairs)

    def __call__(self, data: Any) -> Any:
        scrub = _current
        return scrub(data) if scrub.pairs else data

    def text(self, s: str) -> str:
        scrub = _current
        return scrub.text(s) if scrub.pairs else s

    def scrubber(self) -> Scrubber:
        """The :class:`Scrubber` of the secrets this process knows now."""
        return _current


_SINKS: dict[str, Sink] = {}


def sink(name: str, where: str) -> Sink:
    """Register (once; the same name again returns the first) and return the sink ``name``,
    described by ``where`` (what it writes, and which module)."""
    with _lock:
        found = _SINKS.get(name)
        if found is None:
            found = _SINKS[name] = Sink(name, where)
        return found


def sinks() -> dict[str, Sink]:
    """The registered sinks by name (those of the modules imported so far)."""
    with _lock:
        return dict(_SINKS)


LOGS = sink("logs", "every log record of this process (torpor's and others'): torpor.scrub")


def _guard_log_records() -> None:
    """Install, once the first secret is known, a log record factory that scrubs each record's
    message (the :data:`LOGS` sink); the factory installed before it still makes the record."""
    made = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = made(*args, **kwargs)
        if _current.pairs:
            try:
                message = record.getMessage()
            except Exception:  # a malformed record stays as logging would show it
                return record
            clean = LOGS.text(message)
            if clean != message:
                record.msg, record.args = clean, ()
            if record.exc_info and not record.exc_text:
                record.exc_text = LOGS.text(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
