"""One report of a run: the data a person needs about it, gathered once, for every face that
shows a run — ``torpor show`` (text and ``--json``, :mod:`torpor.cli.read`) and the console's
run page (:mod:`torpor.console.pages`).

- :mod:`.run` — :func:`gather` reads a run through a :class:`~torpor.Client` into a typed
  :class:`RunReport` (its live part, polled by the console, is :class:`RunSummary`, from
  :func:`summarize`); :func:`lease_text` says what a run's lease means.
- :mod:`.past` — :func:`~.past.gather_at`: the same report as it was at one seq of the
  history (``torpor show --at``, issue 45).
- :mod:`.approvals` — who decided an approval and how that is known (G6), as lines of text.
- :mod:`.text` — how times are written.

Internal (``torpor._INTERNAL``): the faces render it; nothing here prints or builds HTML.
This package imports none of its modules, so the CLI's start pays only for what it uses.
"""
