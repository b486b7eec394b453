"""Weighted-interleave weights for a launch, set through the tuning engine.

The weights (``/sys/kernel/mm/mempolicy/weighted_interleave/nodeN``) are
system-wide on upstream kernels: every process with a weighted-interleave
policy allocates by them, from the next page on.  So the launcher does not
write them itself; it hands the tuning engine a one-knob profile and lets
the transaction's ``commit()`` do what it does for every knob — save the originals in the
journal first, write through ``write_knob``, read back, roll back on failure —
which makes ``cxlctl tune revert`` undo a launch's weights like any profile's.

The profile (``launch-weights``) is built in memory
(:func:`cxlctl.tuning.profile.from_data`) and handed to a tuning
:class:`~cxlctl.tuning.transaction.Transaction`: no file is written to pass it.
The journal keeps its document, so the daemon can rebuild it and a later launch
can see what it included.  It includes the profile in effect, if any, so applying
it changes only the weights: applying a profile that left out the active
profile's knobs would restore those knobs (the engine's switch semantics).

Weights come from ``--ratio D:C`` (every DRAM node D, every CXL node C,
reduced by their gcd: :func:`cxlctl.tuning.weights.ratio_weights`) or from
bandwidth (HMAT/CDAT, :func:`cxlctl.tuning.weights.reduce_weights`; the
kernel's own auto mode when it has one).  Without bandwidth data and without
``--ratio`` the weights in effect are used as they are, and the launcher says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import pids
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, is_decimal

from .nodesets import NodeSets

if TYPE_CHECKING:
    from cxlctl.tuning.transaction import Transaction

PROFILE_NAME = "launch-weights"
PROFILE_SOURCE = "cxlctl launch (built in memory)"  # labels the profile in messages and the journal
KNOB = "weighted_interleave"


class WeightPlan(NamedTuple):
    source: str  # ratio | bandwidth | kernel-auto | current
    nodes: Tuple[int, ...]
    weights: Dict[int, int]  # node → weight in effect for the launch (after the change); {}: the kernel's
    # auto mode computes them when the apply switches auto on (read back then)
    current: Dict[int, int]  # node → weight now
    changes: Tuple[Tuple[str, Optional[str], Optional[str]], ...]  # (setting, now, wanted) the apply writes
    transaction: Optional[Transaction]  # the planned launch profile; None: nothing to apply
    base: Optional[str]  # the active profile included
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]

    @property
    def writes(self) -> bool:
        return self.transaction is not None and bool(self.changes)


def active_base(host: Host) -> Optional[str]:
    """The source of the profile in effect this boot (what the launch profile includes)."""
    from cxlctl.tuning.state import applied_journal

    j = applied_journal(host)
    if j is None:
        return None
    if j.profile == PROFILE_NAME or j.profile_data is not None:
        # an earlier launch's profile: include what it included
        inc = (j.profile_data or {}).get("include")
        return inc if isinstance(inc, str) and inc else None
    return j.profile_source or None


def profile_data(nodes: Sequence[int], ratio: Optional[Tuple[int, int]], base: Optional[str]) -> Dict[str, Any]:
    """The launch profile's document (what a TOML profile file would hold)."""
    how = f"--ratio {ratio[0]}:{ratio[1]}" if ratio else "bandwidth"
    data: Dict[str, Any] = {"summary": "weighted-interleave weights set by cxlctl launch"}
    if base:
        data["include"] = base
    data["placement"] = "weighted-interleave"
    data["knobs"] = {
        KNOB: {
            "weights": f"{ratio[0]}:{ratio[1]}" if ratio else "bandwidth",
            "nodes": list(nodes),
            "prefer_auto": True,
            "reason": f"cxlctl launch: {how} over node(s) {format_nodelist(nodes)}",
        }
    }
    return data


def _current(host: Host) -> Dict[int, int]:
    from cxlctl.tuning.knobs import read_current

    cur = read_current(host)
    out = {}
    for n, p in cur.wi_node_paths().items():
        v = (cur.get(p) or "").strip()
        if is_decimal(v):
            out[n] = int(v)
    return out


def _check_ratio_nodes(ns: NodeSets, nodes: Sequence[int]) -> None:
    """``--ratio D:C`` weights DRAM and CXL nodes: the memory set must hold both, and nothing else."""
    if ns.other and any(n in ns.other for n in nodes):
        raise UsageError(
            f"--ratio: node(s) {format_nodelist([n for n in nodes if n in ns.other])} are neither DRAM nor CXL",
            hint="a DRAM:CXL ratio weights DRAM and CXL nodes only; pick --mem-nodes accordingly",
        )
    if not any(n in ns.cxl for n in nodes) or not any(n in ns.dram for n in nodes):
        raise UsageError(
            f"--ratio needs DRAM and CXL nodes in the memory set (have {format_nodelist(nodes)})",
            hint="add a CXL node to --mem-nodes (cxlctl status lists them), or leave out --ratio",
        )


def plan(
    host: Host, inv: Inventory, ns: NodeSets, nodes: Sequence[int], ratio: Optional[Tuple[int, int]]
) -> WeightPlan:
    """What the weights will be and what the tuning engine would write (no writes)."""
    from cxlctl.tuning.profile import from_data
    from cxlctl.tuning.transaction import Transaction

    nodes = tuple(sorted(nodes))
    notes: List[str] = []
    warnings: List[str] = []
    if ratio is not None:
        _check_ratio_nodes(ns, nodes)
    current = _current(host)
    missing = [n for n in nodes if n not in current]
    if missing:
        raise CxlctlError(
            f"no weighted-interleave weight file for node(s) {format_nodelist(missing)}",
            hint="the kernel lists weights for nodes with memory; check cxlctl status",
        )
    base = active_base(host)
    txn = Transaction(
        host, from_data(host, PROFILE_NAME, profile_data(nodes, ratio, base), PROFILE_SOURCE), inventory=inv
    )
    prep = txn.prepared
    steps = [s for s in prep.plan.steps if s.knob == KNOB]
    others = [s for s in prep.plan.steps if s.knob != KNOB and s.action in ("set", "restore")]
    skip = [s for s in steps if s.action in ("skip", "unsupported")]
    if skip:
        why = skip[0].note.replace(
            'give a ratio instead, e.g. weights = "3:1"', "pass --ratio DRAM:CXL, e.g. --ratio 3:1"
        )
        if skip[0].action == "unsupported":
            return WeightPlan("current", nodes, {n: current[n] for n in nodes}, current, (), None, base, (), (why,))
        cur = {n: current[n] for n in nodes}
        notes.append(
            f"weights not changed: {why}; using the weights in effect now ("
            + " ".join(f"node{n}={w}" for n, w in sorted(cur.items()))
            + ")"
        )
        return WeightPlan("current", nodes, cur, current, (), None, base, tuple(notes), tuple(warnings))
    changes = tuple((s.setting, s.current, s.desired) for s in steps + others if s.action in ("set", "restore"))
    wanted = dict(current)
    auto = switching_auto_on = False
    for s in steps:
        name = s.setting.rsplit(".", 1)[-1]
        if name.startswith("node") and is_decimal(name[4:]) and s.desired is not None and is_decimal(s.desired):
            wanted[int(name[4:])] = int(s.desired)
        if name == "auto" and s.desired == "true":
            auto = True
            switching_auto_on = (s.current or "").strip() != "true"
    source = "ratio" if ratio else ("kernel-auto" if auto else "bandwidth")
    if switching_auto_on:
        # the weight files hold the manual weights until the kernel recomputes them as auto goes
        # on: naming those (or cxlctl's own figures) as the launch's weights would be wrong (the
        # HMAT guest: files 19:8:3, the kernel's auto 20:8:3).  The launch reads them back.
        notes.append(
            "weights from bandwidth by the kernel's auto mode (weighted_interleave/auto): the kernel "
            "computes them when auto is switched on, and the launch reads them back before it starts "
            "the engine"
        )
        return WeightPlan(source, nodes, {}, current, changes, txn, base, tuple(notes), tuple(_drift(others, warnings)))
    if auto:
        notes.append("weights from bandwidth by the kernel's auto mode (weighted_interleave/auto)")
    return WeightPlan(
        source,
        nodes,
        {n: wanted[n] for n in nodes},
        current,
        changes,
        txn if changes else None,
        base,
        tuple(notes),
        tuple(_drift(others, warnings)),
    )


def _drift(others: Sequence[Any], warnings: List[str]) -> List[str]:
    """``warnings`` plus one for each setting of the profile in effect that the apply resets."""
    return warnings + [
        f"the profile in effect has drifted: applying the launch weights also resets {s.setting} to {s.desired}"
        for s in others
    ]


def wi_users(host: Host, exclude: Sequence[int] = ()) -> List[Tuple[int, str]]:
    """Processes with weighted-interleave mappings (first 64 KiB of each numa_maps: cheap)."""
    out = []
    r = host.reader
    for pid in pids(r):
        if pid in exclude:
            continue
        head = r.body(paths.proc_pid(pid, "numa_maps"), limit=65536, head=True)
        if head is not None and "weighted interleave" in head:
            name = (r.body(paths.proc_pid(pid, "comm")) or "").strip() or "?"
            out.append((pid, name))
    return out


def apply(host: Host, wp: WeightPlan) -> Dict[int, int]:
    """Commit the planned launch profile through the tuning transaction; the weights read back."""
    assert wp.transaction is not None
    try:
        res = wp.transaction.commit()
    except CxlctlError as e:
        raise CxlctlError(
            f"setting the weighted-interleave weights failed: {e}",
            code=e.code,
            hint=e.hint or "run as root, or leave out --ratio to use the weights in effect",
        ) from None
    if not res.ok:
        raise CxlctlError(
            f"setting the weighted-interleave weights failed and was rolled back: {res.error}",
            hint="see cxlctl tune status; nothing was launched",
        )
    now = _current(host)
    return {n: now.get(n, 0) for n in wp.nodes}
