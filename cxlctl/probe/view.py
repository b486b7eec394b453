"""The probe's figures as JSON: in ``probe --json`` and ``status --json``'s ``measured``."""

from __future__ import annotations

from typing import Any, Dict

from .store import Stored


def measured_json(stored: Stored) -> Dict[str, Any]:
    """The stored record's figures, whether they are stale (and why), and per memory node the
    figures cxlctl uses (its nearest CPU node's; ``bandwidth_mbps`` = min(read, write))."""
    doc = stored.record
    return {
        "measured_at": doc.get("measured_at"),
        "stale": list(stored.stale),
        "pairs": doc.get("pairs") if isinstance(doc.get("pairs"), list) else [],
        "skipped": doc.get("skipped") if isinstance(doc.get("skipped"), list) else [],
        "nodes": [
            {
                "node": f.mem_node,
                "cpu_node": f.cpu_node,
                "read_mbps": f.read_mbps,
                "write_mbps": f.write_mbps,
                "latency_ns": f.latency_ns,
                "bandwidth_mbps": f.bandwidth,
            }
            for _, f in sorted(stored.figures.items())
        ],
    }
