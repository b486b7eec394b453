"""``plan(inventory, profile, current)``: what a profile would change, and why — no I/O.

Pure on purpose (netplan's state diff, pyroute2's transaction queue): the same
function backs ``tune plan``, ``apply --dry-run`` and the real apply, and tests
can call it on any recorded tree.  The plan is a list of steps, one per file,
in registry order; a step is ``set`` (will write), ``noop`` (already so),
``restore`` (a knob the previously applied profile changed and this one does
not mention, put back to its boot value), ``unsupported`` (the kernel lacks
it) or ``skip`` (cannot be computed here, e.g. weights without bandwidth data).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

from cxlctl.model import Inventory
from cxlctl.parse import is_decimal

from .knobs import REGISTRY, BandwidthRule, Current, Knob, WISpec
from .profile import Profile, Setting
from .weights import cxl_write_bandwidth, node_bandwidth, ratio_weights, reduce_weights

#: path → (knob, original raw text) of the profile applied before this one
Restore = Mapping[str, Tuple[str, Optional[str]]]


class Step(NamedTuple):
    knob: str
    setting: str  # display name (the knob, or weighted_interleave.nodeN / .auto)
    path: str
    current: Optional[str]  # canonical current value (raw text if unparsable); None = absent
    desired: Optional[str]  # canonical value wanted; None for unsupported/skip
    write: Optional[str]  # exact text to write; None = nothing to write
    action: str  # set | noop | restore | unsupported | skip
    reason: str
    reversible: bool
    origin: str  # profile file that asked for it
    note: str = ""


class Plan(NamedTuple):
    profile: str
    source: str
    placement: Optional[str]
    steps: Tuple[Step, ...]
    saved: Tuple[Tuple[str, str], ...]  # (knob, path): every file the journal must hold
    warnings: Tuple[str, ...]

    @property
    def writes(self) -> Tuple[Step, ...]:
        return tuple(s for s in self.steps if s.write is not None)


def _canon(knob: Knob, raw: Optional[str]) -> Optional[str]:
    if raw is None:
        return None
    c = knob.canonical(raw)
    return c if c is not None else raw.strip()


def _scalar_desired(knob: Knob, value: object, inv: Inventory) -> Tuple[str, str]:
    """Canonical desired value and a note explaining any derivation."""
    if isinstance(value, BandwidthRule):
        bw = cxl_write_bandwidth(inv)
        if bw:
            v = max(1, int(bw * value.fraction))
            return str(v), f"{value.fraction:g} x {bw} MB/s (CXL write bandwidth)"
        return str(value.fallback), "CXL write bandwidth unknown (no HMAT/CDAT): conservative fallback"
    if isinstance(value, bool):
        return ("true" if value else "false"), ""
    return str(value), ""


def _scalar(knob: Knob, s: Optional[Setting], cur: Current, inv: Inventory, restore: Restore) -> List[Step]:
    raw = cur.get(knob.path)
    current = _canon(knob, raw)
    if s is None:
        if knob.path not in restore:
            return []
        original = restore[knob.path][1]
        if original is None or raw is None:
            return []  # nothing saved, or the knob is gone: nothing to restore
        want = _canon(knob, original)
        if raw is not None and current == want:
            return [Step(knob.name, knob.name, knob.path, current, want, None, "noop", _RESTORE_REASON, True, "")]
        return [Step(knob.name, knob.name, knob.path, current, want, original, "restore", _RESTORE_REASON, True, "")]
    why = knob.probe(cur)
    if why:
        return [
            Step(
                knob.name,
                knob.name,
                knob.path,
                None,
                None,
                None,
                "unsupported",
                s.reason,
                knob.reversible,
                s.origin,
                why,
            )
        ]
    desired, note = _scalar_desired(knob, s.value, inv)
    if current == desired:
        return [
            Step(
                knob.name,
                knob.name,
                knob.path,
                current,
                desired,
                None,
                "noop",
                s.reason,
                knob.reversible,
                s.origin,
                note,
            )
        ]
    return [
        Step(
            knob.name,
            knob.name,
            knob.path,
            current,
            desired,
            knob.text(desired),
            "set",
            s.reason,
            knob.reversible,
            s.origin,
            note,
        )
    ]


_RESTORE_REASON = "not in this profile: back to its value before cxlctl"


def _select_nodes(inv: Inventory, spec: WISpec, have: Mapping[int, str]) -> Tuple[List[int], List[str]]:
    """Node ids the profile names that have memory and a weight file; plus notes on the rest."""
    notes: List[str] = []
    chosen: List[int] = []
    for n in inv.nodes:
        if not n.has_memory:
            continue
        if ("all" in spec.nodes or n.kind in spec.nodes or str(n.id) in spec.nodes) and n.id not in chosen:
            if n.id in have:
                chosen.append(n.id)
            else:
                notes.append(f"node {n.id} has no weight file")
    for sel in spec.nodes:
        if is_decimal(sel) and int(sel) not in chosen and not any(n.id == int(sel) and n.has_memory for n in inv.nodes):
            notes.append(f"node {sel} does not exist or has no memory")
    return sorted(chosen), notes


def _wi(
    knob: Knob, s: Optional[Setting], cur: Current, inv: Inventory, restore: Restore
) -> Tuple[List[Step], List[str]]:
    nodes = cur.wi_node_paths()
    auto = cur.wi_auto_path
    warnings: List[str] = []

    def step(
        setting: str, path: str, desired: Optional[str], action: Optional[str], reason: str, origin: str, note: str = ""
    ) -> Step:
        raw = cur.get(path)
        current = _canon(knob, raw)
        if action is None:
            action = "noop" if current == desired and raw is not None else "set"
        write = knob.text(desired) if action == "set" and desired is not None else None
        return Step(knob.name, setting, path, current, desired, write, action, reason, knob.reversible, origin, note)

    def restores(skip: Tuple[str, ...]) -> List[Step]:
        out = []
        for path in knob.files(cur):
            if path in skip or path not in restore or path == auto:
                continue
            original = restore[path][1]
            if original is None:
                continue
            want = _canon(knob, original)
            raw = cur.get(path)
            if raw is not None and _canon(knob, raw) == want:
                continue
            out.append(
                Step(
                    knob.name,
                    _member(path),
                    path,
                    _canon(knob, raw),
                    want,
                    original,
                    "restore",
                    _RESTORE_REASON,
                    True,
                    "",
                )
            )
        return out

    if s is None:
        steps = restores(())
        if auto and auto in restore and restore[auto][1] is not None:
            original = restore[auto][1]
            want = _canon(knob, original)
            raw = cur.get(auto)
            # a weight write switches auto off, so restore auto whenever weights were written
            if steps or _canon(knob, raw) != want:
                steps.append(
                    Step(
                        knob.name,
                        _member(auto),
                        auto,
                        _canon(knob, raw),
                        want,
                        original,
                        "restore",
                        _RESTORE_REASON,
                        True,
                        "",
                    )
                )
        return steps, warnings
    why = knob.probe(cur)
    if why:
        return [
            Step(
                knob.name,
                knob.name,
                knob.path,
                None,
                None,
                None,
                "unsupported",
                s.reason,
                knob.reversible,
                s.origin,
                why,
            )
        ], warnings
    spec = s.value
    assert isinstance(spec, WISpec)
    chosen, notes = _select_nodes(inv, spec, nodes)
    warnings.extend(f"weighted_interleave: {n}" for n in notes)
    kinds = {n.id: n.kind for n in inv.nodes}
    cxl = [n for n in chosen if kinds.get(n) == "cxl"]

    def skipped(why: str) -> Tuple[List[Step], List[str]]:
        return [
            Step(knob.name, knob.name, knob.path, None, None, None, "skip", s.reason, knob.reversible, s.origin, why)
        ], warnings

    if "cxl" in spec.nodes and not cxl:
        return skipped("no CXL memory node is online: nothing to interleave DRAM with")
    if len(chosen) < 2:
        return skipped(f"weighted interleave needs two or more memory nodes; selected: {chosen or 'none'}")
    weights: Dict[int, int]
    if spec.weights == "ratio":
        assert spec.ratio is not None
        other = [n for n in chosen if kinds.get(n) not in ("dram", "cxl")]
        if other:
            return skipped(f"node(s) {other} are neither DRAM nor CXL: a DRAM:CXL ratio cannot weight them")
        weights = ratio_weights([n for n in chosen if kinds.get(n) == "dram"], cxl, spec.ratio)
        note = f"ratio DRAM:CXL {spec.ratio[0]}:{spec.ratio[1]}"
    else:
        bw: Dict[int, int] = {}
        missing = []
        for nid in chosen:
            node = inv.node(nid)
            b = node_bandwidth(inv, node) if node else None
            if b is None:
                missing.append(nid)
            else:
                bw[nid] = b
        if missing:
            return skipped(
                f"no bandwidth data (HMAT/CDAT) for node(s) {', '.join(map(str, missing))}; "
                'give a ratio instead, e.g. weights = "3:1"'
            )
        if spec.prefer_auto and auto:
            return [
                step(
                    "weighted_interleave.auto",
                    auto,
                    "true",
                    None,
                    s.reason,
                    s.origin,
                    "kernel auto mode (weights from "
                    + ", ".join(f"node{n} {b} MB/s" for n, b in sorted(bw.items()))
                    + ")",
                )
            ], warnings
        weights = reduce_weights(bw, spec.max_weight)
        note = "from bandwidth " + ", ".join(f"node{n} {b} MB/s" for n, b in sorted(bw.items()))
    steps = restores(tuple(nodes[n] for n in weights))
    for nid, w in sorted(weights.items()):
        steps.append(step(f"weighted_interleave.node{nid}", nodes[nid], str(w), None, s.reason, s.origin, note))
    if auto:
        # the kernel switches auto off by itself on the first weight write; writing it
        # explicitly (last) makes the intent visible to verify and to fixture trees
        st = step("weighted_interleave.auto", auto, "false", None, s.reason, s.origin, "manual weights")
        steps.append(st)
    return steps, warnings


def _member(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return "weighted_interleave." + ("auto" if name.endswith("auto_type") else name)


def plan(inv: Inventory, profile: Profile, current: Current, restore: Optional[Restore] = None) -> Plan:
    """Steps that take the host from ``current`` to ``profile``; ``restore`` when switching profiles."""
    rs: Restore = restore or {}
    steps: List[Step] = []
    saved: List[Tuple[str, str]] = []
    warnings: List[str] = []
    for knob in REGISTRY:
        s = profile.setting(knob.name)
        if knob.kind == "group":
            ks, w = _wi(knob, s, current, inv, rs)
            warnings.extend(w)
        else:
            ks = _scalar(knob, s, current, inv, rs)
        steps.extend(ks)
        touched = any(x.action in ("set", "noop", "restore") for x in ks) or any(
            rs.get(p, ("", None))[0] == knob.name for p in knob.files(current)
        )
        if touched:
            saved.extend((knob.name, p) for p in knob.files(current) if current.get(p) is not None)
    warnings.extend(_advice(inv, steps))
    return Plan(profile.name, profile.source, profile.placement, tuple(steps), tuple(saved), tuple(warnings))


def _final(steps: List[Step], knob: str) -> Optional[str]:
    for s in steps:
        if s.knob == knob and s.desired is not None:
            return s.desired
    return None


def _advice(inv: Inventory, steps: List[Step]) -> List[str]:
    """Plan-level warnings: settings that cannot have the effect their reason promises here."""
    out: List[str] = []
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    nb = _final(steps, "kernel.numa_balancing")
    dem = _final(steps, "demotion_enabled")
    tiering = nb is not None and is_decimal(nb) and int(nb) & 2
    if not cxl and any(s.action in ("set", "noop") for s in steps):
        out.append("no CXL memory node is online: the CXL-specific settings have nothing to act on yet")
    dram_tiers = {n.tier for n in inv.nodes if n.kind == "dram" and n.tier is not None}
    shared = [n.id for n in cxl if n.tier is not None and n.tier in dram_tiers]
    if shared and (tiering or dem == "true"):
        out.append(
            f"CXL node(s) {', '.join(map(str, shared))} share DRAM's memory tier (no HMAT/CDAT performance data): "
            "demotion and promotion cannot move pages between them; prefer inference-bandwidth"
        )
    if tiering and dem == "false":
        out.append("kernel.numa_balancing tiering is on but demotion is off: pages are promoted but never demoted")
    rl = [s for s in steps if s.knob == "kernel.numa_balancing_promote_rate_limit_MBps" and s.action in ("set", "noop")]
    if rl and nb is not None and not tiering:
        out.append("the promotion rate limit has no effect unless kernel.numa_balancing includes mode 2")
    return out
