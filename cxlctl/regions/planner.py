"""The region planner: a pure function of (Inventory, Request) -> Plan.

Why pure: every rule the kernel enforces when a region is programmed can be
checked on the inventory first, so an impossible request fails with a precise
reason and nothing written (exit 2), and the rules are unit-tested on trees
recorded from real kernels.  The rules, with the kernel code they come from
(``drivers/cxl/core/region.c`` and ``hdm.c``, Linux 6.3-6.12):

* **kernel**: RAM regions are created through ``decoderX.Y/create_ram_region``,
  which exists from Linux 6.3 on root decoders with the RAM and type-3
  capability (``cxl_root_decoder_visible``).
* **ways**: 1, 2, 3, 4, 6, 8, 12 or 16; a multiple of the root decoder's ways
  with a power-of-two quotient (``interleave_ways_store``) — so x3/x6/x12 only
  through a root that interleaves 3-way, powers of two everywhere below.
* **positions** (``cxl_region_attach_position``, ``check_last_peer``): the
  endpoint at position p must sit below the host bridge at
  ``target_list[p % root_ways]`` of the root decoder; below that, position
  digits follow each port's targets (root digit least significant, then the
  host bridge, then each switch level).  Every port must spread the region
  evenly over a power-of-two number (≤ 8) of its dports (``cxl_port_setup_targets``).
* **granularity**: 256…16384, a power of two; equal to the root's when the root
  interleaves (``interleave_granularity_store``); and each port below is
  programmed at its parent's granularity × the parent's ways, which must stay
  ≤ 16384.
* **size**: a non-zero multiple of 256 MiB × ways (``alloc_hpa``), placed
  first-fit in the window's free space (``alloc_free_mem_region``), each memdev
  giving size/ways of free RAM DPA.
* **decoders**: each endpoint uses its next decoder in id order (``cxl_dpa_alloc``
  wants ``hdm_end + 1``); each port above uses its next free decoder
  (``match_free_decoder``); a port must not already carry a region at a higher
  address (``alloc_region_ref``: "HPA order violation").

Root-only facts (window and region addresses) may be unknown when not run as
root; the plan then says so in ``notes`` and skips only those address checks.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

from cxlctl.errors import UsageError
from cxlctl.kconfig import kernel_version
from cxlctl.model import Decoder, Inventory, Memdev
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_size

from .topo import Hop, Tree, decoder_index

SZ_256M = 256 << 20
VALID_WAYS = (1, 2, 3, 4, 6, 8, 12, 16)
MIN_GRANULARITY = 256
MAX_GRANULARITY = 16384
RAM_REGION_SINCE = (6, 3)
NEWER_KERNEL = "boot Linux 6.3 or newer (Debian 12: linux-image-6.12 from bookworm-security)"


#: ``region plan`` without options: what else it takes
ALL_HINT = "or --all: every memdev's unused RAM, the widest interleave each window allows"


class PlanError(UsageError):
    """The request cannot be satisfied; the message says why, the hint what would work."""


class Request(NamedTuple):
    memdevs: Tuple[str, ...] = ()
    ways: Optional[int] = None
    size: Optional[int] = None
    granularity: Optional[int] = None
    decoder: Optional[str] = None
    type: str = "ram"


class Level(NamedTuple):
    """What the kernel programs at one port for the region (root decoder or a switch decoder)."""

    port: str
    decoder: str
    ways: int
    granularity: int
    targets: Tuple[int, ...]  # dport ids, in interleave order


class Target(NamedTuple):
    position: int
    memdev: str
    endpoint: str
    decoder: str  # the endpoint decoder
    dpa_size: int
    mode: Optional[str]  # its current mode; the programmer sets "ram" when different
    hops: Tuple[Hop, ...]  # root first


class Plan(NamedTuple):
    root_decoder: str
    type: str
    size: int
    ways: int
    granularity: int
    resource: Optional[int]  # predicted start address (None: window address unreadable)
    window_size: Optional[int]
    window_free: Optional[int]  # largest free extent of the window before this region
    targets: Tuple[Target, ...]  # in position order
    levels: Tuple[Level, ...]  # root first, then ports top-down
    notes: Tuple[str, ...]


# --------------------------------------------------------------------------- helpers


def _ways_on_root(rways: int) -> str:
    """The region ways a root of ``rways`` takes: the VALID_WAYS that are ``rways`` times a power of two."""
    ok = [str(w) for w in VALID_WAYS if w % rways == 0 and _pow2(w // rways)]
    return (", ".join(ok[:-1]) + " or " + ok[-1] if len(ok) > 1 else "".join(ok)) + " ways"


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def ram_region_support(inv: Inventory) -> Tuple[bool, str]:
    """Can this kernel create RAM regions through sysfs at all?  (ok, reason).

    Decided by the kernel release (6.3+), or by the root decoders' ``create_ram_region``
    attribute (``Decoder.can_create_ram``) when the release is unknown.
    """
    v = kernel_version(inv.kernel)
    decs = [d for d in inv.decoders if d.kind == "root"]
    # the attribute itself decides when the kernel version is unknown; with a known 6.3+ kernel a
    # missing one only means the tree was recorded without it (the capabilities decide then)
    no_attr = bool(decs) and all(d.can_create_ram is False for d in decs)
    if (v is not None and v < RAM_REGION_SINCE) or (v is None and no_attr):
        roots = [d.name for d in decs]
        where = f"its root decoders ({', '.join(roots)})" if roots else "its root decoders"
        return False, (
            f"Linux {inv.kernel} cannot create CXL RAM regions: {where} have no create_ram_region "
            "attribute (added in Linux 6.3; this kernel only offers create_pmem_region for persistent "
            "memory), so volatile CXL capacity can be used here only through regions the firmware "
            "already committed"
        )
    return True, ""


def _fmt(n: Optional[int]) -> str:
    return format_size(n, unknown="unknown")


class _Window(NamedTuple):
    start: Optional[int]
    size: int
    used: Tuple[Tuple[Optional[int], int], ...]  # (start, size) of regions in it


def _free_extents(w: _Window) -> Optional[List[Tuple[int, int]]]:
    """Free (start, length) gaps, 256 MiB aligned; None when addresses are unknown."""
    if w.start is None or any(s is None for s, _ in w.used):
        return None
    gaps: List[Tuple[int, int]] = []
    cur = w.start
    end = w.start + w.size
    for s, z in sorted((s, z) for s, z in w.used if s is not None):
        a = -(-cur // SZ_256M) * SZ_256M
        if s > a:
            gaps.append((a, s - a))
        cur = max(cur, s + z)
    a = -(-cur // SZ_256M) * SZ_256M
    if end > a:
        gaps.append((a, end - a))
    return gaps


# ----------------------------------------------------------------------------- state


class _State:
    """What is free, derived from the inventory; updated as plans are added (``--all``)."""

    def __init__(self, inv: Inventory) -> None:
        self.inv = inv
        self.tree = Tree(inv)
        self.memdevs: Dict[str, Memdev] = {m.name: m for m in inv.memdevs}
        self.by_port: Dict[str, List[Decoder]] = {}
        for d in inv.decoders:
            self.by_port.setdefault(d.port, []).append(d)
        for lst in self.by_port.values():
            lst.sort(key=lambda d: decoder_index(d.name))
        self.region_committed = {r.name: r.committed for r in inv.regions}
        self.region_start = {r.name: r.resource for r in inv.regions}
        # mutable parts
        self.ep_next: Dict[str, int] = {}
        self.ram_used: Dict[str, int] = {}
        self.pmem_alloc: Dict[str, str] = {}
        for e in inv.endpoints:
            decs = self.by_port.get(e.name, [])
            # allocated DPA or a region: ``size`` alone is no sign, the kernel leaves stale ranges there
            used = [decoder_index(d.name) for d in decs if (d.dpa_size or 0) > 0 or d.region]
            self.ep_next[e.name] = max(used) + 1 if used else 0
            if e.memdev:
                ram = [d for d in decs if (d.dpa_size or 0) > 0 and (d.mode or "ram") == "ram"]
                if ram and all(d.dpa_resource is not None for d in ram):
                    self.ram_used[e.memdev] = max((d.dpa_resource or 0) + (d.dpa_size or 0) for d in ram)
                else:
                    self.ram_used[e.memdev] = sum(d.dpa_size or 0 for d in ram)
                pm = [d for d in decs if (d.dpa_size or 0) > 0 and d.mode not in (None, "ram", "none")]
                if pm:
                    self.pmem_alloc[e.memdev] = pm[0].name
        self.port_next: Dict[str, int] = {}
        self.port_regions: Dict[str, Dict[str, Optional[int]]] = {}
        for p in inv.ports + inv.endpoints:
            decs = self.by_port.get(p.name, [])
            used = [decoder_index(d.name) for d in decs if d.region]
            # the kernel takes decoder commit_end + 1; a decoder left committed without a region
            # (torn down out of order) still counts, and decoders_committed shows it
            self.port_next[p.name] = max(max(used) + 1 if used else 0, p.decoders_committed or 0)
            self.port_regions[p.name] = {d.region: self.region_start.get(d.region) for d in decs if d.region}
        # a port with a free decoder below one in use (a region torn down out of order, 6.12+): the
        # kernel gives it no new decoder (cxlctl.capacity.maygo.port_holes names the functions)
        from cxlctl.capacity.maygo import hole_text, port_holes

        self.holes: Dict[str, str] = {h.port: hole_text(h) for h in port_holes(inv)}
        self.windows: Dict[str, _Window] = {}
        for d in inv.decoders:
            if d.kind == "root":
                inwin = tuple((r.resource, r.size or 0) for r in inv.regions if r.root_decoder == d.name and r.size)
                self.windows[d.name] = _Window(d.resource, d.size or 0, inwin)
        self.planned = 0

    # -- queries ----------------------------------------------------------------------
    def root_decoders(self) -> List[Decoder]:
        return sorted(
            (d for d in self.inv.decoders if d.kind == "root"),
            key=lambda d: (d.port, decoder_index(d.name)),
        )

    def free_ram(self, memdev: str) -> int:
        m = self.memdevs[memdev]
        return max(0, (m.ram_size or 0) - self.ram_used.get(memdev, 0))

    def endpoint_decoder(self, endpoint: str) -> Tuple[Optional[Decoder], str]:
        idx = self.ep_next.get(endpoint, 0)
        for d in self.by_port.get(endpoint, []):
            if decoder_index(d.name) == idx:
                if d.locked:
                    return None, f"{d.name} (the next decoder of {endpoint} in id order) is locked by firmware"
                return d, ""
        n = len(self.by_port.get(endpoint, []))
        return None, f"{endpoint} has no free decoder (all {n} in use; the kernel allocates them in id order)"

    def port_decoder(self, port: str) -> Tuple[Optional[Decoder], str]:
        decs = self.by_port.get(port, [])
        for d in decs:
            if d.region and self.region_committed.get(d.region) is False:
                return None, (
                    f"{port}'s decoder {d.name} is held by {d.region}, which is not committed: "
                    f"finish or destroy {d.region} first"
                )
        idx = self.port_next.get(port, 0)
        if port in self.holes:
            return None, self.holes[port]
        for d in decs:
            if decoder_index(d.name) == idx:
                if d.locked:
                    return None, f"{d.name} (the next decoder of {port}) is locked by firmware"
                return d, ""
        return None, f"{port} has no free decoder (all {len(decs)} in use by other regions)"

    def usable(self, memdev: str) -> Tuple[bool, str]:
        m = self.memdevs.get(memdev)
        if m is None:
            return False, f"no memdev {memdev}"
        ep = self.tree.endpoint_of_memdev.get(memdev)
        if ep is None or m.driver is None:
            return False, f"{memdev} is not bound to cxl_mem (no endpoint port): check `modprobe cxl_mem` and dmesg"
        if not m.ram_size:
            return False, f"{memdev} has no volatile (RAM) capacity"
        if memdev in self.pmem_alloc:
            return False, (
                f"{memdev} has persistent-memory DPA allocated ({self.pmem_alloc[memdev]}); the kernel allocates "
                "DPA in decoder order, so no RAM can be added after it"
            )
        if self.free_ram(memdev) < SZ_256M:
            return False, f"{memdev} has no free RAM capacity ({_fmt(self.free_ram(memdev))} left, 256 MiB needed)"
        d, why = self.endpoint_decoder(ep)
        if d is None:
            return False, why
        return True, ""

    # -- updates (for --all) -------------------------------------------------------------
    def add(self, plan: Plan) -> None:
        self.planned += 1
        name = f"<planned {self.planned}>"
        for t in plan.targets:
            self.ep_next[t.endpoint] = decoder_index(t.decoder) + 1
            self.ram_used[t.memdev] = self.ram_used.get(t.memdev, 0) + t.dpa_size
            self.port_regions.setdefault(t.endpoint, {})[name] = plan.resource
        for lv in plan.levels[1:]:
            self.port_next[lv.port] = decoder_index(lv.decoder) + 1
            self.port_regions.setdefault(lv.port, {})[name] = plan.resource
        w = self.windows[plan.root_decoder]
        self.windows[plan.root_decoder] = w._replace(used=w.used + ((plan.resource, plan.size),))


# ------------------------------------------------------------------------- positions


class _Assign(NamedTuple):
    positions: Dict[str, int]
    levels: List[Tuple[str, Tuple[int, ...], int]]  # (port, dports in order, depth below root)


def _assign(st: _State, rd: Decoder, chains: Dict[str, Tuple[Hop, ...]], ways: int) -> _Assign:
    """Interleave position of each memdev, or PlanError naming the rule broken."""
    tl = rd.target_list
    rways = rd.interleave_ways or 1
    slots: Dict[int, List[str]] = {}
    for m, hops in chains.items():
        hb_dport = hops[0].dport
        if hb_dport not in tl:
            hb = st.tree.host_bridge_of(rd.port, hb_dport) or f"dport {hb_dport}"
            reach = [d.name for d in st.root_decoders() if hb_dport in d.target_list and d.name != rd.name]
            raise PlanError(
                f"{m} is below host bridge {hb} (root dport {hb_dport}), which {rd.name} does not target "
                f"(its target list: {_tl_names(st, rd)})",
                hint=f"windows that reach {hb}: {', '.join(reach)}" if reach else "no window reaches it",
            )
        slots.setdefault(tl.index(hb_dport), []).append(m)
    per = ways // rways
    for s in range(rways):
        got = slots.get(s, [])
        if len(got) != per:
            hb = st.tree.host_bridge_of(rd.port, tl[s]) or f"dport {tl[s]}"
            raise PlanError(
                f"{rd.name} interleaves {rways}-way across host bridges ({_tl_names(st, rd)}): a {ways}-way "
                f"region on it needs {per} memdev(s) below each of them, but {hb} has "
                f"{len(got)} of the chosen ({', '.join(sorted(got)) or 'none'})",
                hint="choose memdevs spread evenly over the window's host bridges, or another window (--decoder)",
            )
    positions: Dict[str, int] = {}
    levels: List[Tuple[str, Tuple[int, ...], int]] = []
    for s, members in sorted(slots.items()):
        sub = _subtree(st, members, chains, 1, levels)
        for m, k in sub.items():
            positions[m] = s + rways * k
    return _Assign(positions, levels)


def _subtree(
    st: _State,
    members: List[str],
    chains: Dict[str, Tuple[Hop, ...]],
    depth: int,
    levels: List[Tuple[str, Tuple[int, ...], int]],
) -> Dict[str, int]:
    """Position digits of ``members`` below the port at ``chains[m][depth]``."""
    if depth >= len(chains[members[0]]):
        if len(members) != 1:  # pragma: no cover - a memdev appears once
            raise PlanError(f"memdevs {', '.join(members)} share one endpoint")
        return {members[0]: 0}
    port = chains[members[0]][depth].port
    groups: Dict[int, List[str]] = {}
    for m in members:
        groups.setdefault(chains[m][depth].dport, []).append(m)
    used = sorted(groups)
    c = len(used)
    sizes = {d: len(g) for d, g in groups.items()}
    if len(set(sizes.values())) != 1:
        desc = ", ".join(f"dport {d}: {sizes[d]} ({', '.join(sorted(groups[d]))})" for d in used)
        raise PlanError(
            f"{port} would carry the region unevenly ({desc}): every dport a port uses must lead to the same "
            "number of the region's memdevs",
            hint="choose memdevs so each port splits them evenly",
        )
    if not _pow2(c) or c > 8:
        raise PlanError(
            f"{port} would interleave {c}-way across dports {', '.join(map(str, used))}: ports below the root "
            "interleave only 1, 2, 4 or 8 ways (x3/x6/x12 exist only at the root)",
            hint="use a power-of-two number of memdevs below each host bridge and switch",
        )
    nd = len(st.tree.ports[port].dports) if port in st.tree.ports else c
    if c > nd:  # pragma: no cover - cannot use more dports than exist
        raise PlanError(f"{port} has only {nd} dports")
    levels.append((port, tuple(used), depth))
    out: Dict[str, int] = {}
    for i, d in enumerate(used):
        sub = _subtree(st, groups[d], chains, depth + 1, levels)
        for m, k in sub.items():
            out[m] = i + c * k
    return out


def _tl_names(st: _State, rd: Decoder) -> str:
    names = []
    for t in rd.target_list:
        hb = st.tree.host_bridge_of(rd.port, t)
        names.append(f"{t}={hb}" if hb else str(t))
    return ", ".join(names) or "empty"


# ------------------------------------------------------------------------------- plan


def _granularity(rd: Decoder, req: Optional[int]) -> int:
    rways = rd.interleave_ways or 1
    rgran = rd.interleave_granularity
    if req is None:
        g = rgran if rgran else MIN_GRANULARITY
    else:
        g = req
    if not _pow2(g) or not MIN_GRANULARITY <= g <= MAX_GRANULARITY:
        raise PlanError(
            f"granularity {g} is invalid: it must be a power of two from 256 to 16384 bytes",
            hint="e.g. --granularity 4096",
        )
    if rways > 1 and rgran is not None and g != rgran:
        raise PlanError(
            f"granularity {g} is not allowed on {rd.name}: it interleaves {rways}-way across host bridges at "
            f"{rgran} bytes, and the kernel requires the region to use the root's granularity then",
            hint=f"use --granularity {rgran} (or leave it out)",
        )
    return g


def _check_levels(
    rd: Decoder, gran: int, levels: List[Tuple[str, Tuple[int, ...], int]], chains: Dict[str, Tuple[Hop, ...]]
) -> List[Tuple[str, Tuple[int, ...], int]]:
    """Granularity the kernel programs at each port; PlanError if it exceeds 16384.

    ``cxl_port_setup_targets`` (Linux 6.8+): a port's granularity is its
    parent's granularity times the parent's ways, starting from the region's
    granularity times the root's ways (a 3/6/12-way root counts as 1/2/4, the
    power-of-two part that routes address bits).  This holds for every port on
    the path, interleaving or not.
    """
    rways = rd.interleave_ways or 1
    base_iw = rways if _pow2(rways) else rways // 3
    parent_of: Dict[str, str] = {}
    for hops in chains.values():
        for i in range(1, len(hops)):
            parent_of[hops[i].port] = hops[i - 1].port
    result: Dict[str, Tuple[int, int]] = {}  # port -> (ig, iw)
    out = []
    for port, targets, _depth in sorted(levels, key=lambda x: x[2]):
        par = parent_of.get(port)
        pig, piw = result.get(par, (gran, base_iw)) if par is not None else (gran, base_iw)
        ig = pig * piw
        if ig > MAX_GRANULARITY:
            above = f"{piw}-way {par}" if par in result else f"the {rways}-way root"
            raise PlanError(
                f"granularity {gran} is too large for this hierarchy: {port} sits below {above} and would need "
                f"granularity {ig} (the kernel programs each port at its parent's granularity x ways; the "
                "maximum is 16384)",
                hint=f"use --granularity {gran * MAX_GRANULARITY // ig} or less"
                if rways == 1
                else "use a window with a smaller granularity, or fewer ways below the host bridges",
            )
        result[port] = (ig, len(targets))
        out.append((port, targets, ig))
    return out


def _check_window(
    st: _State, rd: Decoder, memdevs: Sequence[str], req: Request, explain: bool, notes: List[str]
) -> None:
    """The root decoder can hold a RAM region of ``len(memdevs)`` ways (PlanError otherwise)."""
    if req.type != "ram":
        raise PlanError(f"--type {req.type} is not supported: cxlctl builds RAM regions only", hint="use --type ram")
    if rd.cap_type3 is False or rd.cap_ram is False:
        caps = [c for c, v in (("ram", rd.cap_ram), ("pmem", rd.cap_pmem), ("type3", rd.cap_type3)) if v]
        raise PlanError(
            f"{rd.name} cannot hold RAM regions of type-3 memory (capabilities: {', '.join(caps) or 'none'})",
            hint="choose a window with volatile_capable and type3_capable (cxlctl status)",
        )
    if rd.locked:
        notes.append(f"{rd.name} is locked (its window was set by firmware; regions can still be created in it)")
    ways = len(memdevs)
    rways = rd.interleave_ways or 1
    if ways not in VALID_WAYS:
        raise PlanError(
            f"{ways} memdevs cannot form one region: the kernel supports 1, 2, 3, 4, 6, 8, 12 or 16 ways",
            hint="choose fewer or more memdevs",
        )
    if ways % rways or not _pow2(ways // rways):
        ok = [w for w in VALID_WAYS if w % rways == 0 and _pow2(w // rways)]
        why = (
            f"a {ways}-way region cannot use {rd.name}: it interleaves {rways}-way across host bridges, so "
            f"regions on it have {', '.join(map(str, ok))} ways (a multiple of {rways} with a power-of-two quotient)"
        )
        if ways % 3 == 0 and rways % 3:
            why += (
                f"; x{ways} needs a window that interleaves 3-way at the root, because host bridges and "
                "switches interleave only by powers of two"
            )
        raise PlanError(why, hint=_other_windows(st, rd, memdevs, req) if explain else "")


def _memdev_chains(st: _State, rd: Decoder, memdevs: Sequence[str]) -> Dict[str, Tuple[Hop, ...]]:
    """Each memdev's port chain up to the root; each must be usable and below ``rd``'s port."""
    chains: Dict[str, Tuple[Hop, ...]] = {}
    for m in memdevs:
        ok_m, why = st.usable(m)
        if not ok_m:
            raise PlanError(why)
        ep = st.tree.endpoint_of_memdev[m]
        root, hops, err = st.tree.chain(ep)
        if err or root is None:
            raise PlanError(f"{m}: {err}")
        if root != rd.port:
            raise PlanError(f"{m} is below {root}, not {rd.port} (the bus of {rd.name})")
        chains[m] = hops
    return chains


class _Space(NamedTuple):
    window: _Window
    gaps: Optional[List[Tuple[int, int]]]  # free extents (start, size); None: addresses unknown
    largest: int  # the largest free extent


def _window_space(st: _State, rd: Decoder, notes: List[str]) -> _Space:
    """The free extents of ``rd``'s window (assumed contiguous when addresses are root-only)."""
    w = st.windows.get(rd.name, _Window(None, rd.size or 0, ()))
    gaps = _free_extents(w)
    if gaps is None:
        free = max(0, w.size - sum(z for _, z in w.used))
        notes.append(
            f"{rd.name}'s address (decoder start) or its regions' addresses are root-only: the plan assumes "
            f"its {_fmt(free)} of free space is contiguous and skips the address-order check"
        )
        return _Space(window=w, gaps=None, largest=free)
    return _Space(window=w, gaps=gaps, largest=max((z for _, z in gaps), default=0))


def _region_size(st: _State, rd: Decoder, memdevs: Sequence[str], req: Request, space: _Space) -> int:
    """The requested size checked against the memdevs and the window, or the largest that fits."""
    ways = len(memdevs)
    largest = space.largest
    per_min = min(st.free_ram(m) for m in memdevs)
    per_max = per_min // SZ_256M * SZ_256M
    unit = SZ_256M * ways
    if req.size is None:
        size = min(per_max * ways, largest // unit * unit)
        if size <= 0:
            if per_max * ways <= 0:
                raise PlanError(f"the chosen memdevs have no free RAM capacity ({', '.join(memdevs)})")
            raise PlanError(
                f"{rd.name} has no room for a {ways}-way region: its largest free extent is {_fmt(largest)}, "
                f"less than {_fmt(unit)} (256 MiB x {ways} ways)",
                hint="destroy a region in this window or choose another window",
            )
        return size
    size = req.size
    if size <= 0 or size % unit:
        lo = size // unit * unit
        sugg = ", ".join(format_size(x) for x in (lo, lo + unit) if x > 0)
        raise PlanError(
            f"size {_fmt(size)} is not a multiple of {_fmt(unit)} (256 MiB x {ways} ways)",
            hint=f"use {sugg}" if sugg else f"use a multiple of {_fmt(unit)}",
        )
    if size // ways > per_min:
        short = sorted((m for m in memdevs if st.free_ram(m) < size // ways), key=str)
        raise PlanError(
            f"size {_fmt(size)} needs {_fmt(size // ways)} of free RAM capacity per memdev (size / {ways} ways), "
            "but " + ", ".join(f"{m} has {_fmt(st.free_ram(m))}" for m in short),
            hint=f"the largest size these memdevs allow is {_fmt(per_max * ways)}",
        )
    if size > largest:
        raise PlanError(
            f"size {_fmt(size)} does not fit in {rd.name}: its largest free extent is {_fmt(largest)} "
            f"(window {_fmt(space.window.size)})",
            hint=f"use at most {_fmt(largest // unit * unit)}" if largest >= unit else "choose another window",
        )
    return size


def _endpoint_targets(
    st: _State, positions: Dict[str, int], chains: Dict[str, Tuple[Hop, ...]], per_dev: int
) -> Dict[int, Target]:
    """The free endpoint decoder of each memdev, by interleave position."""
    targets_by_pos: Dict[int, Target] = {}
    for m, pos in positions.items():
        ep = st.tree.endpoint_of_memdev[m]
        d, why = st.endpoint_decoder(ep)
        if d is None:  # pragma: no cover - usable() checked it
            raise PlanError(why)
        targets_by_pos[pos] = Target(pos, m, ep, d.name, per_dev, d.mode, chains[m])
    return targets_by_pos


def _port_levels(st: _State, rd: Decoder, gran: int, lvl: List[Tuple[str, Tuple[int, ...], int]]) -> List[Level]:
    """The decoders to program, top-down: the root's, then a free decoder of each switch/host-bridge port."""
    levels: List[Level] = [
        Level(rd.port, rd.name, rd.interleave_ways or 1, rd.interleave_granularity or gran, tuple(rd.target_list))
    ]
    for port, tg, ig in lvl:
        d, why = st.port_decoder(port)
        if d is None:
            raise PlanError(why, hint="destroy a region that uses this port, or choose memdevs below other ports")
        levels.append(Level(port, d.name, len(tg), ig, tg))
    return levels


def _check_hpa_order(st: _State, ports_used: Sequence[str], resource: Optional[int]) -> bool:
    """No port may already carry a region at a higher address; True when some address was unknown."""
    unknown = False
    for p in ports_used:
        for rname, start in sorted(st.port_regions.get(p, {}).items()):
            if start is None or resource is None:
                unknown = True
                continue
            if start >= resource:
                raise PlanError(
                    f"{rname} already uses {p} at a higher address ({start:#x}) than this region would get "
                    f"({resource:#x}): the kernel commits a port's decoders in address order "
                    '("HPA order violation")',
                    hint=f"destroy {rname} first and create the regions in address order, or use another window",
                )
    return unknown


def _plan_on(st: _State, rd: Decoder, memdevs: Sequence[str], req: Request, explain: bool = True) -> Plan:
    """Plan a region of ``memdevs`` on root decoder ``rd``; PlanError if impossible."""
    notes: List[str] = []
    _check_window(st, rd, memdevs, req, explain, notes)
    ways = len(memdevs)
    gran = _granularity(rd, req.granularity)
    chains = _memdev_chains(st, rd, memdevs)
    assign = _assign(st, rd, chains, ways)
    lvl = _check_levels(rd, gran, assign.levels, chains)
    space = _window_space(st, rd, notes)
    size = _region_size(st, rd, memdevs, req, space)
    resource: Optional[int] = None
    if space.gaps is not None:
        resource = next((s for s, z in space.gaps if z >= size), None)
    targets_by_pos = _endpoint_targets(st, assign.positions, chains, size // ways)
    levels = _port_levels(st, rd, gran, lvl)
    ports_used = [lv.port for lv in levels[1:]] + [t.endpoint for t in targets_by_pos.values()]
    if _check_hpa_order(st, ports_used, resource) and space.gaps is not None:
        notes.append("some regions on the same ports have unknown addresses; the address-order check was partial")
    return Plan(
        root_decoder=rd.name,
        type=req.type,
        size=size,
        ways=ways,
        granularity=gran,
        resource=resource,
        window_size=space.window.size,
        window_free=space.largest,
        targets=tuple(targets_by_pos[p] for p in sorted(targets_by_pos)),
        levels=tuple(levels),
        notes=tuple(notes),
    )


def _other_windows(st: _State, rd: Decoder, memdevs: Sequence[str], req: Request) -> str:
    ok = []
    for d in st.root_decoders():
        if d.name == rd.name:
            continue
        try:
            _plan_on(st, d, memdevs, req._replace(decoder=d.name, size=None), explain=False)
            ok.append(d.name)
        except PlanError:
            continue
    if ok:
        return f"--decoder {ok[0]} can hold these memdevs" + (f" (also: {', '.join(ok[1:])})" if ok[1:] else "")
    return "no other window can hold exactly these memdevs; choose others (--ways N picks them)"


# ------------------------------------------------------------------------ selection


def _select(st: _State, rd: Decoder, ways: int, need: int, avoid: Set[str]) -> Optional[List[str]]:
    """Pick ``ways`` usable memdevs below ``rd`` that form a valid interleave, widest spread first."""
    rways = rd.interleave_ways or 1
    if ways % rways or not _pow2(ways // rways):
        return None
    per = ways // rways
    out: List[str] = []
    for t in rd.target_list:
        hb = st.tree.host_bridge_of(rd.port, t)
        if hb is None:
            return None
        got = _select_below(st, hb, per, need, avoid | set(out))
        if got is None:
            return None
        out += got
    return out


def _select_below(st: _State, port: str, k: int, need: int, avoid: Set[str]) -> Optional[List[str]]:
    p = st.tree.ports.get(port)
    if p is None:
        return None
    if p.kind == "endpoint":
        m = p.memdev
        if k != 1 or not m or m in avoid:
            return None
        ok, _ = st.usable(m)
        return [m] if ok and st.free_ram(m) >= need else None
    kids = st.tree.children.get(port, [])
    c = 1
    while c * 2 <= min(k, 8, len(kids)):
        c *= 2
    while c >= 1:
        if k % c == 0:
            picked: List[str] = []
            n = 0
            for _, child in kids:
                got = _select_below(st, child, k // c, need, avoid | set(picked))
                if got is not None:
                    picked += got
                    n += 1
                    if n == c:
                        return picked
        c //= 2
    return None


# ------------------------------------------------------------------------------- API


def plan(inv: Inventory, req: Request) -> Plan:
    """The plan for one region, or :class:`PlanError` saying why not and what would work."""
    ok, why = ram_region_support(inv)
    if not ok:
        raise PlanError(why, hint=NEWER_KERNEL)
    st = _State(inv)
    return _plan(st, req)


def _plan(st: _State, req: Request) -> Plan:
    inv = st.inv
    roots = st.root_decoders()
    if not roots:
        raise PlanError("no CXL root decoder (window) found: no CXL bus, or cxl_acpi is not loaded")
    if req.decoder is not None:
        rd = next((d for d in roots if d.name == req.decoder), None)
        if rd is None:
            raise PlanError(
                f"{req.decoder} is not a root decoder (windows: {', '.join(d.name for d in roots)})",
                hint="pass one of the root decoders cxlctl status lists",
            )
        cands = [rd]
    else:
        cands = roots
    memdevs = tuple(req.memdevs)
    if memdevs:
        seen: Set[str] = set()
        for m in memdevs:
            if m in seen:
                raise PlanError(f"{m} is listed twice", hint="each memdev can take one position")
            seen.add(m)
            if inv.memdev(m) is None:
                known = ", ".join(x.name for x in inv.memdevs) or "none"
                raise PlanError(f"no memdev {m} (memdevs: {known})")
        if req.ways is not None and req.ways != len(memdevs):
            raise PlanError(f"--ways {req.ways} contradicts the {len(memdevs)} memdevs given", hint="give one of them")
        if len(cands) == 1:
            return _plan_on(st, cands[0], memdevs, req)
        reasons = []
        for rd in cands:
            try:
                return _plan_on(st, rd, memdevs, req)
            except PlanError as e:
                reasons.append(f"{rd.name}: {e}")
        raise PlanError(
            f"no window can hold a region of {', '.join(memdevs)}: " + "; ".join(reasons),
            hint="choose memdevs one window can reach evenly (--ways N picks them automatically)",
        )
    if req.ways is None:
        raise PlanError("say which memdevs to use (--memdevs mem0,mem1) or how many (--ways N)", hint=ALL_HINT)
    if req.ways not in VALID_WAYS:
        raise PlanError(f"--ways {req.ways} is invalid: the kernel supports 1, 2, 3, 4, 6, 8, 12 or 16 ways")
    if req.size:
        _check_size_fits(st, cands, req.size, req.ways)
    need = (req.size // req.ways) if req.size else SZ_256M
    reasons = []
    for rd in cands:
        picked = _select(st, rd, req.ways, need, set())
        if picked is None:
            rways = rd.interleave_ways or 1
            if req.ways % rways or not _pow2(req.ways // rways):
                why = f"{req.ways} ÷ {rways} " + (
                    "leaves a remainder" if req.ways % rways else f"= {req.ways // rways}, not a power of two"
                )
                reasons.append(f"{rd.name} interleaves {rways}-way, so it takes {_ways_on_root(rways)} ({why})")
            else:
                reasons.append(f"{rd.name} cannot reach {req.ways} free memdevs evenly")
            continue
        try:
            return _plan_on(st, rd, picked, req)
        except PlanError as e:
            reasons.append(f"{rd.name}: {e}")
    usable = [m.name for m in inv.memdevs if st.usable(m.name)[0]]
    raise PlanError(
        f"no window can hold a {req.ways}-way region: " + "; ".join(reasons),
        hint=f"free memdevs: {', '.join(usable) or 'none'}"
        + (
            "; the kernel takes a region's ways only as its window's ways times a power of two "
            "(interleave_ways_store), so 3, 6 and 12 ways need a window that interleaves 3, 6 or 12 ways"
            if req.ways % 3 == 0
            and not any(
                req.ways % (rd.interleave_ways or 1) == 0 and _pow2(req.ways // (rd.interleave_ways or 1))
                for rd in cands
            )
            else ""
        ),
    )


def _check_size_fits(st: _State, cands: Sequence[Decoder], size: int, ways: int) -> None:
    """Say plainly when ``--size`` is beyond what the host has, and by how much.

    Without this a too-large size shows up only as "cannot reach N free memdevs
    evenly" for every window, which points at the wrong cause.
    """
    free = {m.name: st.free_ram(m.name) for m in st.inv.memdevs if st.usable(m.name)[0]}
    total = sum(free.values())
    keep = "leave --size out to use all that fits"
    if size > total:
        raise PlanError(
            f"size {_fmt(size)} exceeds the free CXL RAM capacity ({_fmt(total)} on {len(free)} free memdevs) "
            f"by {_fmt(size - total)}",
            hint=keep,
        )
    window = max(cands, key=lambda d: d.size or 0)
    if size > (window.size or 0):
        raise PlanError(
            f"size {_fmt(size)} exceeds the largest CXL window ({window.name}, {_fmt(window.size or 0)}) "
            f"by {_fmt(size - (window.size or 0))}",
            hint=keep,
        )
    per, most = size // ways, max(free.values(), default=0)
    if per > most:
        raise PlanError(
            f"size {_fmt(size)} needs {_fmt(per)} of free RAM capacity per memdev (size / {ways}-way); "
            f"the most any free memdev has is {_fmt(most)}, {_fmt(per - most)} short",
            hint=f"use at most {_fmt(most // SZ_256M * SZ_256M * ways)} at {ways}-way, or more ways",
        )


#: the most regions one ``--all`` plans or creates (capacity is finite; this bounds a runaway loop)
MAX_REGIONS = 64


#: what ``region plan/create --all`` say (exit 0) when every memdev's RAM is already in a region
NOTHING_TO_DO = "nothing to do: every memdev's RAM is already in a region"


def plan_all(inv: Inventory, req: Request) -> List[Plan]:
    """Use all unused CXL RAM capacity: repeatedly the widest valid region any window allows.

    No unused capacity is no plan (``[]``), not an error: ``region create --all`` is idempotent,
    so a boot script can run it on every boot.

    Ties go to the larger region, then the lower decoder.  Each step's plan
    sees the capacity, decoders and window space of the ones before it.
    """
    ok, why = ram_region_support(inv)
    if not ok:
        raise PlanError(why, hint=NEWER_KERNEL)
    st = _State(inv)
    plans: List[Plan] = []
    roots = [d for d in st.root_decoders() if req.decoder in (None, d.name)]
    if req.decoder is not None and not roots:
        raise PlanError(f"{req.decoder} is not a root decoder")
    while True:
        best: Optional[Plan] = None
        for rd in roots:
            for ways in sorted(VALID_WAYS, reverse=True):
                picked = _select(st, rd, ways, SZ_256M, set())
                if picked is None:
                    continue
                try:
                    p = _plan_on(
                        st, rd, picked, req._replace(memdevs=tuple(picked), ways=None, size=None, decoder=rd.name)
                    )
                except PlanError:
                    continue
                if best is None or (p.ways, p.size) > (best.ways, best.size):
                    best = p
                break
        if best is None:
            break
        plans.append(best)
        st.add(best)
        if len(plans) >= MAX_REGIONS:  # pragma: no cover - capacity is finite; belt and braces
            break
    if not plans:
        usable = [m.name for m in inv.memdevs if st.usable(m.name)[0]]
        if usable:  # capacity is there but cannot be placed: that is a problem to report
            raise PlanError(f"no unused CXL RAM capacity can form a region (free memdevs: {', '.join(usable)})")
        # nothing unused: a boot script running ``region create --all`` on every boot has no work
    return plans


def destroy_blockers(inv: Inventory, region: str) -> List[str]:
    """Regions that must go before ``region`` can be torn down cleanly (the kernel frees a port's
    decoders from the highest down: :func:`cxlctl.capacity.maygo.must_go_first` names the functions)."""
    from cxlctl.capacity.maygo import must_go_first

    return [
        f"{other} (it uses {', '.join(w.split(', after ')[0] for w in why)}, after this region's decoder there)"
        for other, why in must_go_first(inv, region).items()
    ]
