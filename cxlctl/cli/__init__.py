"""The ``cxlctl`` command line: a thin layer over the engines (parse → call the engine → emit).

``app`` is the typer application and ``run(argv)`` runs it, returning the exit
code.  Module map: :mod:`.app` assembles the app; :mod:`.common` holds the
shared options, emitters, state and error mapping; one module per command
group (:mod:`.status`, :mod:`.record`, :mod:`.tune`, :mod:`.region`,
:mod:`.launch`, :mod:`.daemon`, :mod:`.shell`); :mod:`.params` the help-text
helpers.  What a command does after parsing is its package's (``commands.py``,
``ras/command.py``, ``regions/request.py``, ``launch/command.py``,
``tuning/command.py``, ``telemetry/live.py``).  ``status``, ``doctor --json`` and
``stat --json`` usually do not come here at all (the fast path in
:mod:`cxlctl.__main__`, same command functions, same error mapping).
"""

from __future__ import annotations

from .app import app, run

__all__ = ["app", "run"]
