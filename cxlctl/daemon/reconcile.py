"""Rescan, compare, reconcile: what the daemon does after a burst of udev events.

Events only say "something changed"; their payload is never trusted (kernel
sequence numbers are not reliably ordered, and a lost event would leave a
payload-driven daemon wrong forever).  So every pass is: a full scan
(:func:`cxlctl.inventory.scan`), a comparison with the previous scan (one log
line per change), then the tuning engine decides what to write.

Which profile is enforced — the *target* — follows the administrator's most
recent word, in this order:

1. the tuning journal of this boot (``/run/cxlctl/journal.json``): ``applied``
   means that profile is in effect, whoever applied it (a CLI ``tune apply``
   while the daemon runs is followed, not fought); ``reverted`` means hands
   off until the next ``tune apply``; an interrupted apply or a failed rollback
   needs a human (``tune revert``) and the daemon writes nothing;
2. the persisted profile (``/var/lib/cxlctl/active-profile``, written by
   ``tune apply --persist``) — the normal case after a reboot;
3. ``profile =`` in the daemon's configuration;
4. none: the daemon only observes (metrics, labels, health).

Writes go through one tuning :class:`~cxlctl.tuning.transaction.Transaction`
built from the profile object and the pass's own scan: its plan decides whether
there is anything to write, and its ``commit()`` (journal, lock, rollback) writes
exactly that plan, re-checked under the lock — so a CLI apply and a daemon
reconcile never interleave: both hold the same flock for the whole transaction.
A pass first reverts an expired, unconfirmed ``tune try`` (its waiting process was
killed); while a try waits for confirmation the daemon writes nothing.

Capacity that comes and goes (docs/capacity.md): a memdev new since the previous
scan (a fabric manager's bind, seen as a PCIe hot-add) is *adopted* by the
``[capacity]`` section — built into a region of its own and onlined as
``adopt``/``zone`` say, through :mod:`cxlctl.capacity.adopt` (``region create``'s
planner and programmer, under the tuning lock) — before the profile is planned,
so the same pass gives the new node its weight.  Memdevs present at the first
pass are never adopted (a released one waiting for the FM's unbind must stay
free).  A memdev that disappears while its regions had memory (an unbind without
``capacity release``) is logged as a surprise removal with what was lost; the
daemon goes on.  The one write the engine does not model — onlining the
memory blocks of a newly appeared CXL dax device by the profile's
``auto_online_blocks`` policy — also takes that lock and uses the same write
primitive.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Literal, NamedTuple, Optional, Set, Tuple

from cxlctl.config import Config
from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import Locked, TuneLock, is_held
from cxlctl.hostio.objects import blocks_of, set_block_state
from cxlctl.hostio.write import KnobError
from cxlctl.model import Inventory, Memdev
from cxlctl.parse import format_size
from cxlctl.tuning import engine, trial
from cxlctl.tuning import journal as jn
from cxlctl.tuning.profile import Profile, candidates, from_data, require_trusted_files
from cxlctl.tuning.profile import load as load_profile
from cxlctl.tuning.transaction import Transaction

from .metrics import DriftCheck, Stats

if TYPE_CHECKING:
    from cxlctl.capacity.report import Report
    from cxlctl.model import NodeKind

ONLINE_MODES = ("online", "online_kernel", "online_movable")
#: passes an arrived memdev is tried in (the kernel enumerates its endpoint and decoders after the
#: memdev itself: a first pass may see it half-way)
ADOPT_TRIES = 5


# ------------------------------------------------------------------------ snapshots and changes


class NodeView(NamedTuple):
    kind: NodeKind
    has_memory: bool
    online_blocks: int
    total_blocks: int
    mem_total: Optional[int]
    tier: Optional[int]
    regions: Tuple[str, ...]


class Snapshot(NamedTuple):
    """The parts of an inventory whose changes are worth a log line."""

    memdevs: Dict[str, int]  # name → capacity
    regions: Dict[str, Tuple[Optional[str], Optional[int], Optional[bool]]]  # mode, size, committed
    dax: Dict[str, Tuple[Optional[str], Optional[int]]]  # mode, target node
    nodes: Dict[int, NodeView]


class Change(NamedTuple):
    kind: str  # metric label: node-added, node-removed, region-added, ...
    message: str


def snapshot(inv: Inventory) -> Snapshot:
    return Snapshot(
        memdevs={m.name: (m.ram_size or 0) + (m.pmem_size or 0) for m in inv.memdevs},
        regions={r.name: (r.mode, r.size, r.committed) for r in inv.regions},
        dax={d.name: (d.mode, d.target_node) for d in inv.dax_devices},
        nodes={
            n.id: NodeView(
                n.kind,
                n.has_memory,
                sum(1 for b in n.memory_blocks if (b.state or "").startswith("online")),
                len(n.memory_blocks),
                n.mem_total,
                n.tier,
                n.regions,
            )
            for n in inv.nodes
        },
    )


def _size(n: Optional[int]) -> str:
    return format_size(n, unknown="size unknown")


def _cxl(v: Optional[NodeView]) -> bool:
    return v is not None and v.kind == "cxl" and v.has_memory


def diff(old: Snapshot, new: Snapshot) -> List[Change]:
    """Changes from ``old`` to ``new``, one per object, in a stable order."""
    out: List[Change] = []
    for name in sorted(set(old.memdevs) | set(new.memdevs)):
        if name not in old.memdevs:
            out.append(Change("memdev-added", f"memdev {name} appeared ({_size(new.memdevs[name])})"))
        elif name not in new.memdevs:
            out.append(Change("memdev-removed", f"memdev {name} is gone"))
    for name in sorted(set(old.regions) | set(new.regions)):
        o, n = old.regions.get(name), new.regions.get(name)
        if o is None:
            assert n is not None
            out.append(Change("region-added", f"region {name} appeared ({n[0] or 'mode unknown'}, {_size(n[1])})"))
        elif n is None:
            out.append(Change("region-removed", f"region {name} is gone"))
        elif o != n:
            assert o is not None
            out.append(Change("region-changed", f"region {name} changed: {o[0]}/{_size(o[1])} -> {n[0]}/{_size(n[1])}"))
    for name in sorted(set(old.dax) | set(new.dax)):
        od, nd = old.dax.get(name), new.dax.get(name)
        if od is None:
            assert nd is not None
            out.append(Change("dax-added", f"dax device {name} appeared (mode {nd[0] or 'unbound'}, node {nd[1]})"))
        elif nd is None:
            out.append(Change("dax-removed", f"dax device {name} is gone"))
        elif od is not None and od[0] != nd[0]:
            out.append(
                Change("dax-mode", f"dax device {name} switched from {od[0] or 'unbound'} to {nd[0] or 'unbound'}")
            )
    for nid in sorted(set(old.nodes) | set(new.nodes)):
        o2, n2 = old.nodes.get(nid), new.nodes.get(nid)
        if _cxl(n2) and not _cxl(o2):
            assert n2 is not None
            regions = ", ".join(n2.regions) or "no region"
            out.append(
                Change(
                    "node-added",
                    f"CXL node {nid} appeared: {_size(n2.mem_total)}, {n2.online_blocks}/{n2.total_blocks} blocks online, "
                    f"tier {n2.tier}, {regions}",
                )
            )
        elif _cxl(o2) and not _cxl(n2):
            why = "gone" if n2 is None else "no memory left"
            out.append(Change("node-removed", f"CXL node {nid} removed ({why})"))
        elif (
            o2 is not None
            and n2 is not None
            and n2.has_memory
            and (o2.online_blocks, o2.total_blocks) != (n2.online_blocks, n2.total_blocks)
        ):
            out.append(
                Change(
                    "node-memory",
                    f"node {nid}: {n2.online_blocks}/{n2.total_blocks} memory blocks online "
                    f"(was {o2.online_blocks}/{o2.total_blocks})",
                )
            )
    return out


def summary(inv: Inventory) -> str:
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    t = inv.totals
    if not inv.has_cxl:
        return f"no CXL devices; {len(inv.nodes)} NUMA node(s)"
    nodes = ",".join(str(n.id) for n in cxl) or "none"
    return (
        f"{len(inv.memdevs)} memdev(s), {len(inv.regions)} region(s), CXL node(s) {nodes}, "
        f"{_size(t.cxl_online)} CXL online of {_size(t.cxl_capacity)}"
    )


# ------------------------------------------------------------------------ the target profile


class Target(NamedTuple):
    ref: Optional[str]  # what to pass to the engine (name or path); None = write nothing
    name: Optional[str]
    state: str  # applied | persisted | configured | observing | reverted | needs-attention | busy | trying
    why: str
    data: Optional[Dict[str, Any]] = None  # the document of a profile built in memory (no file)


def load_target(host: Host, target: Target) -> Profile:
    """The target's profile object: rebuilt from the journal's (or the persisted record's)
    document when it has one; as root, only from files root alone can change."""
    assert target.ref is not None
    if target.data is not None:
        profile = from_data(host, target.name or target.ref, target.data, target.ref)
    else:
        profile = load_profile(host, target.ref)
    require_trusted_files(host, profile)
    return profile


def _ref(host: Host, name: str, source: str) -> str:
    """A profile reference the engine can load: the name if it resolves, else the file."""
    if candidates(host, name):
        return name
    if source and os.path.isfile(source):
        return source
    return name


def read_persisted(host: Host) -> Optional[Tuple[str, str, Optional[Dict[str, Any]]]]:
    """(profile, source, document) from ``active-profile``; None when absent or unreadable.
    ``document`` is the profile as persisted (None in a record older than issue 43).

    :class:`CxlctlError` when it fails its checksum: a damaged byte must not make the daemon
    enforce another profile, nor silently none.
    """
    text = host.reader.body(engine.ACTIVE_PROFILE)
    try:
        doc = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and "checksum" in doc and doc["checksum"] != jn.checksum(doc):
        path = host.path(engine.ACTIVE_PROFILE)
        raise CxlctlError(
            f"the persisted profile record {path} fails its checksum (changed or damaged after cxlctl wrote it); "
            "the daemon enforces no profile until it is fixed",
            hint="run `cxlctl tune apply --persist PROFILE` to write it again, or `cxlctl tune revert` to remove it",
        )
    if not isinstance(doc, dict) or not isinstance(doc.get("profile"), str) or not doc["profile"]:
        return None
    src = doc.get("source")
    body = doc.get("document")
    return doc["profile"], src if isinstance(src, str) else "", body if isinstance(body, dict) else None


def resolve_target(host: Host, cfg: Config) -> Target:
    try:
        j = jn.load(host)
    except CxlctlError as e:
        return Target(None, None, "needs-attention", str(e))
    if j is not None and jn.same_boot(j, host.boot_id):
        if j.state == jn.APPLIED and trial.pending(j):
            return Target(None, j.profile, "trying", f"a `tune try` of {j.profile} waits for confirmation")
        if j.state == jn.APPLIED:
            return Target(
                j.profile_source if j.profile_data is not None else _ref(host, j.profile, j.profile_source),
                j.profile,
                "applied",
                f"applied this boot ({j.tool}, pid {j.pid})",
                j.profile_data,
            )
        if j.state == jn.REVERTED:
            return Target(
                None, j.profile, "reverted", f"{j.profile} was reverted at {j.finished}; `cxlctl tune apply` resumes"
            )
        if j.state == jn.APPLYING and is_held(host.root):
            return Target(None, j.profile, "busy", f"an apply of {j.profile} is in progress (pid {j.pid})")
        if j.state in (jn.APPLYING, jn.ROLLBACK_FAILED, jn.REVERT_FAILED):
            return Target(
                None,
                j.profile,
                "needs-attention",
                f"tuning journal in state {j.state} ({j.error or 'interrupted'}); run `cxlctl tune revert`",
            )
        # ROLLED_BACK: the last apply failed and was undone; fall back to the standing intent
    try:
        p = read_persisted(host)
    except CxlctlError as e:
        return Target(None, None, "needs-attention", str(e))
    if p is not None:
        if p[2] is not None:
            return Target(p[1] or p[0], p[0], "persisted", "persisted by `tune apply --persist`", p[2])
        return Target(_ref(host, p[0], p[1]), p[0], "persisted", "persisted by `tune apply --persist`")
    if cfg.profile:
        name = os.path.basename(cfg.profile)[:-5] if cfg.profile.endswith(".toml") else cfg.profile
        return Target(cfg.profile, name, "configured", "profile from the daemon configuration")
    return Target(None, None, "observing", "no profile applied, persisted or configured")


# ------------------------------------------------------------------------ the reconciler


#: what one reconcile did (a metric label and a log word; a tag, not free text)
Outcome = Literal["ok", "noop", "failed", "locked", "skipped"]


class Result(NamedTuple):
    result: Outcome
    changes: Tuple[Change, ...]
    written: int
    onlined: int
    seconds: float


class Reconciler:
    """Keeps the last scan and drift state; one method per kind of pass."""

    def __init__(self, host: Host, cfg: Config, log: logging.Logger, stats: Stats) -> None:
        #: the host of the current pass: :meth:`pass_host` makes a fresh one (a new reader, the
        #: boot id read again) for each reconcile and drift check, so no directory handle is kept
        #: across hot-plug between passes
        self.host = host
        self.cfg = cfg
        self.log = log
        self.stats = stats
        self.inventory: Optional[Inventory] = None
        self.snap: Optional[Snapshot] = None
        self.target = Target(None, None, "none", "not resolved yet")
        self.state = "none"  # for metrics: applied | observing | reverted | needs-attention | failed | none
        self.drift: Tuple[DriftCheck, ...] = ()
        self._drifted: Set[str] = set()
        self._said: Dict[str, str] = {}  # once-per-condition messages
        #: the capacity report of the last pass (metrics, labels; what a removed memdev held)
        self.capacity: Optional[Report] = None
        #: memdevs that arrived since the first pass and wait for adoption → passes tried
        self.adopt_pending: Dict[str, int] = {}
        #: the last pass wants another soon (an adoption deferred by the lock or the kernel's enumeration)
        self.retry_wanted = False

    # -- helpers ------------------------------------------------------------------------

    def pass_host(self) -> Host:
        """A fresh :class:`Host` for the pass about to run (kept as :attr:`host`)."""
        self.host = self.host.fresh()
        return self.host

    def _once(self, key: str, level: int, msg: str) -> None:
        if self._said.get(key) != msg:
            self._said[key] = msg
            self.log.log(level, msg)

    def scan(self, reason: str) -> Inventory:
        from cxlctl.inventory import scan

        inv = scan(self.host)
        self.stats.bump(self.stats.rescans, reason)
        self.stats.last_scan_time = time.time()
        return inv

    # -- a full pass --------------------------------------------------------------------

    def reconcile(self, reason: str) -> Result:
        """Rescan, log what changed, online new memory, apply the target profile if needed."""
        self.pass_host()
        try:
            return self._reconcile(reason)
        finally:
            self.host.reader.close()  # no directory handle kept between passes (hot-plug replaces them)

    def _reconcile(self, reason: str) -> Result:
        t0 = time.monotonic()
        self.expire_try()
        inv = self.scan(reason)
        new = snapshot(inv)
        first = self.snap is None
        changes: List[Change] = [] if first else diff(self.snap or new, new)
        if first:
            self.log.info("found %s", summary(inv))
        for c in changes:
            self.log.info("%s", c.message)
            self.stats.bump(self.stats.changes, c.kind)
        fresh = _fresh_ram_dax(self.snap, inv)
        if self.snap is not None:
            self.removed(self.snap, new)
            self.adopt_pending = {m: n for m, n in self.adopt_pending.items() if m in new.memdevs}
            for m in sorted(set(new.memdevs) - set(self.snap.memdevs)):
                self.adopt_pending.setdefault(m, 0)
        self.snap, self.inventory = new, inv
        self.retry_wanted = False
        if self.adopt_pending and self.adopt_new(inv):
            inv = self.scan("adopted")
            after = snapshot(inv)
            for c in diff(new, after):
                self.log.info("%s", c.message)
                self.stats.bump(self.stats.changes, c.kind)
                changes.append(c)
            self.snap, self.inventory = after, inv
        result, written, onlined = self._enforce(inv, fresh)
        self.capacity = self.capacity_report()
        dt = time.monotonic() - t0
        self.stats.bump(self.stats.reconciles, result)
        self.stats.reconcile_seconds_sum += dt
        self.stats.reconcile_seconds_count += 1
        self.stats.last_reconcile_seconds = dt
        self.stats.last_reconcile_time = time.time()
        if changes or written or onlined or result in ("failed", "locked"):
            self.log.info(
                "reconciled (%s) in %.3f s: %d change(s), %d setting(s) written, %d block(s) onlined, result %s",
                reason,
                dt,
                len(changes),
                written,
                onlined,
                result,
            )
        else:
            self.log.debug("reconciled (%s) in %.3f s: nothing to do", reason, dt)
        return Result(result, tuple(changes), written, onlined, dt)

    def expire_try(self) -> None:
        """Revert an unconfirmed `tune try` past its deadline (its waiting process was killed)."""
        try:
            res = trial.expire(self.host, self.cfg.lock_wait)
        except CxlctlError as e:
            self._once("try", logging.WARNING, f"cannot revert an expired `tune try`: {e}")
            return
        if res is not None:
            for m in res.messages:
                self.log.warning("%s", m)
            for err in res.errors:
                self.log.error("reverting the expired try: %s", err)

    def _enforce(self, inv: Inventory, fresh: Set[str]) -> Tuple[Outcome, int, int]:
        target = resolve_target(self.host, self.cfg)
        self.target = target
        if target.ref is None:
            self.state = {
                "busy": self.state,
                "trying": self.state,
                "reverted": "reverted",
                "needs-attention": "needs-attention",
            }.get(target.state, "observing")
            level = logging.WARNING if target.state == "needs-attention" else logging.INFO
            self._once("target", level, f"not enforcing a profile: {target.why}")
            return ("locked" if target.state == "busy" else "skipped"), 0, 0
        self._once("target", logging.INFO, f"enforcing profile {target.name} ({target.why})")
        try:
            profile = load_target(self.host, target)
        except CxlctlError as e:
            self.state = "failed"
            self._once("profile", logging.ERROR, f"cannot load profile {target.name}: {e}")
            return "failed", 0, 0
        self._said.pop("profile", None)
        onlined = 0
        if self.cfg.online_new_memory and fresh:
            try:
                onlined = self.online_new_memory(inv, profile, fresh)
            except Locked as e:
                self.log.warning("onlining new memory deferred: %s", e)
                return "locked", 0, 0
            if onlined:
                inv = self.scan("onlined")
                self.snap, self.inventory = snapshot(inv), inv
        result, written = self.apply_if_needed(inv, profile, target)
        if written:
            # metrics and labels must show what was just written (weights, knobs)
            inv = self.scan("after-apply")
            self.snap, self.inventory = snapshot(inv), inv
        return result, written, onlined

    def apply_if_needed(self, inv: Inventory, profile: Profile, target: Target) -> Tuple[Outcome, int]:
        """Plan against ``inv`` once; commit that transaction only when something must be written
        (or the profile is not yet recorded as applied this boot)."""
        try:
            txn = Transaction(self.host, profile, inventory=inv)
        except CxlctlError as e:
            self.state = "failed"
            self.log.error("planning %s failed: %s", profile.name, e)
            return "failed", 0
        active, p = txn.prepared.active, txn.plan
        same = active is not None and active.profile == profile.name
        if not p.writes and same:
            self.state = "applied"
            return "noop", 0
        # a write is *drift* when this profile already set that file to the same value and
        # something changed it since; anything else (a new node's weight, an edited profile)
        # is new work.  The engine applies whole profiles, so new work restores drift too.
        applied = {e.path: e.desired for e in active.entries} if active is not None and same else {}
        drift = [s for s in p.writes if applied.get(s.path) is not None and applied[s.path] == s.desired]
        other = [s for s in p.writes if s not in drift]
        if drift and self.cfg.drift_action == "report":
            names = ", ".join(s.setting for s in drift)
            if not other:
                self.state = "applied"
                self._once(
                    "drift-hold", logging.INFO, f"left drifted setting(s) as found (drift.action = report): {names}"
                )
                return "noop", 0
            self.log.warning(
                "re-applying %s for %s; this also restores drifted %s",
                profile.name,
                ", ".join(s.setting for s in other),
                names,
            )
        self._said.pop("drift-hold", None)
        try:
            res = txn.commit(wait=self.cfg.lock_wait)
        except Locked as e:
            self.log.warning("reconcile deferred: %s", e)
            return "locked", 0
        except CxlctlError as e:
            self.state = "failed"
            self.log.error("applying %s failed: %s", profile.name, e)
            return "failed", 0
        written = [r for r in res.results if r.status == "written"]
        for r in written:
            self.log.info(
                "set %s: %s -> %s (profile %s)",
                r.setting,
                r.before if r.before is not None else "-",
                r.after,
                profile.name,
            )
        self.stats.knob_writes += len(written)
        if not res.ok:
            self.state = "failed"
            self.log.error("applying %s failed and was rolled back: %s", profile.name, res.error)
            return "failed", len(written)
        self.state = "applied"
        if drift:
            self.stats.drift_corrections += 1
        if not written:
            self.log.info("profile %s recorded as applied (every setting already had its value)", profile.name)
        return "ok", len(written)

    # -- onlining -----------------------------------------------------------------------

    def online_new_memory(self, inv: Inventory, profile: Profile, fresh: Set[str]) -> int:
        """Online the offline blocks of newly seen CXL system-ram dax devices by the profile's
        ``auto_online_blocks`` (the kernel applied its *old* policy when they were hot-added,
        e.g. before the daemon started at boot).  Blocks offlined later by hand are not touched:
        only devices new to this daemon (or just switched to system-ram) count."""
        s = profile.setting("auto_online_blocks")
        mode = s.value if s is not None else None
        if mode not in ONLINE_MODES:
            return 0
        bs = inv.memory_block_size
        todo: List[Tuple[str, int, List[int]]] = []
        for d in inv.dax_devices:
            if d.name not in fresh or d.mode != "system-ram" or d.target_node is None:
                continue
            node = inv.node(d.target_node)
            if node is None or node.kind != "cxl":
                continue
            mine = blocks_of(d, node.memory_blocks, bs, alone=not node.has_cpu and len(node.dax_devices) == 1)
            if mine is None:
                continue
            offline = sorted(b.id for b in mine if b.state == "offline")
            if offline:
                todo.append((d.name, node.id, offline))
        if not todo:
            return 0
        done = 0
        with TuneLock(self.host.root, self.cfg.lock_wait):
            for dax, nid, blocks in todo:
                ok, failed = 0, []
                for b in blocks:
                    try:
                        set_block_state(self.host.root, b, f"{mode}\n")
                        ok += 1
                    except KnobError as e:
                        failed.append(f"memory{b}: {e.kind} ({e.errno_name or e})")
                self.log.info(
                    "onlined %d of %d offline memory block(s) of %s (node %d) as %s: profile %s sets auto_online_blocks%s",
                    ok,
                    len(blocks),
                    dax,
                    nid,
                    mode,
                    profile.name,
                    ("; failed: " + ", ".join(failed[:4])) if failed else "",
                )
                done += ok
        self.stats.blocks_onlined += done
        return done

    # -- capacity that comes and goes -----------------------------------------------------

    def capacity_report(self) -> Optional[Report]:
        """``cxlctl capacity``'s report of this pass's inventory (None: it could not be made)."""
        from cxlctl.capacity.extra import gather_for

        if self.inventory is None:
            return None
        try:
            return gather_for(self.host, self.inventory)
        except (CxlctlError, OSError) as e:
            self._once("capacity", logging.WARNING, f"capacity report not made: {e}")
            return None

    def adopt_new(self, inv: Inventory) -> int:
        """Adopt the memdevs that arrived (``[capacity] adopt``); how many were.  A memdev whose
        endpoint the kernel has not enumerated yet, or an adoption deferred by the lock, is tried
        again on the next pass (:attr:`retry_wanted`); a refusal or a failure is logged once."""
        from cxlctl.capacity import adopt as ad

        cfg, done = self.cfg, 0
        for name in sorted(self.adopt_pending):
            m = inv.memdev(name)
            size = _size((m.ram_size or 0) + (m.pmem_size or 0)) if m is not None else "size unknown"
            if cfg.adopt == "none":
                self.log.info(
                    "memdev %s arrived (%s); left free: [capacity] adopt = none (`cxlctl capacity adopt %s` builds it)",
                    name,
                    size,
                    name,
                )
                del self.adopt_pending[name]
                continue
            refusal = self._adopt_refusal(name, m)
            if refusal is not None:
                self.log.warning("memdev %s arrived (%s); left free: %s", name, size, refusal)
                self.stats.bump(self.stats.adoptions, "refused")
                del self.adopt_pending[name]
                continue
            why = ad.why_not(inv, name)
            tries = self.adopt_pending[name] = self.adopt_pending[name] + 1
            if m is not None and not m.endpoint and not m.regions and tries < ADOPT_TRIES:
                self.log.debug("memdev %s: no endpoint yet, adoption waits for the next pass", name)
                self.retry_wanted = True
                continue
            if why is not None:
                self.log.info("memdev %s arrived (%s); not adopted: %s", name, size, why)
                self.stats.bump(self.stats.adoptions, "skipped")
                del self.adopt_pending[name]
                continue
            t0 = time.monotonic()
            try:
                # zone None: the host's split decides ([capacity] pinnable, capacity/pinnable.py zone_for)
                (a,) = ad.adopt(
                    self.host, [name], cfg.adopt, None, lambda s: self.log.debug("%s", s), wait=cfg.lock_wait, cfg=cfg
                )
            except Locked as e:
                self.log.warning("adopting %s deferred: %s", name, e)
                self.retry_wanted = True
                continue
            except CxlctlError as e:
                from cxlctl.regions.planner import PlanError

                if tries < ADOPT_TRIES and isinstance(e, PlanError):  # decoders not all enumerated yet
                    self.log.info("adopting %s failed (try %d of %d), trying again: %s", name, tries, ADOPT_TRIES, e)
                    self.retry_wanted = True
                    continue
                self.log.error(
                    "adopting %s failed: %s (%s)",
                    name,
                    e,
                    e.hint or f"`cxlctl capacity adopt {name}` builds it by hand",
                )
                self.stats.bump(self.stats.adoptions, "failed")
                del self.adopt_pending[name]
                continue
            del self.adopt_pending[name]
            done += 1
            self.stats.bump(self.stats.adoptions, "ok")
            self.log.info(
                "%s in %.1f s ([capacity] adopt = %s, zone = %s: %s)",
                ad.line(a, cfg.adopt, inv.memory_block_size),
                time.monotonic() - t0,
                cfg.adopt,
                a.zone,
                a.zone_why,
            )
        return done

    def _adopt_refusal(self, name: str, m: Optional[Memdev]) -> Optional[str]:
        """Why this host does not adopt ``name`` (not a pool member, a serial not allowed, its security state,
        a surprise removal waiting for the reboot); None: it may.  docs/daemon.md, ``[capacity]``."""
        from cxlctl.capacity import adopt as ad
        from cxlctl.capacity import surprise

        cfg = self.cfg
        if not cfg.adopt_pool_member:
            return (
                "this host is not configured as a pool member ([capacity] pool_member = false); "
                f"`cxlctl capacity adopt {name}` builds it by hand"
            )
        serial = m.serial if m is not None else None
        if not cfg.adopt_any and (serial is None or serial not in cfg.adopt_serials):
            shown = f"{serial:#x}" if serial is not None else "unknown"
            return f'serial {shown} is not in [capacity] adopt_serials (a list of serials, or "any")'
        why = ad.security_refusal(self.host, name)
        if why is not None:
            return why
        st = surprise.load(self.host)
        if st is not None:
            return f"the host is to be drained and rebooted: {st.message}"
        return None

    def _host_to_drain(self, name: str, serial: Optional[int], held: str) -> None:
        """System RAM left with its device: record it (the host is not ready until rebooted) and say so."""
        from cxlctl.capacity import surprise
        from cxlctl.hostio.atomic import StorageError

        try:
            st = surprise.record(self.host, name, serial, held)
            kept = ""
        except (OSError, StorageError) as e:
            st, kept = surprise.Surprise(self.host.boot_id, [{"memdev": name}]), f" (not recorded: {e})"
        self.log.error(
            "the host is to be drained and rebooted: %s; it is not ready for the orchestrator "
            "(cxlctl_capacity_host_ready 0, label cxl.capacity-ready=false, capacity --json host_state "
            "drain-and-reboot) and adopts nothing until then%s",
            st.message,
            kept,
        )

    def removed(self, old: Snapshot, new: Snapshot) -> None:
        """Log each memdev gone since ``old``: a clean unbind (it held nothing), or a surprise removal
        naming what its regions held (the last pass's capacity report); counted in the metrics."""
        rep = self.capacity
        for name in sorted(set(old.memdevs) - set(new.memdevs)):
            m = rep.memdev(name) if rep is not None else None
            serial = f"serial {m.serial:#x}" if m is not None and m.serial is not None else "serial unknown"
            if rep is None or m is None or not m.regions:
                self.log.info("memdev %s (%s) left; it had no region: nothing was lost", name, serial)
                self.stats.bump(self.stats.removals, "clean")
                continue
            held = []
            if m.online:
                nodes = ", ".join(map(str, m.nodes)) or "?"
                # an interleaved region loses all of its memory with one member: each memdev's figures
                # are its share (capacity.report), so the region's are the group's sum
                group = [m] + [x for x in (rep.memdev(n) for n in m.release_with) if x is not None]
                online, movable = sum(x.online for x in group), sum(x.movable for x in group)
                held.append(
                    f"{_size(online)} online as System RAM on node {nodes} "
                    f"({_size(movable)} movable, {_size(online - movable)} normal)"
                )
            if m.devdax:
                held.append(f"{_size(m.devdax)} as devdax ({', '.join(m.dax_devices)})")
            self.log.error(
                "surprise removal: memdev %s (%s) is gone without a `cxlctl capacity release`; %s held %s: "
                "what lived there is lost to the host; next time release it first (docs/capacity.md)",
                name,
                serial,
                ", ".join(m.regions),
                "; ".join(held) or "no online memory",
            )
            self.stats.bump(self.stats.removals, "surprise")
            if m.online:
                self._host_to_drain(name, m.serial, "; ".join(held))

    # -- drift --------------------------------------------------------------------------

    def check_drift(self, count: bool = True) -> bool:
        """Verify the applied profile; log drift once per change; True when something drifted.

        ``count``: a scheduled check (counted in the metrics) rather than a refresh after a write.
        """
        if count:
            self.stats.drift_checks += 1
        self.pass_host()
        try:
            return self._check_drift()
        finally:
            self.host.reader.close()

    def _check_drift(self) -> bool:
        target = resolve_target(self.host, self.cfg)
        if target.state != "applied":
            self.drift = ()
            self._drifted = set()
            return False
        try:
            res = engine.verify(self.host, wait=0)  # a CLI transaction in flight: check next time
        except CxlctlError as e:
            self.log.debug("drift check skipped: %s", e)
            return False
        self.drift = tuple(DriftCheck(c.setting, c.expected, c.actual, c.status) for c in res.checks)
        now = {c.setting for c in self.drift if c.status == "drift"}
        for c in self.drift:
            if c.status == "drift" and c.setting not in self._drifted:
                self.log.warning(
                    "drift: %s is %s, profile %s applied %s (action: %s)",
                    c.setting,
                    c.actual,
                    res.profile,
                    c.expected,
                    self.cfg.drift_action,
                )
        for s in sorted(self._drifted - now):
            self.log.info("drift resolved: %s is back to the profile's value", s)
        self._drifted = now
        return bool(now)


def _fresh_ram_dax(old: Optional[Snapshot], inv: Inventory) -> Set[str]:
    """system-ram dax devices new since ``old`` (all of them on the first pass) or just switched to it."""
    out: Set[str] = set()
    for d in inv.dax_devices:
        if d.mode != "system-ram":
            continue
        prev = None if old is None else old.dax.get(d.name)
        if prev is None or prev[0] != "system-ram":
            out.add(d.name)
    return out
