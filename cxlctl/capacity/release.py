"""``cxlctl capacity release``: give whole memdevs back to the pool, as one journaled transaction.

The steps, in the only order the kernel allows (docs/capacity.md):

1. **migrate** — offline every online block of the memdevs' System-RAM DAX
   devices, block by block, through ``regions.dax.offline_blocks`` (the kernel's
   ``offline_pages()`` migrates the movable pages; all or nothing per device);
2. **tear down** — ``regions.program.destroy`` each region: unbind (the kmem
   driver's ``dev_dax_kmem_remove()`` removes memory that is offline), decommit,
   clear the targets, free the DPA, ``delete_region``; the memdev's endpoint
   decoders are then free;
3. **check** — a fresh scan: no region, no DPA on any endpoint decoder of the memdevs.

The journal (``/run/cxlctl/capacity.json``, checksummed like the tuning journal,
written atomically before the first write and after each step) holds what the
regions were — root decoder, memdevs, size, granularity, each DAX device's mode
and zone — so a failure rolls back to them: blocks back online in their zone, a
torn-down region built again by the planner and onlined as it was.  The data
is not lost either way: it was migrated off before anything was torn down.

Refusals (exit 2, nothing written, no lock taken): an unknown memdev, a blocker
from :mod:`.report` (named with its fix), a memdev interleaved with one not
named, a ``--size`` the releasable memdevs cannot make, an unfinished release
in the journal.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from cxlctl.errors import EXIT_USAGE, CxlctlError, UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.atomic import StorageError, atomic_write
from cxlctl.hostio.host import Host
from cxlctl.parse import format_size, parse_meminfo
from cxlctl.progress import ProgressFn

from .maygo import Blocker, teardown_order
from .report import MemdevCapacity, Report

Log = Callable[[str], None]
JOURNAL = paths.RUN_DIR + "/capacity.json"
SCHEMA = 1
#: journal states
RELEASING = "releasing"  # written before the first write; still so after a crash
RELEASED = "released"
ROLLED_BACK = "rolled-back"
ROLLBACK_FAILED = "rollback-failed"


class DaxState(NamedTuple):
    name: str
    mode: Optional[str]  # system-ram | devdax | None
    node: Optional[int]
    zone: Optional[str]  # "movable" | "normal": the zone its online blocks were in
    online: Tuple[int, ...]  # ids of its online blocks


class RegionRecord(NamedTuple):
    """What a region was, enough to build it again (:func:`_rebuild`)."""

    name: str
    root_decoder: Optional[str]
    memdevs: Tuple[str, ...]  # in position order
    size: Optional[int]
    granularity: Optional[int]
    dax: Tuple[DaxState, ...]


class Plan(NamedTuple):
    memdevs: Tuple[MemdevCapacity, ...]
    regions: Tuple[RegionRecord, ...]
    block_size: int

    @property
    def offline_bytes(self) -> int:
        return sum(len(d.online) for r in self.regions for d in r.dax) * self.block_size


class Moved(NamedTuple):
    node: int
    bytes: int  # in use there before the offlining
    to: Tuple[Tuple[int, int], ...]  # (node, bytes it gained)


class Released(NamedTuple):
    plan: Plan
    moved: Tuple[Moved, ...]
    steps: Tuple[str, ...]


# ------------------------------------------------------------------------------- choosing


def _names(memdevs: Sequence[str]) -> Tuple[str, ...]:
    from cxlctl.parse import decimal_suffix

    seen: List[str] = []
    for m in memdevs:
        if decimal_suffix(m, "mem") is None:
            raise UsageError(
                f"{m!r} is not a memdev name", hint="memdevs are named memN (`cxlctl capacity` lists them)"
            )
        if m in seen:
            raise UsageError(f"{m} is named twice", hint="name each memdev once")
        seen.append(m)
    return tuple(seen)


def _closure(rep: Report, m: MemdevCapacity) -> Tuple[str, ...]:
    """``m`` with what goes with it: its interleave partners and the memdevs whose regions must go first."""
    out = {m.memdev}
    todo = [m]
    while todo:
        x = todo.pop()
        for n in (*x.release_with, *x.depends_on):
            y = rep.memdev(n)
            if n not in out and y is not None:
                out.add(n)
                todo.append(y)
    return tuple(sorted(out))


def _by_size(rep: Report, size: int) -> Tuple[str, ...]:
    """The fewest releasable memdevs (whole interleave groups, with the memdevs their decoder order needs
    first) making at least ``size``: smallest first among those that alone suffice, else the largest groups
    until it is reached."""
    groups: List[Tuple[int, Tuple[str, ...]]] = []
    for m in rep.memdevs:
        g = _closure(rep, m)
        members = [x for x in rep.memdevs if x.memdev in g]
        if any(_unmet(x, g) for x in members):
            continue
        item = (sum(x.capacity for x in members), g)
        if item not in groups:
            groups.append(item)
    alone = sorted(groups, key=lambda x: (x[0], len(x[1]), x[1]))
    alone = [x for x in alone if x[0] >= size]
    if alone:
        return alone[0][1]
    out: List[str] = []
    total = 0
    for cap, g in sorted(groups, reverse=True):
        if set(g) & set(out):
            continue
        out.extend(g)
        total += cap
        if total >= size:
            return tuple(sorted(out))
    blocked = sum(m.capacity for m in rep.memdevs if m.memdev not in out and m.state == "blocked")
    raise UsageError(
        f"--size {format_size(size)}: only {format_size(total)} can be released now"
        + (f" ({format_size(blocked)} is blocked)" if blocked else ""),
        hint="`cxlctl capacity` says what blocks the rest and how to fix it",
    )


def _unmet(m: MemdevCapacity, names: Sequence[str]) -> List[Blocker]:
    """``m``'s blockers, less ``decoder-order`` when every memdev it depends on is released with it
    (:func:`plan` then tears the regions down highest decoder first)."""
    together = bool(m.depends_on) and set(m.depends_on) <= set(names)
    return [b for b in m.blockers if not (together and b.code == "decoder-order")]


def choose(rep: Report, memdevs: Sequence[str], size: Optional[int]) -> Tuple[MemdevCapacity, ...]:
    """The memdevs to release, or the refusal (exit 2) naming the blocker."""
    if bool(memdevs) == (size is not None):
        raise UsageError(
            "name the memdevs to release, or give --size, not both" if memdevs else "name the memdevs to release",
            hint="e.g. `cxlctl capacity release mem1` or `cxlctl capacity release --size 16G`",
        )
    names = _names(memdevs) if memdevs else _by_size(rep, size or 0)
    out = []
    for n in names:
        m = rep.memdev(n)
        if m is None:
            known = ", ".join(x.memdev for x in rep.memdevs) or "none"
            raise UsageError(f"no memdev {n} (memdevs: {known})", hint="`cxlctl capacity` lists them")
        blockers = _unmet(m, names)
        if blockers:
            b = blockers[0]
            more = f" (and {len(blockers) - 1} more blocker(s))" if len(blockers) > 1 else ""
            raise CxlctlError(
                f"cannot release {n} ({b.code}): {b.message}{more}; nothing was changed",
                code=EXIT_USAGE,
                hint=f"{b.fix}; `cxlctl capacity` lists every blocker",
            )
        missing = [x for x in m.release_with if x not in names]
        if missing:
            raise UsageError(
                f"{n} is interleaved with {', '.join(missing)} in {', '.join(m.regions)}: the region goes as a whole",
                hint=f"name them together: `cxlctl capacity release {' '.join(sorted((n, *m.release_with)))}`",
            )
        out.append(m)
    return tuple(out)


def _zone(zones: Sequence[Optional[str]]) -> Optional[str]:
    if not zones:
        return None
    return "movable" if all(z == "Movable" for z in zones) else "normal"


def plan(host: Host, rep: Report, chosen: Sequence[MemdevCapacity]) -> Plan:
    """What the release will do: each region of the chosen memdevs as it is now."""
    from cxlctl.hostio.objects import is_online
    from cxlctl.inventory import scan
    from cxlctl.regions import dax as daxmod

    inv = scan(host)
    regions = []
    # the kernel's order: on each port the region with the highest decoder first (maygo.teardown_order)
    for name in teardown_order(inv, {r for m in chosen for r in m.regions}):
        reg = inv.region(name)
        if reg is None:
            continue
        states = []
        for d in reg.dax_devices:
            dx, blocks = daxmod.read_dax_blocks(host, d)
            online = [b for b in blocks if is_online(b)] if dx.mode == "system-ram" else []
            states.append(
                DaxState(d, dx.mode, dx.target_node, _zone([b.zone for b in online]), tuple(b.id for b in online))
            )
        order = tuple(t.memdev or "" for t in sorted(reg.targets, key=lambda t: t.position))
        regions.append(RegionRecord(name, reg.root_decoder, order, reg.size, reg.interleave_granularity, tuple(states)))
    return Plan(tuple(chosen), tuple(regions), rep.block_size or 0)


# -------------------------------------------------------------------------------- journal


def _journal_doc(p: Plan, state: str, steps: Sequence[str], error: Optional[str], host: Host) -> Dict[str, Any]:
    from cxlctl.tuning.journal import checksum, now

    d: Dict[str, Any] = {
        "schema": SCHEMA,
        "state": state,
        "boot_id": host.boot_id,
        "pid": os.getpid(),
        "time": now(),
        "memdevs": [
            {"memdev": m.memdev, "serial": m.serial, "host": m.host, "capacity": m.capacity} for m in p.memdevs
        ],
        "regions": [
            {
                "region": r.name,
                "root_decoder": r.root_decoder,
                "memdevs": list(r.memdevs),
                "size": r.size,
                "granularity": r.granularity,
                "dax": [d._asdict() for d in r.dax],
            }
            for r in p.regions
        ],
        "steps": list(steps),
        "error": error,
    }
    d["checksum"] = checksum(d)
    return d


def save(host: Host, p: Plan, state: str, steps: Sequence[str], error: Optional[str] = None) -> None:
    data = json.dumps(_journal_doc(p, state, steps, error, host), indent=2) + "\n"
    try:
        atomic_write(host.root, JOURNAL, data)
    except OSError as e:
        raise StorageError(host.path(JOURNAL), e, "nothing was changed" if not steps else "; ".join(steps)) from None


def load(host: Host) -> Optional[Dict[str, Any]]:
    """The last release's journal (None: none), checked like the tuning journal's."""
    from cxlctl.tuning.journal import verified

    raw = host.reader.read(JOURNAL)
    if raw is None:
        return None
    try:
        d = verified(json.loads(raw.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as e:
        raise CxlctlError(
            f"the capacity journal {host.path(JOURNAL)} is unreadable ({e}); nothing was changed",
            code=EXIT_USAGE,
            hint="`cxlctl capacity` shows the regions as they are; once they are right, remove the file by hand",
        ) from None
    return d if isinstance(d, dict) else None


def check_unfinished(host: Host) -> None:
    """A release that stopped half-way (a crash while ``releasing``, or a failed rollback) in this boot: refuse."""
    d = load(host)
    if d is None or d.get("state") not in (RELEASING, ROLLBACK_FAILED):
        return
    if d.get("boot_id") and host.boot_id and d["boot_id"] != host.boot_id:
        return  # another boot's: /run should have been cleared; its regions are gone with that boot
    mds = ", ".join(str(m.get("memdev")) for m in d.get("memdevs", []))
    raise CxlctlError(
        f"a release of {mds} did not finish (state {d.get('state')}, PID {d.get('pid')}, steps done: "
        f"{'; '.join(map(str, d.get('steps', []))) or 'none'}); nothing was changed",
        code=EXIT_USAGE,
        hint=f"`cxlctl capacity` shows where the memdevs are; finish with `cxlctl region destroy REGION --force` "
        f"or build the region again, then remove {host.path(JOURNAL)}",
    )


# -------------------------------------------------------------------------------- doing it


def _used(host: Host) -> Dict[int, int]:
    """Bytes in use per node (MemTotal - MemFree), read now."""
    from cxlctl.parse import decimal_suffix

    out = {}
    r = host.reread()
    for name in r.listdir(paths.NODE_DIR, lambda x: decimal_suffix(x, "node") is not None):
        n = decimal_suffix(name, "node") or 0
        mi = parse_meminfo(r.text(paths.node_file(n, "meminfo")) or "")
        if "MemTotal" in mi and "MemFree" in mi:
            out[n] = max(0, mi["MemTotal"] - mi["MemFree"])
    return out


def _moved(p: Plan, before: Dict[int, int], after: Dict[int, int]) -> Tuple[Moved, ...]:
    released = sorted({d.node for r in p.regions for d in r.dax if d.online and d.node is not None})
    gained = tuple(
        (n, after[n] - before[n]) for n in sorted(after) if n in before and n not in released and after[n] > before[n]
    )
    return tuple(Moved(n, before.get(n, 0), gained) for n in released)


def _online_again(host: Host, r: RegionRecord, log: Log) -> List[str]:
    """Put a region's DAX devices' blocks back online in their zones; what could not be."""
    from cxlctl.regions import dax as daxmod

    left = []
    for d in r.dax:
        if d.mode == "system-ram" and d.online and d.zone:
            try:
                daxmod.online_in_zone(host, d.name, d.zone, log)
            except CxlctlError as e:
                left.append(f"{d.name}: {e}")
    return left


def _rebuild(host: Host, r: RegionRecord, log: Log) -> List[str]:
    """Build a torn-down region again as it was (the planner, then the DAX mode and zone); what failed."""
    from cxlctl.inventory import scan
    from cxlctl.regions import dax as daxmod
    from cxlctl.regions.planner import Request
    from cxlctl.regions.planner import plan as plan_region
    from cxlctl.regions.program import create, destroy

    try:
        if host.reread().isdir(paths.cxl_device(r.name)):
            destroy(host, r.name, True, log)  # half torn down: finish, then build it whole
        req = Request(tuple(m for m in r.memdevs if m), size=r.size, granularity=r.granularity, decoder=r.root_decoder)
        made = create(host, plan_region(scan(host), req), log)
        for old, new in zip(r.dax, made.dax_devices):
            if old.mode == "system-ram" and old.online:
                daxmod.reconfigure(host, new, "system-ram", old.zone or "movable", True, log)
            elif old.mode == "devdax":
                daxmod.reconfigure(host, new, "devdax", "movable", True, log)
        log(f"rebuilt {r.name} as {made.region}")
        return []
    except CxlctlError as e:
        return [f"{r.name}: {e}"]


def _fail(host: Host, p: Plan, steps: List[str], e: CxlctlError, left: List[str]) -> CxlctlError:
    """The error a failed release raises, once rolling back left ``left`` undone (journal updated)."""
    state = ROLLBACK_FAILED if left else ROLLED_BACK
    try:
        save(host, p, state, steps, str(e))
    except StorageError:
        pass  # the failure itself is what the message reports
    if left:
        return CxlctlError(
            f"capacity release failed: {e}; rolling back was incomplete: {'; '.join(left)}",
            hint=f"the journal {host.path(JOURNAL)} says what each region was; `cxlctl capacity` shows where they are",
        )
    return CxlctlError(
        f"capacity release failed: {e}; rolled back: every region and block is as it was, nothing was lost",
        hint=e.hint or "`cxlctl capacity` shows what blocks the release",
    )


def execute(host: Host, p: Plan, log: Log, progress: Optional[ProgressFn] = None) -> Released:
    """Run the plan under the caller's lock; on failure roll back and raise (exit 1)."""
    from cxlctl.regions import dax as daxmod
    from cxlctl.regions.program import destroy

    steps: List[str] = []
    save(host, p, RELEASING, steps)
    before = _used(host)
    offlined: List[RegionRecord] = []
    for r in p.regions:
        try:
            for d in r.dax:
                if d.online:
                    blocks = daxmod.online_blocks(host, d.name)
                    daxmod.offline_blocks(host, blocks, log, f"{r.name}/{d.name}", progress)
                    steps.append(f"offlined {len(d.online)} block(s) of {d.name}")
        except CxlctlError as e:
            left = [x for o in (*offlined, r) for x in _online_again(host, o, log)]
            raise _fail(host, p, steps, e, left) from None
        offlined.append(r)
        save(host, p, RELEASING, steps)
    moved = _moved(p, before, _used(host))
    torn: List[RegionRecord] = []
    for r in p.regions:
        try:
            destroy(host, r.name, True, log)
        except CxlctlError as e:
            rest = [x for x in p.regions if x not in torn and x is not r]
            # built again in commit order, the reverse of the teardown's: each takes its decoders back
            left = [x for t in (r, *reversed(torn)) for x in _rebuild(host, t, log)]
            left += [x for o in rest for x in _online_again(host, o, log)]
            raise _fail(host, p, steps, e, left) from None
        torn.append(r)
        steps.append(f"destroyed {r.name}")
        save(host, p, RELEASING, steps)
    held = _still_held(host, [m.memdev for m in p.memdevs])
    if held:
        left = [x for t in reversed(torn) for x in _rebuild(host, t, log)]
        raise _fail(host, p, steps, CxlctlError("after the teardown " + "; ".join(held)), left) from None
    save(host, p, RELEASED, steps)
    return Released(p, moved, tuple(steps))


def _still_held(host: Host, memdevs: Sequence[str]) -> List[str]:
    """What still holds the memdevs after the teardown: a region, or DPA on an endpoint decoder."""
    from cxlctl.inventory import scan

    inv = scan(host)
    out = []
    for d in inv.decoders:
        if d.kind == "endpoint" and d.memdev in memdevs and (d.region or d.dpa_size):
            out.append(f"{d.memdev}'s {d.name} still holds " + (d.region or f"{format_size(d.dpa_size)} of DPA"))
    return out


def release(
    host: Host,
    memdevs: Sequence[str],
    size: Optional[int],
    log: Log,
    *,
    dry_run: bool = False,
    wait: Optional[float] = None,
    progress: Optional[ProgressFn] = None,
) -> Tuple[Plan, Optional[Released]]:
    """Refuse (exit 2, nothing written) or plan; unless ``dry_run``, take the lock, check again and run."""
    from cxlctl.hostio.lock import TuneLock

    from .report import gather

    check_unfinished(host)
    rep = gather(host)
    p = plan(host, rep, choose(rep, memdevs, size))
    if dry_run:
        return p, None
    with TuneLock(host.root, wait):
        rep = gather(host)  # again under the lock: nothing may have changed since
        p = plan(host, rep, choose(rep, [m.memdev for m in p.memdevs], None))
        return p, execute(host, p, log, progress)


# ---------------------------------------------------------------------------------- output


def released_line(m: MemdevCapacity) -> str:
    serial = f"serial {m.serial:#x}" if m.serial is not None else "serial unknown"
    return f"{m.memdev} ({serial}) released: safe to unbind at the fabric manager"


def to_json(p: Plan, done: Optional[Released]) -> Dict[str, Any]:
    doc: Dict[str, Any] = {
        "dry_run": done is None,
        "memdevs": [
            {
                "memdev": m.memdev,
                "serial": m.serial,
                "host": m.host,
                "capacity": m.capacity,
                "released": done is not None,
                "message": released_line(m) if done is not None else None,
            }
            for m in p.memdevs
        ],
        "regions": [
            {
                "region": r.name,
                "root_decoder": r.root_decoder,
                "memdevs": list(r.memdevs),
                "size": r.size,
                "dax": [
                    {"device": d.name, "mode": d.mode, "node": d.node, "zone": d.zone, "online_blocks": list(d.online)}
                    for d in r.dax
                ],
            }
            for r in p.regions
        ],
        "offline_bytes": p.offline_bytes,
    }
    if done is not None:
        doc["moved"] = [
            {"node": m.node, "bytes": m.bytes, "to": [{"node": n, "bytes": b} for n, b in m.to]} for m in done.moved
        ]
        doc["steps"] = list(done.steps)
    return doc


def lines(p: Plan, done: Optional[Released]) -> List[str]:
    out = [f"{m.memdev}: no region uses it, nothing to migrate or tear down" for m in p.memdevs if not m.regions]
    verb = "would" if done is None else "did"
    for r in p.regions:
        for d in r.dax:
            if d.online:
                out.append(
                    f"{r.name}: {verb} offline {len(d.online)} block(s) ({format_size(len(d.online) * p.block_size)}) "
                    f"of {d.name} on node {d.node} (ZONE_{(d.zone or 'unknown').upper()}); the kernel migrates what is there"
                )
            elif d.mode == "devdax":
                out.append(f"{r.name}: {d.name} is devdax, not mapped by any process")
        out.append(
            f"{r.name}: {verb} tear down (unbind, decommit, free {', '.join(m for m in r.memdevs if m)}'s decoders and DPA, delete)"
        )
    if done is None:
        out.append("dry run: nothing was changed")
        return out
    for mv in done.moved:
        to = ", ".join(f"node {n} +{format_size(b)}" for n, b in mv.to) or "freed"
        out.append(f"node {mv.node}: {format_size(mv.bytes)} in use moved ({to})")
    out.extend(released_line(m) for m in p.memdevs)
    return out
