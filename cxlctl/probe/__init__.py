"""Measured bandwidth and latency per (CPU node, memory node) pair: ``cxlctl probe``.

Firmware figures (HMAT, generic ports, CDAT) are often missing or wrong; the
probe measures what the memory does and stores it with what identifies the
host (boot id, kernel release, the memdev serials behind each node), so the
figures are used only while they still describe it.

* :mod:`.native`  — the inner loops: a C helper compiled on first use with the host's ``cc``.
* :mod:`.measure` — which pairs, what sizes, running the helper, per-pair results.
* :mod:`.store`   — the stored record (``/var/lib/cxlctl/probe.json``), staleness, per-node figures.
* :mod:`.view`    — the tables and JSON of ``probe`` and ``status``.

See docs/probe.md.
"""
