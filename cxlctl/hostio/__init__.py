"""Host I/O: the one place that opens kernel and host files.

Everything cxlctl reads from or writes to the machine it manages goes through
this package, so that the rules for doing so are written once:

* :mod:`.paths` -- every sysfs/procfs/configuration path, defined once;
* :mod:`.root` -- ``--root`` handling: :func:`~.root.resolve_root` and the one
  mapper :func:`~.root.under` from a host path to the file under the root;
* :mod:`.reader` -- :class:`~.reader.Reader`, the tolerant, bounded,
  non-blocking reader that also records what a scan used (``cxlctl record``);
* :mod:`.objects` -- fresh reads of one object (a DAX device, its memory
  blocks, a knob) returning the model's own types, and onlining a block;
* :mod:`.write` -- the single knob write primitive and its error classes;
* :mod:`.lock` -- the tuning lock every knob writer holds;
* :mod:`.atomic` -- the one atomic file writer (journal, persisted settings,
  daemon output files);
* :mod:`.toml` -- the one TOML loader (profiles, daemon configuration);
* :mod:`.proc` -- facts about processes (capabilities, command names);
* :mod:`.cache` -- cxlctl's cache directory and whether root may use what is in it;
* :mod:`.tools` -- the one runner of external tools (timeouts, ``LC_ALL=C``,
  bounded output, one error type) and the one ``cxl list`` reader.

Nothing is imported here: each caller imports the submodule it needs, which
keeps ``cxlctl status`` from paying for the writers.
"""
