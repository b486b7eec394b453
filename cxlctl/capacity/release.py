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
from :mod:`.report` (named with its fix; ``--try-normal`` lets ``zone-normal``
through to the kernel), a memdev interleaved with one not named, a ``--size``
the releasable memdevs cannot make.

Issue 41: each block's offline is bounded and SIGINT/SIGTERM roll back
(:mod:`.bound`); the failure names what holds the pages (:mod:`.stuck`); a
journal left ``releasing`` or ``rollback-failed`` in this boot is rolled back by
the next release, which says what it found (:func:`recover`); ``--sanitize``
wipes the media before "safe to unbind" (:mod:`.sanitize`).
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

from .bound import OFFLINE_TIMEOUT, Guard, Interrupted
from .maygo import Blocker, teardown_order
from .report import MemdevCapacity, Report
from .sanitize import DONE, Sanitized

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
    #: what rolling back an unfinished release found on the host and did (or would do) first
    recovered: Tuple[str, ...] = ()

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
    #: each memdev's sanitize (:mod:`.sanitize`), or None for ``--no-sanitize``
    sanitized: Optional[Tuple[Sanitized, ...]] = None


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


#: the blocker ``--try-normal`` lets a release try anyway: the kernel's offline_pages() answers, EBUSY rolls back
TRY_NORMAL = "zone-normal"


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


def _by_size(rep: Report, size: int, try_normal: bool = False) -> Tuple[str, ...]:
    """The fewest releasable memdevs (whole interleave groups, with the memdevs their decoder order needs
    first) making at least ``size``: smallest first among those that alone suffice, else the largest groups
    until it is reached."""
    groups: List[Tuple[int, Tuple[str, ...]]] = []
    for m in rep.memdevs:
        g = _closure(rep, m)
        members = [x for x in rep.memdevs if x.memdev in g]
        if any(_unmet(x, g, try_normal) for x in members):
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


def _unmet(m: MemdevCapacity, names: Sequence[str], try_normal: bool = False) -> List[Blocker]:
    """``m``'s blockers, less ``decoder-order`` when every memdev it depends on is released with it
    (:func:`plan` then tears the regions down highest decoder first), and less ``zone-normal`` with
    ``--try-normal`` (the kernel's offline_pages() answers; EBUSY rolls back)."""
    together = bool(m.depends_on) and set(m.depends_on) <= set(names)
    return [
        b
        for b in m.blockers
        if not (together and b.code == "decoder-order") and not (try_normal and b.code == TRY_NORMAL)
    ]


def choose(
    rep: Report, memdevs: Sequence[str], size: Optional[int], try_normal: bool = False
) -> Tuple[MemdevCapacity, ...]:
    """The memdevs to release, or the refusal (exit 2) naming the blocker (``try_normal``: not ``zone-normal``)."""
    if bool(memdevs) == (size is not None):
        raise UsageError(
            "name the memdevs to release, or give --size, not both" if memdevs else "name the memdevs to release",
            hint="e.g. `cxlctl capacity release mem1` or `cxlctl capacity release --size 16G`",
        )
    names = _names(memdevs) if memdevs else _by_size(rep, size or 0, try_normal)
    out = []
    for n in names:
        m = rep.memdev(n)
        if m is None:
            known = ", ".join(x.memdev for x in rep.memdevs) or "none"
            raise UsageError(f"no memdev {n} (memdevs: {known})", hint="`cxlctl capacity` lists them")
        blockers = _unmet(m, names, try_normal)
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


def unfinished(host: Host) -> Optional[Dict[str, Any]]:
    """The journal of a release that stopped half-way in this boot (``releasing``: killed, or
    ``rollback-failed``), else None.  Another boot's journal is over: its regions went with that boot."""
    d = load(host)
    if d is None or d.get("state") not in (RELEASING, ROLLBACK_FAILED):
        return None
    if d.get("boot_id") and host.boot_id and d["boot_id"] != host.boot_id:
        return None
    return d


def _records(d: Dict[str, Any]) -> List[RegionRecord]:
    out = []
    for r in d.get("regions", []):
        dax = tuple(
            DaxState(x.get("name"), x.get("mode"), x.get("node"), x.get("zone"), tuple(x.get("online") or ()))
            for x in r.get("dax", [])
        )
        out.append(
            RegionRecord(
                r.get("region"),
                r.get("root_decoder"),
                tuple(r.get("memdevs") or ()),
                r.get("size"),
                r.get("granularity"),
                dax,
            )  # fmt: skip
        )
    return out


def found_on_host(host: Host, d: Dict[str, Any]) -> List[str]:
    """What the host shows of an unfinished release's regions: present or gone, each planned block's state."""
    from cxlctl.regions import dax as daxmod

    out = []
    r = host.reread()
    for rec in _records(d):
        if not r.isdir(paths.cxl_device(rec.name)):
            out.append(f"{rec.name} is gone (torn down)")
            continue
        for x in rec.dax:
            if not x.online:
                continue
            off = [b for b in x.online if daxmod.read_block(host, b).state == "offline"]
            if off:
                out.append(
                    f"{rec.name}/{x.name}: {len(off)} of {len(x.online)} block(s) offline "
                    f"({', '.join(f'memory{b}' for b in off)}), online in ZONE_{(x.zone or 'unknown').upper()} before"
                )
            else:
                out.append(f"{rec.name}/{x.name}: all {len(x.online)} block(s) online as before")
    return out


def _running(host: Host, d: Dict[str, Any]) -> bool:
    """Whether the journal's writer still runs (the live host only; a dry run takes no lock to tell)."""
    pid = d.get("pid")
    if not host.live or not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    from cxlctl.hostio.proc import alive

    return alive(pid)


def _describe(d: Dict[str, Any]) -> str:
    mds = ", ".join(str(m.get("memdev")) for m in d.get("memdevs", []))
    return (
        f"a release of {mds} did not finish (state {d.get('state')}, PID {d.get('pid')}, steps done: "
        f"{'; '.join(map(str, d.get('steps', []))) or 'none'})"
    )


def recover(host: Host, d: Dict[str, Any], log: Log, *, dry_run: bool = False) -> List[str]:
    """Roll an unfinished release back (under the lock): each offlined block online again in its zone, each
    torn-down region built again.  Returns what was found and done; raises (exit 1) what could not be."""
    found = found_on_host(host, d)
    lines = [f"{_describe(d)}; found: " + ("; ".join(found) or "nothing of it")]
    recs = _records(d)
    if dry_run:
        if _running(host, d):
            lines.append(f"PID {d.get('pid')} is still running: it may be that release, in progress")
        lines.append("it would be rolled back first (blocks online again in their zones, regions rebuilt)")
        return lines
    left: List[str] = []
    for rec in recs:
        if host.reread().isdir(paths.cxl_device(rec.name)):
            left += _online_again(host, rec, log)
        else:
            left += _rebuild(host, rec, log)
    mds = tuple(
        MemdevCapacity(
            str(m.get("memdev")),
            m.get("serial"),
            m.get("host"),
            int(m.get("capacity") or 0),
            (),
            (),
            (),
            0,
            0,
            0,
            "blocked",
            0,
            (),
            (),
        )  # fmt: skip
        for m in d.get("memdevs", [])
    )
    p = Plan(mds, tuple(recs), 0)
    steps = [str(x) for x in d.get("steps", [])]
    if left:
        try:
            save(host, p, ROLLBACK_FAILED, steps, "recovery: " + "; ".join(left))
        except StorageError:
            pass
        raise CxlctlError(
            f"{_describe(d)}; found: {'; '.join(found)}; rolling it back left: {'; '.join(left)}",
            hint=f"`cxlctl capacity` shows the regions; set them right by hand, then remove {host.path(JOURNAL)}",
        )
    save(host, p, ROLLED_BACK, steps, "rolled back by the next release: " + "; ".join(found))
    lines.append("rolled it back: every block online again in its zone, every region as it was")
    for ln in lines:
        log(ln)
    return lines


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
    """Put back online, in its zone, each block of a region's DAX devices that was online and is offline
    now (the blocks the release offlined, and one an interruption may have ended offline); what could not be."""
    from cxlctl.regions import dax as daxmod

    left = []
    for d in r.dax:
        if d.mode != "system-ram" or not d.online or not d.zone:
            continue
        back = []
        for bid in d.online:
            if daxmod.read_block(host, bid).state != "offline":
                continue
            err = daxmod.online_one(host, bid, d.zone)
            if err is None:
                back.append(bid)
            else:
                left.append(f"{d.name}: memory{bid} stays offline ({err})")
        if back:
            log(f"{d.name}: {len(back)} block(s) back online in ZONE_{d.zone.upper()}")
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


def _fail(host: Host, p: Plan, steps: List[str], e: CxlctlError, left: List[str], code: int = 1) -> CxlctlError:
    """The error a failed release raises, once rolling back left ``left`` undone (journal updated)."""
    state = ROLLBACK_FAILED if left else ROLLED_BACK
    try:
        save(host, p, state, steps, str(e))
    except StorageError:
        pass  # the failure itself is what the message reports
    if left:
        return CxlctlError(
            f"capacity release failed: {e}; rolling back was incomplete: {'; '.join(left)}",
            code=code,
            hint=f"the journal {host.path(JOURNAL)} says what each region was; `cxlctl capacity release` again "
            "finishes the rollback; `cxlctl capacity` shows where they are",
        )
    return CxlctlError(
        f"capacity release failed: {e}; rolled back: every region and block is as it was, nothing was lost",
        code=code,
        hint=e.hint or "`cxlctl capacity` shows what blocks the release",
    )


def _offline_dax(host: Host, r: RegionRecord, d: DaxState, log: Log, progress: Optional[ProgressFn]) -> None:
    """Offline the device's planned blocks through the one offline loop, under the release's guard (the
    loop puts its own blocks back on a failure; :func:`_online_again` the earlier devices')."""
    from cxlctl.regions import dax as daxmod

    daxmod.offline_blocks(host, [daxmod.read_block(host, b) for b in d.online], log, f"{r.name}/{d.name}", progress)


def _stopped(host: Host, p: Plan, e: BaseException) -> Tuple[CxlctlError, int]:
    """The failure (an error, the bound, a signal) with what the host says about the nodes, and its exit code."""
    from .stuck import explain

    nodes = sorted({d.node for r in p.regions for d in r.dax if d.online and d.node is not None})
    if isinstance(e, Interrupted):
        why = e.why + (": the kernel was still migrating, or retrying pages it cannot migrate" if e.timeout else "")
        found = explain(host, nodes)
        hint = (
            "what holds the pages: " + "; ".join(found)
            if found
            else "see `dmesg | grep -A3 'migration failure'` for the pages the kernel could not migrate"
        )
        if e.timeout:
            hint += f"; a longer bound: --timeout SECONDS (default {OFFLINE_TIMEOUT:g})"
        return CxlctlError(why, hint=hint), e.exit_code
    assert isinstance(e, CxlctlError)
    found = explain(host, nodes) if "could not be offlined" in str(e) else []
    if found:
        return CxlctlError(str(e), hint="what holds the pages: " + "; ".join(found)), e.code
    return e, e.code


def execute(
    host: Host,
    p: Plan,
    log: Log,
    progress: Optional[ProgressFn] = None,
    timeout: Optional[float] = OFFLINE_TIMEOUT,
) -> Released:
    """Run the plan under the caller's lock; on failure roll back and raise (exit 1).

    Each block's offline is bounded by ``timeout`` seconds, and SIGINT or SIGTERM
    during the release rolls it back as a failure does (:mod:`.bound`)."""
    with Guard(timeout) as guard:
        return _execute(host, p, log, progress, guard)


def _execute(host: Host, p: Plan, log: Log, progress: Optional[ProgressFn], guard: Guard) -> Released:
    from cxlctl.regions.program import destroy

    steps: List[str] = []
    save(host, p, RELEASING, steps)
    before = _used(host)
    offlined: List[RegionRecord] = []
    for r in p.regions:
        try:
            for d in r.dax:
                if d.online:
                    _offline_dax(host, r, d, log, progress)
                    steps.append(f"offlined {len(d.online)} block(s) of {d.name}")
                    save(host, p, RELEASING, steps)
            guard.check()
        except (CxlctlError, Interrupted) as e:
            err, code = _stopped(host, p, e)
            left = [x for o in (*offlined, r) for x in _online_again(host, o, log)]
            raise _fail(host, p, steps, err, left, code) from None
        offlined.append(r)
    moved = _moved(p, before, _used(host))
    torn: List[RegionRecord] = []
    for r in p.regions:
        try:
            guard.check()
            destroy(host, r.name, True, log)
        except (CxlctlError, Interrupted) as e:
            err, code = _stopped(host, p, e)
            rest = [x for x in p.regions if x not in torn and x is not r]
            # built again in commit order, the reverse of the teardown's: each takes its decoders back
            left = [x for t in (r, *reversed(torn)) for x in _rebuild(host, t, log)]
            left += [x for o in rest for x in _online_again(host, o, log)]
            raise _fail(host, p, steps, err, left, code) from None
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
    timeout: Optional[float] = OFFLINE_TIMEOUT,
    sanitize: bool = False,
    try_normal: bool = False,
) -> Tuple[Plan, Optional[Released]]:
    """Refuse (exit 2, nothing written) or plan; unless ``dry_run``, take the lock, check again and run."""
    from cxlctl.hostio.lock import TuneLock

    from .extra import gather

    d = unfinished(host)
    if dry_run:
        found = recover(host, d, log, dry_run=True) if d is not None else []
        rep = gather(host)
        return plan(host, rep, choose(rep, memdevs, size, try_normal))._replace(recovered=tuple(found)), None
    if d is None:
        rep = gather(host)
        choose(rep, memdevs, size, try_normal)  # the refusals before the lock: nothing written, not even the lock file
    with TuneLock(host.root, wait):
        d = unfinished(host)  # again under the lock: the one that wrote it is gone (it held the lock)
        recovered = recover(host, d, log) if d is not None else []
        rep = gather(host)
        p = plan(host, rep, choose(rep, memdevs, size, try_normal))._replace(recovered=tuple(recovered))
        done = execute(host, p, log, progress, timeout)
        if sanitize:
            from .sanitize import sanitize as run_sanitize

            done = done._replace(sanitized=tuple(run_sanitize(host, m.memdev, log) for m in p.memdevs))
        return p, done


# ---------------------------------------------------------------------------------- output


def _sanitized(done: Optional[Released], memdev: str) -> Optional[Sanitized]:
    for x in (done.sanitized or ()) if done is not None else ():
        if x.memdev == memdev:
            return x
    return None


def released_line(m: MemdevCapacity, san: Optional[Sanitized] = None, asked: bool = False) -> str:
    """What the operator may do with the memdev now: "safe to unbind" only once its media is wiped, or
    with ``--no-sanitize`` said."""
    serial = f"serial {m.serial:#x}" if m.serial is not None else "serial unknown"
    if san is not None and san.result == DONE:
        return f"{m.memdev} ({serial}) released and sanitized ({san.detail}): safe to unbind at the fabric manager"
    if san is not None:
        return (
            f"{m.memdev} ({serial}) released (nothing lost) but not sanitized: {san.detail}; its media keeps "
            "this host's pages: not safe to hand to another host"
        )
    return (
        f"{m.memdev} ({serial}) released, not sanitized (--no-sanitize): safe to unbind at the fabric manager; "
        "its media keeps this host's pages"
    )


def _sanitize_json(done: Optional[Released], memdev: str) -> Optional[Dict[str, Any]]:
    """``memdevs[].sanitize``: None with --no-sanitize (or a dry run); else result, security/state, detail."""
    x = _sanitized(done, memdev)
    if x is None:
        return None
    return {"result": x.result, "state": x.security, "detail": x.detail}


def sanitize_failed(done: Optional[Released]) -> List[Sanitized]:
    return [x for x in (done.sanitized or ()) if x.result != DONE] if done is not None else []


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
                "sanitize": _sanitize_json(done, m.memdev),
                "message": released_line(m, _sanitized(done, m.memdev)) if done is not None else None,
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
        "recovered": list(p.recovered),
    }
    if done is not None:
        doc["moved"] = [
            {"node": m.node, "bytes": m.bytes, "to": [{"node": n, "bytes": b} for n, b in m.to]} for m in done.moved
        ]
        doc["steps"] = list(done.steps)
    return doc


def lines(p: Plan, done: Optional[Released]) -> List[str]:
    out = [f"recovery: {x}" for x in p.recovered]
    out += [f"{m.memdev}: no region uses it, nothing to migrate or tear down" for m in p.memdevs if not m.regions]
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
    out.extend(released_line(m, _sanitized(done, m.memdev)) for m in p.memdevs)
    return out
