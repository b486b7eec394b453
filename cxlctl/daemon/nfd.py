"""Kubernetes Node Feature Discovery labels: the ``features.d/cxlctl`` feature file.

Why a file: NFD's ``local`` source reads every file in
``/etc/kubernetes/node-feature-discovery/features.d/`` (``key=value`` lines,
``#`` comments) on each discovery pass and turns them into node labels, so a
scheduler can place memory-hungry inference pods on nodes with CXL capacity
(``nodeSelector``/affinity on ``feature.node.kubernetes.io/cxl.present``).
No Kubernetes API access, no credentials.

Rules honoured here (NFD's customization guide): names carry an explicit
namespace (unprefixed names are deprecated), ``feature.node.kubernetes.io`` is
allowed by nfd-master without flags, the file stays under 64 kB, and label
*values* follow Kubernetes' rules — at most 63 characters of ``[A-Za-z0-9_.-]``
starting and ending alphanumeric — so node id lists use ``_`` rather than
commas.  A ``# +expiry-time=`` directive (RFC 3339) makes the labels lapse if
the daemon stops refreshing the file (it rewrites it on every rescan).  The
temporary file is a dot-file, which NFD skips, then renamed into place.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Dict, Optional

from cxlctl.hostio.atomic import atomic_write
from cxlctl.model import Inventory

FILE_NAME = "cxlctl"
GIB = 1 << 30
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def valid_value(v: str) -> bool:
    return len(v) <= 63 and _VALUE.match(v) is not None


def _gib(n: int) -> str:
    return str(n // GIB)


def labels(inv: Inventory, profile: Optional[str], namespace: str = "feature.node.kubernetes.io") -> Dict[str, str]:
    """Label name → value for ``inv`` (pure; values always valid Kubernetes label values)."""
    cxl = sorted(n.id for n in inv.nodes if n.kind == "cxl" and n.has_memory)
    ns = namespace + "/"
    t = inv.totals
    out: Dict[str, str] = {
        "cxl.present": "true" if inv.has_cxl else "false",
        "cxl.memdevs": str(len(inv.memdevs)),
        "cxl.capacity-gib": _gib(t.cxl_capacity),
        "cxl.online-gib": _gib(t.cxl_online),
        "cxl.free-gib": _gib(t.cxl_free),
        "cxl.numa-nodes": "_".join(str(i) for i in cxl) if cxl else "none",
        "cxl.numa-node-count": str(len(cxl)),
    }
    dram_tiers = {n.tier for n in inv.nodes if n.kind == "dram" and n.tier is not None}
    cxl_tiers = {n.tier for n in inv.nodes if n.kind == "cxl" and n.has_memory and n.tier is not None}
    if cxl:
        # tiering (demotion/promotion) needs CXL in a lower tier than DRAM (HMAT/CDAT data)
        out["cxl.separate-tier"] = "true" if cxl_tiers and not (cxl_tiers & dram_tiers) else "false"
    out["cxl.weighted-interleave"] = "true" if inv.weighted_interleave.supported else "false"
    if profile and valid_value(profile):
        out["cxl.profile"] = profile
    result = {ns + k: v for k, v in out.items() if valid_value(v)}
    return result


def render(lbls: Dict[str, str], expiry: Optional[datetime.datetime] = None) -> str:
    lines = ["# Written by the cxlctl daemon (docs/daemon.md); rewritten on every rescan. Do not edit."]
    if expiry is not None:
        ts = expiry.astimezone(datetime.timezone.utc).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"# +expiry-time={ts}")
    lines += [f"{k}={v}" for k, v in sorted(lbls.items())]
    return "\n".join(lines) + "\n"


def write(directory: str, text: str) -> str:
    """Atomically replace ``directory/cxlctl`` (NFD skips the hidden temporary file)."""
    return atomic_write(os.path.join(directory, FILE_NAME), text, mode=0o644, sync_dir=False)


def expiry_after(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
