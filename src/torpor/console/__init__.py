"""``torpor console``: see and steer runs in a browser.

A small server-rendered app over :class:`~torpor.Client` (Starlette + Jinja2 + htmx, served by
uvicorn, bound to loopback by default), installed with ``pip install 'torpor[console]'`` and
imported only by the ``torpor console`` command: ``import torpor`` and the rest of the CLI never
load it.

Pages: the runs list (filters by status, outcome, workflow, waiting for a person, needs
attention; counts per status and outcome; refreshed by htmx polling every few seconds — polling,
not server-sent events: a GET of a small fragment works through any proxy and holds no
connection); a run (the latest checkpoint's four answers, steps with their attempts, effects
with their reconcile verdicts, waits with deadlines, approvals, artifacts with hash, size and
content — a diff view for patches —, messages with their dispositions, storage used, an
agent's plan and budget, and the history as a timeline); an approval under review (the exact
content it binds, in full, with its hashes); an artifact; the events.

Actions — approve / deny (signed by the console's delegate key for the logged-in person, on
exactly the hashes the page showed: refused when the content changed since), revoke, resolve
an effect in doubt, cancel, signal, raise a budget, retry a parked run — each recorded with the
person who took it (:mod:`.actions`). Security model: :mod:`.app`.

Modules: :mod:`.users` (the users file, scrypt hashes), :mod:`.sessions` (sessions, CSRF,
login throttle), :mod:`.views` (pure derivations from a history), :mod:`.pages` (page data
through the Client), :mod:`.actions` (steering), :mod:`.app` (guards, rendering), :mod:`.routes`
(handlers), :mod:`.server` (assembly, uvicorn); ``templates/`` and ``static/`` (htmx 2.0.11,
vendored: no CDN at run time).
"""
