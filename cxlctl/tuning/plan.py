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

from typing import Dict, List, Literal, Mapping, Optional, Tuple

from cxlctl.damon.sysfs import DamonState
from cxlctl.figures import node_figures
from cxlctl.hostio import paths
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import is_decimal

from . import damon_tiering as damon
from .knobs import REGISTRY, BandwidthRule, Current, Knob, WISpec
from .profile import Profile, Setting
from .weights import (
    bandwidth_gaps,
    cxl_bandwidth_gap,
    cxl_write_bandwidth,
    divide_gcd,
    kernel_weights,
    node_bandwidth,
    ratio_weights,
    reduce_weights,
)

#: path → (knob, original raw text) of the profile applied before this one
Restore = Mapping[str, Tuple[str, Optional[str]]]


#: what applying a step does (a tag: mypy rejects a compare with a word it never holds)
Action = Literal["set", "noop", "restore", "unsupported", "skip"]


class Step(NamedTuple):
    knob: str
    setting: str  # display name (the knob, or weighted_interleave.nodeN / .auto)
    path: str
    current: Optional[str]  # canonical current value (raw text if unparsable); None = absent
    desired: Optional[str]  # canonical value wanted; None for unsupported/skip
    write: Optional[str]  # exact text to write; None = nothing to write
    action: Action
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
    #: (path, text) of files the apply itself creates, with the value they have when
    #: created (a new kdamond's ``state`` is ``off``): what a rollback puts back
    baseline: Tuple[Tuple[str, str], ...] = ()
    #: reasons the apply must not start (a kdamond of someone else); empty: go ahead
    refusals: Tuple[str, ...] = ()

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
            return str(v), f"{value.fraction:g} x {bw} MB/s (CXL write bandwidth, CPU access class)"
        return str(value.fallback), f"CXL write bandwidth unknown: {cxl_bandwidth_gap(inv)}; conservative fallback"
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
        return [_profile_step(knob, s, "unsupported", None, None, None, why)]
    desired, note = _scalar_desired(knob, s.value, inv)
    if current == desired:
        return [_profile_step(knob, s, "noop", current, desired, None, note)]
    return [_profile_step(knob, s, "set", current, desired, knob.text(desired), note)]


def _profile_step(
    knob: Knob,
    s: Setting,
    action: Action,
    current: Optional[str],
    desired: Optional[str],
    write: Optional[str],
    note: str,
) -> Step:
    """A step of a scalar knob the profile sets (reason and origin are the setting's)."""
    return Step(
        knob=knob.name,
        setting=knob.name,
        path=knob.path,
        current=current,
        desired=desired,
        write=write,
        action=action,
        reason=s.reason,
        reversible=knob.reversible,
        origin=s.origin,
        note=note,
    )


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


class _WIPlanner:
    """The weighted-interleave group's steps, phase by phase (one knob, many files).

    Phases: the profile does not mention the group → :meth:`restore_all`; the kernel
    lacks it → :meth:`unsupported`; nodes chosen (:func:`_select_nodes`) → weights by
    :meth:`by_ratio` or :meth:`by_bandwidth` (or the kernel's own auto mode) → the
    weight files, then ``auto`` (:meth:`manual`).  Anything that cannot be computed
    here is one :meth:`skipped` step.
    """

    def __init__(self, knob: Knob, cur: Current, inv: Inventory, restore: Restore) -> None:
        self.knob = knob
        self.cur = cur
        self.inv = inv
        self.restore = restore
        self.nodes = cur.wi_node_paths()
        self.auto = cur.wi_auto_path
        self.kinds = {n.id: n.kind for n in inv.nodes}

    def step(
        self,
        setting: str,
        path: str,
        desired: Optional[str],
        s: Setting,
        note: str = "",
        action: Optional[Action] = None,
    ) -> Step:
        raw = self.cur.get(path)
        current = _canon(self.knob, raw)
        if action is None:
            action = "noop" if current == desired and raw is not None else "set"
        return Step(
            knob=self.knob.name,
            setting=setting,
            path=path,
            current=current,
            desired=desired,
            write=self.knob.text(desired) if action == "set" and desired is not None else None,
            action=action,
            reason=s.reason,
            reversible=self.knob.reversible,
            origin=s.origin,
            note=note,
        )

    def _restore_step(self, path: str, original: str) -> Step:
        return Step(
            knob=self.knob.name,
            setting=_member(path),
            path=path,
            current=_canon(self.knob, self.cur.get(path)),
            desired=_canon(self.knob, original),
            write=original,
            action="restore",
            reason=_RESTORE_REASON,
            reversible=True,
            origin="",
        )

    def restores(self, skip: Tuple[str, ...]) -> List[Step]:
        """Weight files the previous profile changed and this plan does not write: back to boot values."""
        out = []
        for path in self.knob.files(self.cur):
            if path in skip or path not in self.restore or path == self.auto:
                continue
            original = self.restore[path][1]
            if original is None:
                continue
            raw = self.cur.get(path)
            if raw is not None and _canon(self.knob, raw) == _canon(self.knob, original):
                continue
            out.append(self._restore_step(path, original))
        return out

    def restore_all(self) -> List[Step]:
        """The profile does not mention the group: undo what the previous profile set."""
        steps = self.restores(())
        auto = self.auto
        if auto and auto in self.restore and self.restore[auto][1] is not None:
            original = self.restore[auto][1]
            assert original is not None
            # a weight write switches auto off, so restore auto whenever weights were written
            if steps or _canon(self.knob, self.cur.get(auto)) != _canon(self.knob, original):
                steps.append(self._restore_step(auto, original))
        return steps

    def unsupported(self, s: Setting, why: str) -> List[Step]:
        return [self._whole(s, "unsupported", why)]

    def skipped(self, s: Setting, why: str) -> List[Step]:
        return [self._whole(s, "skip", why)]

    def _whole(self, s: Setting, action: Action, why: str) -> Step:
        return _profile_step(self.knob, s, action, None, None, None, why)

    def by_ratio(self, spec: WISpec, chosen: List[int], cxl: List[int]) -> Tuple[Optional[Dict[int, int]], str]:
        """Weights from a DRAM:CXL ratio; (None, why) when some node is neither."""
        assert spec.ratio is not None
        other = [n for n in chosen if self.kinds.get(n) not in ("dram", "cxl")]
        if other:
            return None, f"node(s) {other} are neither DRAM nor CXL: a DRAM:CXL ratio cannot weight them"
        dram = [n for n in chosen if self.kinds.get(n) == "dram"]
        return ratio_weights(dram, cxl, spec.ratio), f"ratio DRAM:CXL {spec.ratio[0]}:{spec.ratio[1]}"

    def bandwidths(self, chosen: List[int]) -> Tuple[Dict[int, int], List[int]]:
        """(node → bandwidth MB/s, nodes without bandwidth data)."""
        bw: Dict[int, int] = {}
        missing = []
        for nid in chosen:
            node = self.inv.node(nid)
            b = node_bandwidth(self.inv, node) if node else None
            if b is None:
                missing.append(nid)
            else:
                bw[nid] = b
        return bw, missing

    def auto_comparison(self, bw: Dict[int, int], max_weight: int) -> str:
        """The kernel's ``auto`` weights (read from the ``nodeN`` files while ``auto`` is on)
        beside the ones cxlctl computes from the same bandwidths, as shares of the pages, so
        an operator sees what either would do and why they differ (the kernel scales to 32
        and rounds down; cxlctl takes the smallest weights within 5 % of each share)."""
        ours = reduce_weights(bw, max_weight)
        total_bw = sum(bw.values())

        def shares(w: Dict[int, int]) -> str:
            t = sum(w.values())
            return " ".join(f"node{n}={w[n]} ({100 * w[n] / t:.0f} %)" for n in sorted(w))

        want = " ".join(f"node{n} {100 * b / total_bw:.0f} %" for n, b in sorted(bw.items()))
        mine = f"cxlctl's from the same figures: {shares(ours)}; bandwidth shares: {want}"
        kernel: Dict[int, int] = {}
        if _canon(self.knob, self.cur.get(self.auto or "")) == "true":
            for n in bw:
                raw = self.cur.get(self.nodes.get(n, ""))
                v = _canon(self.knob, raw) if raw is not None else None
                if v is None or not is_decimal(v):
                    kernel = {}
                    break
                kernel[n] = int(v)
        if not kernel:
            return f"the kernel computes its weights when auto is on; {mine}"
        if divide_gcd(kernel) == ours:
            return f"the kernel's auto weights now: {shares(kernel)}, the same as cxlctl's"
        return f"the kernel's auto weights now: {shares(kernel)} (bandwidth x 32 / total, rounded down); " + mine

    def disagreeing(self, chosen: List[int]) -> str:
        """Why the measurement replaces the firmware's figures (``weights = "bandwidth"``): a current
        ``cxlctl probe`` record covers every chosen node and the firmware's read bandwidth of one of
        them is more than 2x off it; "" otherwise (``weights = "firmware"`` never asks)."""
        from cxlctl.probe.store import DISAGREE, bandwidth_disagreements, judge

        doc = self.cur.probe
        stored = judge(doc, self.cur.boot_id, self.inv) if doc is not None else None
        if stored is None or any(n not in stored.usable for n in chosen):
            return ""
        off = {n: v for n, v in bandwidth_disagreements(self.inv, stored).items() if n in chosen}
        if not off:
            return ""
        shown = ", ".join(f"node{n} firmware {fw} MB/s, measured {m} MB/s" for n, (fw, m) in sorted(off.items()))
        return (
            f"the firmware's figures disagree with cxlctl probe's by more than {DISAGREE:g}x ({shown}); "
            'weights = "firmware" keeps the firmware\'s'
        )

    def by_measurement(self, s: Setting, chosen: List[int], lead: str) -> List[Step]:
        """Weights from ``cxlctl probe``'s stored figures by the kernel's own formula
        (:func:`~.weights.kernel_weights`); skipped, saying why, when they are absent or stale."""
        from cxlctl.probe.store import judge

        doc = self.cur.probe
        stored = judge(doc, self.cur.boot_id, self.inv) if doc is not None else None
        figures = stored.usable if stored is not None else {}
        missing = [n for n in chosen if n not in figures]
        if missing:
            if stored is None:
                why = "no stored probe results: run cxlctl probe"
            elif stored.stale:
                why = stored.why_not()
            else:
                why = f"cxlctl probe measured no figures for node(s) {', '.join(map(str, missing))}"
            return self.skipped(s, f'{lead}; {why}, or give a ratio, e.g. weights = "3:1"')
        bw = {n: figures[n].bandwidth for n in chosen}
        shown = ", ".join(f"node{n} {b} MB/s" for n, b in sorted(bw.items()))
        when = stored.record.get("measured_at") if stored is not None else None
        # the kernel's sums run over every node with memory, chosen or not (reduce_interleave_weights)
        every = {n.id: figures[n.id].bandwidth if n.id in figures else 0 for n in self.inv.nodes if n.has_memory}
        others = sorted(set(every) - set(chosen))
        shown += f"; the kernel's total also counts node(s) {', '.join(map(str, others))}" if others else ""
        note = f"{lead}: measured bandwidth (cxlctl probe {when}, min(read, write)) {shown}, kernel formula"
        weights = kernel_weights(every)
        return self.manual(s, {n: weights[n] for n in chosen}, note)

    def manual(self, s: Setting, weights: Dict[int, int], note: str) -> List[Step]:
        """The weight files (restoring the previous profile's others), then ``auto`` off."""
        steps = self.restores(tuple(self.nodes[n] for n in weights))
        for nid, w in sorted(weights.items()):
            steps.append(self.step(f"weighted_interleave.node{nid}", self.nodes[nid], str(w), s, note))
        if self.auto:
            # the kernel switches auto off by itself on the first weight write; writing it
            # explicitly (last) makes the intent visible to verify and to fixture trees
            steps.append(self.step("weighted_interleave.auto", self.auto, "false", s, "manual weights"))
        return steps

    def plan(self, s: Optional[Setting]) -> Tuple[List[Step], List[str]]:
        if s is None:
            return self.restore_all(), []
        why = self.knob.probe(self.cur)
        if why:
            return self.unsupported(s, why), []
        spec = s.value
        assert isinstance(spec, WISpec)
        chosen, notes = _select_nodes(self.inv, spec, self.nodes)
        warnings = [f"weighted_interleave: {n}" for n in notes]
        cxl = [n for n in chosen if self.kinds.get(n) == "cxl"]
        if "cxl" in spec.nodes and not cxl:
            return self.skipped(s, "no CXL memory node is online: nothing to interleave DRAM with"), warnings
        if len(chosen) < 2:
            why = f"weighted interleave needs two or more memory nodes; selected: {chosen or 'none'}"
            return self.skipped(s, why), warnings
        if spec.weights == "ratio":
            weights, note = self.by_ratio(spec, chosen, cxl)
            if weights is None:
                return self.skipped(s, note), warnings
            return self.manual(s, weights, note), warnings
        if spec.weights == "measured":
            return self.by_measurement(s, chosen, 'weights = "measured"'), warnings
        bw, missing = self.bandwidths(chosen)
        off = self.disagreeing(chosen) if spec.weights == "bandwidth" else ""
        if off:
            # the firmware's figures are wrong by more than 2x where cxlctl probe measured this boot
            # (doctor's firmware.measured): weights from them would misplace the pages
            return self.by_measurement(s, chosen, off), warnings
        shown = ", ".join(f"node{n} {b} MB/s" for n, b in sorted(bw.items()))
        if missing:
            lacking = [node for node in map(self.inv.node, missing) if node is not None]
            gaps = bandwidth_gaps(self.inv, lacking)
            undetermined = all(node_figures(node, self.inv.regions, self.inv.nodes).undetermined for node in lacking)
            if undetermined and spec.prefer_auto and self.auto:
                # the kernel has one figure for each such node (the region it took): its auto mode works
                note = f"kernel auto mode (weights from the figures the kernel took; cxlctl knows {shown}; {gaps})"
                return [self.step("weighted_interleave.auto", self.auto, "true", s, note)], warnings
            if spec.weights == "firmware":
                return self.skipped(s, f'weights = "firmware": {gaps}; give a ratio, e.g. weights = "3:1"'), warnings
            # the kernel has no figures cxlctl can use for some node: cxlctl probe's, when they describe this host
            return self.by_measurement(s, chosen, gaps), warnings
        if spec.prefer_auto and self.auto:
            note = f"kernel auto mode (weights from {shown}); {self.auto_comparison(bw, spec.max_weight)}"
            return [self.step("weighted_interleave.auto", self.auto, "true", s, note)], warnings
        return self.manual(s, reduce_weights(bw, spec.max_weight), "from bandwidth " + shown), warnings


def _wi(
    knob: Knob, s: Optional[Setting], cur: Current, inv: Inventory, restore: Restore
) -> Tuple[List[Step], List[str]]:
    """The weighted-interleave group's steps and warnings (see :class:`_WIPlanner`)."""
    return _WIPlanner(knob, cur, inv, restore).plan(s)


def _member(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return "weighted_interleave." + ("auto" if name.endswith("auto_type") else name)


def plan(inv: Inventory, profile: Profile, current: Current, restore: Optional[Restore] = None) -> Plan:
    """Steps that take the host from ``current`` to ``profile``; ``restore`` when switching profiles."""
    rs: Restore = restore or {}
    steps: List[Step] = []
    saved: List[Tuple[str, str]] = []
    warnings: List[str] = []
    dp = DamonPlan([], [], [], [], [])
    for knob in REGISTRY:
        s = profile.setting(knob.name)
        if knob.name == "damon":
            dp = _damon(knob, s, current, inv, rs)
            steps.extend(dp.steps)
            saved.extend(dp.saved)
            warnings.extend(dp.warnings)
            continue
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
    return Plan(
        profile.name,
        profile.source,
        profile.placement,
        tuple(steps),
        tuple(saved),
        tuple(warnings),
        tuple(dp.baseline),
        tuple(dp.refusals),
    )


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
            f"CXL node(s) {', '.join(map(str, shared))} share DRAM's memory tier (boot-time System RAM, or figures "
            "as good as DRAM's: `cxlctl status` says which): demotion and promotion cannot move pages between them; "
            "prefer inference-bandwidth"
        )
    if tiering and dem == "false":
        out.append("kernel.numa_balancing tiering is on but demotion is off: pages are promoted but never demoted")
    damon_on = any(s.knob == "damon" and s.action in ("set", "noop") and s.desired == "on" for s in steps)
    if damon_on and tiering:
        out.append(
            "kernel.numa_balancing tiering (mode 2) is on beside DAMON tiering: two promoters work against each "
            "other; set kernel.numa_balancing = 0 in the profile"
        )
    rl = [s for s in steps if s.knob == "kernel.numa_balancing_promote_rate_limit_MBps" and s.action in ("set", "noop")]
    if rl and nb is not None and not tiering:
        out.append("the promotion rate limit has no effect unless kernel.numa_balancing includes mode 2")
    return out


# ---------------------------------------------------------------------------- DAMON


class DamonPlan(NamedTuple):
    steps: List[Step]
    saved: List[Tuple[str, str]]
    baseline: List[Tuple[str, str]]
    warnings: List[str]
    refusals: List[str]


def _damon_step(
    setting: str,
    path: str,
    current: Optional[str],
    desired: Optional[str],
    write: Optional[str],
    action: Action,
    s: Setting,
    note: str = "",
) -> Step:
    return Step("damon", setting, path, current, desired, write, action, s.reason, True, s.origin, note)


def _damon_restore(cur: Current, restore: Restore) -> DamonPlan:
    """The profile in effect made kdamonds and this one does not want them: stop and remove them."""
    ours = [p for p, (k, _) in restore.items() if k == "damon" and damon.is_state(p)]
    steps: List[Step] = []
    saved: List[Tuple[str, str]] = []
    for path in sorted(ours) + [damon.NR_KDAMONDS]:
        original = restore[path][1]
        raw = cur.get(path)
        if original is None or raw is None:
            continue
        saved.append(("damon", path))
        now, want = raw.strip(), original.strip()
        setting = "damon.nr_kdamonds" if path == damon.NR_KDAMONDS else "damon.kdamond" + path.split("/")[-2] + ".state"
        action: Action = "noop" if now == want else "restore"
        write = None if now == want else original
        # a state file goes away with nr_kdamonds: nothing to read back afterwards
        desired = None if path != damon.NR_KDAMONDS else want
        note = "stopped, then removed by nr_kdamonds" if desired is None else ""
        steps.append(Step("damon", setting, path, now, desired, write, action, _RESTORE_REASON, True, "", note))
    return DamonPlan(steps, saved, [], [], [])


def _damon(knob: Knob, s: Optional[Setting], cur: Current, inv: Inventory, restore: Restore) -> DamonPlan:
    """DAMON tiering's steps (see :mod:`.damon`): kdamond count, every member file, then the states."""
    spec = s.value if s is not None else None
    mine = damon.owned(restore)
    if s is None or not isinstance(spec, damon.DamonSpec) or not spec.enabled:
        return _damon_restore(cur, restore) if mine is not None else DamonPlan([], [], [], [], [])
    why = knob.probe(cur)
    if why:
        return DamonPlan([_damon_step("damon", knob.path, None, None, None, "unsupported", s, why)], [], [], [], [])
    state = cur.damon
    assert state is not None and cur.damon_caps is not None
    kds, notes = damon.layout(inv, spec, cur.damon_caps)
    warnings = [f"damon: {n}" for n in notes]

    def skip(note: str) -> DamonPlan:
        step = _damon_step("damon", knob.path, None, None, None, "skip", s, note)
        if mine is None:
            return DamonPlan([step], [], [], warnings, [])
        # the kdamonds cxlctl runs would migrate to (or watch) a node that went: stop and remove them
        # until a pair is back (the daemon re-plans on the next node event)
        gone = _damon_restore(cur, restore)
        warnings.append(f"damon: {note}; cxlctl's kdamonds are stopped and removed until one is back")
        return DamonPlan([step] + gone.steps, gone.saved + _old_files(cur, restore, gone.saved), [], warnings, [])

    if not any(n.kind == "cxl" and n.has_memory for n in inv.nodes):
        return skip("no CXL memory node is online: nothing to tier DRAM with")
    if not kds:
        return skip("no DRAM/CXL node pair with online memory blocks to monitor")
    refusals = _damon_refusals(state, mine)
    n = len(kds)
    now_nr = cur.get(damon.NR_KDAMONDS)
    now_n = now_nr.strip() if now_nr is not None else None
    recreate = now_n != str(n)
    # the layout changes size (a memory node came or went) while cxlctl's kdamonds run: the kernel
    # refuses nr_kdamonds with EBUSY while any kdamond runs, so they are stopped first, re-created
    # and started again (off -> rewrite -> on); a same-size change is committed while running
    stop = [k for k in state.kdamonds if k.running] if recreate and mine is not None else []
    goal_notes, goal_refusals = damon.goal_support(spec, cur.damon_caps)
    refusals += goal_refusals
    if spec.memcg:
        refusals += _memcg_refusals(spec.memcg, cur.memcgs.get(spec.memcg))
        if cur.memcgs.get(spec.memcg) == "parent":
            warnings.append(
                f"damon: memcg {spec.memcg} hands the memory controller on to its children, and DAMON's filter "
                "matches pages charged to that cgroup itself, not to its children (the engine's own cgroup, "
                f"such as {spec.memcg.rstrip('/')}/vllm.service, holds them): name the cgroup the engine runs in"
            )
    warnings += [f"damon: {n}" for n in goal_notes]
    if refusals:
        step = _damon_step("damon", knob.path, None, None, None, "skip", s, "refused: " + refusals[0])
        return DamonPlan([step], [], [], warnings, refusals)
    caps = cur.damon_caps
    extra = []
    if not caps.node_goals and (spec.dram_free_goal_bp is not None or spec.dram_used_goal_bp is not None):
        extra.append("quota goals on node memory need 6.16+: fixed quotas only")
    steps: List[Step] = []
    for running in stop:
        note = f"stopped to re-target: the layout changes from {mine} to {n} kdamond(s), and nr_kdamonds is "
        note += "refused (EBUSY) while a kdamond runs; started again below"
        path = damon.state_path(running.id)
        steps.append(_damon_step(f"damon.kdamond{running.id}.state", path, "on", None, "off\n", "set", s, note))
    desc = ", ".join(damon.describe(k) for k in kds)
    steps.append(
        _damon_step(
            "damon.nr_kdamonds",
            damon.NR_KDAMONDS,
            now_n,
            str(n),
            f"{n}\n" if recreate else None,
            "set" if recreate else "noop",
            s,
            desc + ("; " + "; ".join(extra) if extra else ""),
        )
    )
    more, saved, baseline = _damon_files(kds, spec, s, cur, recreate)
    saved += _old_files(cur, restore, saved)
    return DamonPlan(steps + more, saved, baseline, warnings, [])


def memcgs_of(profile: Profile) -> Tuple[str, ...]:
    """The cgroups ``profile``'s DAMON filter names, for :func:`read_current` to look at."""
    s = profile.setting("damon")
    spec = s.value if s is not None else None
    return (spec.memcg,) if isinstance(spec, damon.DamonSpec) and spec.enabled and spec.memcg else ()


def _memcg_refusals(memcg: str, state: Optional[str]) -> List[str]:
    """Why the kernel would not find ``memcg`` for DAMON's filter.  It looks among the memory
    cgroups only (``damon_sysfs_memcg_path_to_id``), and a path it does not find fails the
    kdamond's ``state=on`` with ENOMEM (6.12, seen; docs/tuning.md): refused here, with the fix,
    before anything is written."""
    where = paths.CGROUP_DIR + memcg.rstrip("/")
    if state in (None, "memory", "parent"):
        return []
    tail = ", or leave memcg out of the [damon] table"
    if state == "absent":
        return [
            f'memcg "{memcg}": there is no cgroup {where}, and the kernel would fail the kdamond\'s start '
            f"(ENOMEM). Create it (or start the unit whose slice it is) with the memory controller on{tail}"
        ]
    if state == "no-memory":
        control = paths.cgroup_file(memcg.rstrip("/").rsplit("/", 1)[0], "cgroup.subtree_control")
        return [
            f'memcg "{memcg}" is a cgroup without the memory controller ({where} has no memory.stat), so '
            "DAMON's memcg filter cannot find it and the kernel would fail the kdamond's start (ENOMEM). "
            f"Turn the controller on for it: echo +memory > {control}{tail}"
        ]
    return [f'memcg "{memcg}": {state}; the plan cannot tell whether it is a memory cgroup{tail}']


def _damon_refusals(state: DamonState, mine: Optional[int]) -> List[str]:
    """Why cxlctl's kdamonds may not run beside the ones it finds: another tool's (adding one would
    re-create theirs), or a DAMON module's (DAMON_STAT, DAMON_RECLAIM, DAMON_LRU_SORT: the kernel
    itself refuses)."""
    refusals = []
    other = damon.others(state, mine)
    if other:
        refusals.append(
            "DAMON is already in use through sysfs by another tool (damo, a script): "
            + "; ".join(other)
            + ". cxlctl never touches it: adding a kdamond means writing nr_kdamonds, which re-creates every "
            "kdamond directory (and fails while one runs). Stop it first (e.g. `damo stop`), or leave [damon] "
            "out of the profile"
        )
    exclusive = damon.exclusive_kdamonds(state)
    if exclusive:
        # the kernel itself refuses: every DAMON module starts its kdamond exclusively, and while
        # one runs every other kdamond's state=on fails with EBUSY (6.12 and 7.3.4 guests; Debian's
        # 7.x starts DAMON_STAT at boot)
        names = damon.exclusive_names(state)
        refusals.append(
            f"DAMON module(s) run kdamonds of their own: {', '.join(exclusive)}. The kernel starts a module's "
            "kdamond exclusively: while it runs, it starts no other kdamond (EBUSY), cxlctl's included. "
            "Stop it first: "
            + "; ".join(f"echo N > /sys/module/{m}/parameters/enabled" for m in names)
            + (
                " (DAMON_STAT, which kernels built with CONFIG_DAMON_STAT_ENABLED_DEFAULT=y start at boot, stays "
                "off with damon_stat.enabled=N on the kernel command line)"
                if "damon_stat" in names
                else ""
            )
            + ", or leave [damon] out of the profile"
        )
    return refusals


def _damon_files(
    kds: List[damon.KdamondLayout], spec: damon.DamonSpec, s: Setting, cur: Current, recreate: bool
) -> Tuple[List[Step], List[Tuple[str, str]], List[Tuple[str, str]]]:
    """(steps, saved, baseline) of every kdamond's member files, then of their states: a file
    already holding its value is a noop, a running kdamond whose files change is committed."""
    steps: List[Step] = []
    member_paths: List[str] = []
    changed = {k.id: recreate for k in kds}
    for k in kds:
        for path, value, name in damon.files(k, spec):
            member_paths.append(path)
            raw = None if recreate else cur.get(path)
            current = raw.strip() if raw is not None else None
            if current == value:
                steps.append(_damon_step(name, path, current, value, None, "noop", s))
            else:
                changed[k.id] = True
                steps.append(_damon_step(name, path, current, value, value + "\n", "set", s))
    states = [damon.state_path(k.id) for k in kds]
    for k in kds:
        path = damon.state_path(k.id)
        raw = None if recreate else cur.get(path)
        current = raw.strip() if raw is not None else None
        if current == "on" and not changed[k.id]:
            steps.append(_damon_step(f"damon.kdamond{k.id}.state", path, current, "on", None, "noop", s))
        elif current == "on":
            # a running kdamond takes new inputs on `commit` (6.11+ commits the whole context)
            note = "commit: the running kdamond re-reads its files"
            steps.append(_damon_step(f"damon.kdamond{k.id}.state", path, current, "on", "commit\n", "set", s, note))
        else:
            steps.append(_damon_step(f"damon.kdamond{k.id}.state", path, current, "on", "on\n", "set", s))
    saved = [("damon", p) for p in states + [damon.NR_KDAMONDS] + member_paths]
    baseline = [(p, "off\n") for p in states if recreate or cur.get(p) is None]
    return steps, saved, baseline


def _old_files(cur: Current, restore: Restore, saved: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """Files of the kdamonds cxlctl runs now that the new layout no longer has (a kdamond of a node
    that went, a filter dropped): journaled too, so a failed re-target rolls back to the running
    layout and a revert still knows them (their ``original`` comes from the journal in effect)."""
    have = {p for _, p in saved}
    return [("damon", p) for p, (k, _) in restore.items() if k == "damon" and p not in have and cur.get(p) is not None]
