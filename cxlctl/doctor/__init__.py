"""``cxlctl doctor``: why CXL memory is missing, slow or misplaced.

Operators rarely ask "what is there" (``cxlctl status``) but "why not": the
expander is visible but no node appeared, the memory came up in ZONE_MOVABLE
and the engine's pinned buffers went elsewhere, every node sits in one memory
tier.  The answer is somewhere in a chain from firmware to the inference
engine, so doctor walks that chain layer by layer.

Two halves, kept apart so tests run the checks on recorded trees:

* :mod:`.gather` reads everything once, through :class:`~cxlctl.hostio.reader.Reader`
  (so ``cxlctl record`` copies it and a bug report replays doctor), reusing the
  inventory scan, the tuning engine's status and the launcher's plan, and runs
  the tools (``cxl``, ``daxctl``, ``numactl``, ``systemctl``) through one
  injectable function (:mod:`.probes`);
* the layer modules (:mod:`.kernel`, :mod:`.devices`, :mod:`.services`,
  :mod:`.inference`) are pure functions of those :class:`~.model.Facts`,
  each returning :class:`~.model.Check` results with their evidence and fix.

:mod:`.report` runs them in layer order, decides the exit code and renders.
"""
