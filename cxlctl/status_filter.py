"""``status --memdev/--region/--decoder/--node``: the inventory cut to some objects and what relates to them.

Why the semantics of ``cxl list`` (ndctl's ``cxl/filter.c``): operators type
``cxl list -m mem0`` and ``-r region0`` by habit, and expect the same answer here.
There, each filter is a condition every listed object must meet through its
relations, and the conditions add up: with ``-m mem0`` a decoder is listed when it
routes to mem0 (``util_cxl_decoder_filter_by_memdev``: a decoder whose targets lead
to the memdev), with ``-r region0`` when region0 is under it or it belongs to
region0 (``util_cxl_decoder_filter_by_region``), and ``-m mem0 -r region0`` keeps
what meets both.  cxlctl adds ``--node``, the NUMA node a region's memory is
online in, and applies the same rule to what ``status`` shows besides: regions, DAX
devices, NUMA nodes and tiers.  The ports on the way from a kept memdev to its
root stay, so the topology tree still reads from the root down; the kernel knobs
and weighted-interleave weights are host-wide and stay as they are; the totals are
recomputed over what is kept (:func:`cxlctl.derive.totals`).

A name that is not there is a usage error naming the ones that are (exit 2), as a
typo should not read as "nothing matched".
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from cxlctl.errors import UsageError
from cxlctl.model import Decoder, Inventory, Memdev, Node, Port, Region
from cxlctl.namedrecord import NamedTuple


class Filters(NamedTuple):
    """The names asked for (empty: that filter is not given)."""

    memdevs: FrozenSet[str] = frozenset()
    regions: FrozenSet[str] = frozenset()
    decoders: FrozenSet[str] = frozenset()
    nodes: FrozenSet[int] = frozenset()

    @property
    def given(self) -> bool:
        return bool(self.memdevs or self.regions or self.decoders or self.nodes)


def names(values: Sequence[str], option: str) -> FrozenSet[str]:
    """Repeated options and comma lists (``-m mem0,mem1 -m mem2``), as ``cxl list`` takes them."""
    out: Set[str] = set()
    for v in values:
        for part in v.split(","):
            part = part.strip()
            if not part:
                raise UsageError(f"{option}: empty name in {v!r}", hint=f"give names separated by commas: {option} A,B")
            out.add(part)
    return frozenset(out)


def node_ids(values: Sequence[str]) -> FrozenSet[int]:
    """``--node 1,2``: ASCII decimal node ids."""
    from cxlctl.parse import is_decimal

    out: Set[int] = set()
    for n in names(values, "--node"):
        if not is_decimal(n) or len(n) > 9:
            raise UsageError(f"--node {n!r} is not a node number", hint="give NUMA node ids: --node 1 or --node 1,2")
        out.add(int(n))
    return frozenset(out)


def _check(asked: FrozenSet[str], have: Sequence[str], what: str, option: str) -> None:
    """Exit 2 for a name that is not there, naming the ones that are."""
    missing = sorted(asked - set(have))
    if not missing:
        return
    known = ", ".join(have) if have else "none"
    raise UsageError(
        f"{option}: no {what} {', '.join(missing)} on this host ({what}s: {known})",
        hint=f"give one of the {what}s named above",
    )


def _memdev_routes(inv: Inventory) -> Dict[str, Set[Tuple[str, str]]]:
    """memdev → every (port, dport name) on its way to the root: what a decoder's target list routes by."""
    by_name: Dict[str, Port] = {p.name: p for p in inv.buses + inv.ports + inv.endpoints}
    out: Dict[str, Set[Tuple[str, str]]] = {}
    for m in inv.memdevs:
        hops: Set[Tuple[str, str]] = set()
        port = by_name.get(m.endpoint or "")
        seen = 0
        while port is not None and port.parent and seen < 64:  # bounded: a damaged tree may loop
            if port.parent_dport:
                hops.add((port.parent, port.parent_dport))
            port = by_name.get(port.parent)
            seen += 1
        out[m.name] = hops
    return out


def _ancestors(inv: Inventory, memdevs: Set[str]) -> Set[str]:
    """The ports from these memdevs' endpoints up to their roots."""
    by_name: Dict[str, Port] = {p.name: p for p in inv.buses + inv.ports + inv.endpoints}
    out: Set[str] = set()
    for m in inv.memdevs:
        if m.name not in memdevs:
            continue
        port = by_name.get(m.endpoint or "")
        while port is not None and port.name not in out:
            out.add(port.name)
            port = by_name.get(port.parent or "")
    return out


def _decoder_memdevs(inv: Inventory) -> Dict[str, Set[str]]:
    """decoder → the memdevs it routes to: an endpoint decoder its own memdev; a root or switch
    decoder each memdev one of its targets (dport ids of its port) leads to."""
    routes = _memdev_routes(inv)
    ports: Dict[str, Port] = {p.name: p for p in inv.buses + inv.ports + inv.endpoints}
    out: Dict[str, Set[str]] = {}
    for d in inv.decoders:
        if d.memdev:
            out[d.name] = {d.memdev}
            continue
        port = ports.get(d.port)
        names_by_id = {dp.id: {dp.name, dp.alias} - {None} for dp in port.dports} if port else {}
        targets: Set[str] = set()
        for t in d.target_list:
            targets |= {n for n in names_by_id.get(t, set()) if n}
        out[d.name] = {m for m, hops in routes.items() if any(p == d.port and dp in targets for p, dp in hops)}
    return out


def _decoder_regions(inv: Inventory) -> Dict[str, Set[str]]:
    """decoder → regions: a root decoder the regions under it, a switch or endpoint decoder its region."""
    out: Dict[str, Set[str]] = {d.name: ({d.region} if d.region else set()) for d in inv.decoders}
    for r in inv.regions:
        if r.root_decoder in out:
            out[r.root_decoder].add(r.name)
        for t in r.targets:
            out.setdefault(t.decoder, set()).add(r.name)
    return out


class _Relations:
    """Who relates to whom in one inventory: the links each filter is checked through."""

    def __init__(self, inv: Inventory) -> None:
        self.dec_mem = _decoder_memdevs(inv)
        self.dec_reg = _decoder_regions(inv)
        self.reg_mem = {r.name: {t.memdev for t in r.targets if t.memdev} for r in inv.regions}
        self.reg_nodes: Dict[str, Set[int]] = {r.name: set() for r in inv.regions}
        for n in inv.nodes:
            for rn in n.regions:
                self.reg_nodes.setdefault(rn, set()).add(n.id)

    def of_regions(self, rs: Set[str]) -> Tuple[Set[str], Set[str], Set[int]]:
        """(memdevs, decoders, nodes) of these regions."""
        ms: Set[str] = set().union(*(self.reg_mem.get(r, set()) for r in rs)) if rs else set()
        ds = {d for d, drs in self.dec_reg.items() if drs & rs}
        ns: Set[int] = set().union(*(self.reg_nodes.get(r, set()) for r in rs)) if rs else set()
        return ms, ds, ns


def _passes(f: Filters, memdevs: Set[str], regions: Set[str], decoders: Set[str], nodes: Set[int]) -> bool:
    """An object related to these memdevs, regions, decoders and nodes meets every given filter."""
    return (
        (not f.memdevs or bool(memdevs & f.memdevs))
        and (not f.regions or bool(regions & f.regions))
        and (not f.decoders or bool(decoders & f.decoders))
        and (not f.nodes or bool(nodes & f.nodes))
    )


def _kept(inv: Inventory, f: Filters) -> Tuple[List[Memdev], List[Region], List[Decoder], List[Node]]:
    """The memdevs, regions, decoders and nodes that meet every given filter."""
    rel = _Relations(inv)
    regions = [r for r in inv.regions if _passes(f, *_split(rel.of_regions({r.name}), r.name))]
    memdevs = []
    for m in inv.memdevs:
        rs = {r for r, ms in rel.reg_mem.items() if m.name in ms}
        ds = {d for d, ms in rel.dec_mem.items() if m.name in ms}
        if _passes(f, {m.name}, rs, ds, rel.of_regions(rs)[2]):
            memdevs.append(m)
    decoders = []
    for d in inv.decoders:
        rs = rel.dec_reg.get(d.name, set())
        if _passes(f, rel.dec_mem.get(d.name, set()), rs, {d.name}, rel.of_regions(rs)[2]):
            decoders.append(d)
    nodes = []
    for n in inv.nodes:
        ms, ds, _ = rel.of_regions(set(n.regions))
        if _passes(f, ms | set(n.memdevs), set(n.regions), ds, {n.id}):
            nodes.append(n)
    return memdevs, regions, decoders, nodes


def _split(of: Tuple[Set[str], Set[str], Set[int]], region: str) -> Tuple[Set[str], Set[str], Set[str], Set[int]]:
    """A region's (memdevs, regions, decoders, nodes) for :func:`_passes`."""
    ms, ds, ns = of
    return ms, {region}, ds, ns


def apply(inv: Inventory, f: Filters) -> Inventory:
    """The inventory with only the objects meeting every given filter through their relations."""
    if not f.given:
        return inv
    _check(f.memdevs, [m.name for m in inv.memdevs], "memdev", "--memdev")
    _check(f.regions, [r.name for r in inv.regions], "region", "--region")
    _check(f.decoders, [d.name for d in inv.decoders], "decoder", "--decoder")
    _check(frozenset(str(n) for n in f.nodes), [str(n.id) for n in inv.nodes], "node", "--node")
    memdevs, regions, decoders, nodes = _kept(inv, f)
    kept_regions = {r.name for r in regions}
    kept_nodes = {n.id for n in nodes}
    only_nodes = not (f.memdevs or f.regions or f.decoders)
    dax = [
        d
        for d in inv.dax_devices
        if d.region in kept_regions or (d.region is None and only_nodes and d.target_node in kept_nodes)
    ]
    ports = _ancestors(inv, {m.name for m in memdevs}) | {d.port for d in decoders if d.kind == "root"}
    tiers = tuple(
        t._replace(nodes=tuple(n for n in t.nodes if n in kept_nodes)) for t in inv.tiers if set(t.nodes) & kept_nodes
    )
    names_kept = {m.name for m in memdevs} | kept_regions | {d.name for d in decoders} | {d.name for d in dax}
    names_kept |= ports | {f"node{n}" for n in kept_nodes}
    from cxlctl.derive import totals

    out = inv._replace(
        buses=tuple(p for p in inv.buses if p.name in ports),
        ports=tuple(p for p in inv.ports if p.name in ports),
        endpoints=tuple(p for p in inv.endpoints if p.name in ports),
        decoders=tuple(decoders),
        memdevs=tuple(memdevs),
        regions=tuple(regions),
        dax_devices=tuple(dax),
        nodes=tuple(nodes),
        tiers=tiers,
        warnings=tuple(w for w in inv.warnings if w.subject is None or w.subject in names_kept),
    )
    return out._replace(totals=totals(out))


def describe(f: Filters) -> Optional[str]:
    """``memdev mem0, region region0``: what a filtered view shows, for its heading (None: not filtered)."""
    parts = [
        *(f"memdev {m}" for m in sorted(f.memdevs)),
        *(f"region {r}" for r in sorted(f.regions)),
        *(f"decoder {d}" for d in sorted(f.decoders)),
        *(f"node {n}" for n in sorted(f.nodes)),
    ]
    return ", ".join(parts) if parts else None
