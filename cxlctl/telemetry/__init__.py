"""Tiering telemetry: what the kernel counts about promotion, demotion and placement.

Why a package of its own: ``cxlctl stat``, ``cxlctl top``, ``cxlctl record`` and
the daemon's metrics all need the same counters, read the same way and judged
the same way.  The pieces, from the kernel outwards:

* :mod:`.counters` -- which counters matter and the pure parsers of the
  kernel's ``name value`` files, ``meminfo``, ``memory.numa_stat`` and
  ``numa_maps``;
* :mod:`.sample` -- one :class:`~.sample.Sample` of the host, read through
  :class:`cxlctl.hostio.reader.Reader` (so ``--root`` trees and ``cxlctl
  record`` work): per node, system-wide, per cgroup, per process;
* :mod:`.rates` -- per-second rates, a pure function of two samples;
* :mod:`.sampler` -- the one sampling loop (sample, wait, sample, rates) that
  ``stat``, ``top`` and the daemon share;
* :mod:`.verdicts` -- the explained findings (tiering off, DRAM too tight, ...),
  pure functions of a sample and its rates;
* :mod:`.report` -- the ``stat`` JSON document and its 80-column text.

A counter the running kernel does not have is ``None`` and listed as missing
("not available on this kernel"), never 0: an operator must be able to tell
"nothing happened" from "this kernel cannot say".
"""
