"""The tuning engine: profiles → a pure plan → a journaled, transactional apply.

Layout (each module says why it exists):

* :mod:`.profile`  — TOML profiles, ``include`` inheritance, strict validation.
* :mod:`.knobs`    — the knob registry (one entry per kernel setting) and reads of
  the current values.
* :mod:`.weights`  — weighted-interleave weights from bandwidth or a ratio.
* :mod:`.plan`     — ``plan(inventory, profile, current)``: pure, no I/O.
* :mod:`.write`    — the single function that writes a knob, and errno classes.
* :mod:`.journal`  — the write-ahead journal under ``/run/cxlctl``.
* :mod:`.lock`     — the flock shared by the CLI and the daemon.
* :mod:`.conflicts` — TuneD and sysctl.d files that set the same keys.
* :mod:`.state`    — which journal is in effect this boot (the one "applied?" check).
* :mod:`.transaction` — ``Transaction(host, profile, inventory=…)``: the plan,
  ``commit()`` in named phases, ``rollback()``.
* :mod:`.trial`    — ``tune try``: the confirmation wait, ``confirm``, and reverting
  an expired try before anything else.
* :mod:`.results`  — the typed results every entry point returns.
* :mod:`.engine`   — prepare / apply / verify / revert / status by profile reference.
* :mod:`.tune_json` — the ``cxlctl tune … --json`` documents, shaped in one place.

Nothing here imports rich, typer or psutil; the CLI (``cxlctl.cli.tune``) renders.
"""
