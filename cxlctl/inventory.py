"""One scan of sysfs/procfs → :class:`~cxlctl.model.Inventory`.

The walk follows libcxl's view of the CXL bus (roots → ports → endpoints →
decoders → regions → dax), but flattened: every object is listed from
``/sys/bus/cxl/devices`` and placed by the parent directory of its real path,
which is how the kernel builds the hierarchy.  See docs/model.md.

Robustness contract: a scan never raises on odd content.  Missing attributes are
``None``; root-only ones are ``None`` plus a note; unparsable ones are ``None``
plus a warning; a device that vanishes mid-scan is skipped and the whole scan is
retried once.
"""

from __future__ import annotations

import os

from .hostio import objects, paths
from .hostio.host import Host
from .hostio.objects import Attrs, text_of
from .hostio.reader import Reader, Vanished
from .hostio.root import under
from .model import (
    Coordinates,
    DaxDevice,
    Decoder,
    Dport,
    Inventory,
    Memdev,
    MemoryBlock,
    Node,
    Port,
    Region,
    RegionTarget,
    Tier,
    Totals,
    Warning_,
    WeightedInterleave,
)
from .parse import is_decimal, parse_int, parse_meminfo

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar

    from .model import DecoderKind, PortKind, Severity

    T = TypeVar("T")


def _is_dotted(prefix: str, name: str) -> bool:
    """``<prefix>N.M`` with ASCII digits (``decoder2.1``, ``dax0.0``; not ``decoders_committed``)."""
    a, dot, b = name[len(prefix) :].partition(".")
    return name.startswith(prefix) and dot == "." and is_decimal(a) and is_decimal(b)


def _decoder_name(name: str) -> bool:
    return _is_dotted("decoder", name)


def _dax_name(name: str) -> bool:
    return _is_dotted("dax", name)


def _dport_or_decoder(name: str) -> bool:
    if name.startswith("decoder"):
        return _decoder_name(name)
    return name.startswith("dport") and is_decimal(name[5:])


#: the attributes a root or switch decoder's reader uses: read in one :meth:`Reader.attrs` pass
_DECODER_ATTRS: Dict[str, Tuple[str, ...]] = {
    "root": (
        "target_list",
        "start",
        "size",
        "interleave_ways",
        "interleave_granularity",
        "locked",
        "cap_pmem",
        "cap_ram",
        "cap_type2",
        "cap_type3",
        "qos_class",
        "create_ram_region",
    ),
    "switch": (
        "target_list",
        "region",
        "start",
        "size",
        "interleave_ways",
        "interleave_granularity",
        "locked",
        "target_type",
    ),
}
#: an endpoint decoder's state: read for every one
_ENDPOINT_STATE = ("region", "dpa_size", "mode", "size", "interleave_ways", "locked")
#: read only for an endpoint decoder in use (a region, or DPA allocated).  An idle one
#: holds no address range (``start`` 0 or stale), no DPA (``dpa_resource`` unset), the
#: granularity of whatever region used it last, and the kernel's default
#: ``target_type`` for the device (a setting only once a region uses it).  Leaving these four out saves 16 of an idle memdev's 52
#: reads (issue 10's scan cost); ``status --json`` reports them as null for idle
#: endpoint decoders (docs/json-schema.md).
_IN_USE_ATTRS = ("start", "interleave_granularity", "target_type", "dpa_resource")
#: what the scan takes from a node's ``meminfo`` (40 lines)
_MEMINFO_KEYS = ("MemTotal", "MemFree")
_MEMDEV_ATTRS = ("numa_node", "serial", "firmware_version", "payload_max", "label_storage_size", "dev")
_PARTITION_ATTRS = ("size", "qos_class")
_PORT_ATTRS = ("decoders_committed",)
_SECURITY_ATTRS = ("state",)

_MATCHERS: Dict[str, Callable[[str], bool]] = {}


def _is(prefix: str) -> Callable[[str], bool]:
    """Matcher for ``prefixN`` entry names (ASCII digits: ``²`` and ``١`` are not), made once per prefix."""
    m = _MATCHERS.get(prefix)
    if m is None:
        k = len(prefix)
        m = _MATCHERS[prefix] = lambda n: n.startswith(prefix) and is_decimal(n[k:])
    return m


class _Scan(Attrs):
    """State of one scan attempt."""

    def __init__(self, reader: Reader) -> None:
        super().__init__(reader)
        self.vanished: List[str] = []

    def guarded(self, device: str, fn: Callable[..., T], *args: Any) -> Optional[T]:
        """Run the reader of one device (a sysfs path), ``fn(*args)``; if it vanished, skip it, not fatal.

        (``fn`` and its arguments rather than a ``functools.partial``: the fast
        ``status --json`` path does not import functools.)"""
        r = self.r
        outer, r.device = r.device, device
        outer_absent, r.absent = r.absent, None
        try:
            out = fn(*args)
            r.confirm()
            return out
        except Vanished as v:
            what = os.path.basename(device)
            self.vanished.append(what)
            r.notes.append((v.path, f"{what} vanished during the scan"))
            return None
        finally:
            r.device, r.absent = outer, outer_absent

    # -- CXL bus --------------------------------------------------------------------------
    def cxl(self) -> Tuple[List[Port], List[Decoder], List[Memdev], List[Region]]:
        names = self.r.listdir(paths.CXL_DEVICES)
        # one pass sorts the bus's entries by kind (a large host lists thousands)
        is_root, is_port, is_endpoint, is_mem, is_region = map(_is, ("root", "port", "endpoint", "mem", "region"))
        port_names: List[str] = []
        dec_names: List[str] = []
        mem_names: List[str] = []
        region_names: List[str] = []
        for n in names:
            if n.startswith("decoder"):
                if _decoder_name(n):
                    dec_names.append(n)
            elif is_root(n) or is_port(n) or is_endpoint(n):
                port_names.append(n)
            elif is_mem(n):
                mem_names.append(n)
            elif is_region(n):
                region_names.append(n)
        parents: Dict[str, str] = {}
        # a decoder's port is the one whose directory lists it (below): no link to read
        for group in (port_names, mem_names, region_names):
            for n in group:
                up = self.guarded(f"{paths.CXL_DEVICES}/{n}", self._parent_of, f"{paths.CXL_DEVICES}/{n}")
                if up is not None:
                    parents[n] = up
        on_bus = set(dec_names)
        ports: List[Port] = []
        found: Dict[str, Decoder] = {}
        owner: Dict[str, str] = {}
        for n in port_names:
            p = self.guarded(f"{paths.CXL_DEVICES}/{n}", self.port, n, parents.get(n))
            if p is not None:
                ports.append(p)
                # its decoders now, while the port's directory handle is kept (Reader.alias)
                for dn in p.decoders:
                    if dn in on_bus and dn not in owner:
                        owner[dn] = p.name
                        self._decoder(dn, p.name, p.kind, p.memdev, found)
        kinds = {p.name: p.kind for p in ports}
        memdev_of_ep = {p.name: p.memdev for p in ports if p.kind == "endpoint"}
        for n in dec_names:
            if n not in owner:  # in no port's directory: placed by its real path
                up = self.guarded(f"{paths.CXL_DEVICES}/{n}", self._parent_of, f"{paths.CXL_DEVICES}/{n}")
                if up is not None:
                    self._decoder(n, up, kinds.get(up, ""), memdev_of_ep.get(up), found)
        decoders = [found[n] for n in dec_names if n in found]
        ep_of_mem = {m: e for e, m in memdev_of_ep.items() if m}
        memdevs: List[Memdev] = []
        for n in mem_names:
            m = self.guarded(f"{paths.CXL_DEVICES}/{n}", self.memdev, n, parents.get(n), ep_of_mem.get(n))
            if m is not None:
                memdevs.append(m)
        dec_by_name = {d.name: d for d in decoders}
        regions: List[Region] = []
        for n in region_names:
            rg = self.guarded(f"{paths.CXL_DEVICES}/{n}", self.region, n, parents.get(n), dec_by_name)
            if rg is not None:
                regions.append(rg)
        return ports, decoders, memdevs, regions

    def _parent_of(self, entry: str) -> str:
        """Name of the directory holding the device bus entry ``entry`` links to: its parent.

        The kernel links each entry relatively (``../../../devices/…/port1/endpoint2``):
        the parent is then the link's next-to-last component, read off the link
        without :meth:`Reader.devpath`'s path normalisation.  Any other link (absolute,
        one component, ``.`` or ``..`` at the end) takes devpath.
        """
        target = self.r.readlink(entry)
        if target is not None and target[:1] != "/":
            head, _, last = target.rpartition("/")
            up = head.rpartition("/")[2]
            if up not in ("", ".", "..") and last not in ("", ".", ".."):
                return up
        return os.path.basename(os.path.dirname(self.r.devpath(entry)))

    def _with_host_bridges(self, ports: List[Port]) -> List[Port]:
        by_name = {p.name: p for p in ports}
        out = []
        for p in ports:
            hb: Optional[str] = None
            cur: Optional[Port] = p
            seen: Set[str] = set()
            while cur is not None and cur.name not in seen:
                seen.add(cur.name)
                if cur.depth == 1:
                    hb = cur.name
                    break
                cur = by_name.get(cur.parent or "")
            out.append(p if p.host_bridge == hb else p._replace(host_bridge=hb))  # most: unchanged
        return out

    def port(self, name: str, parent: Optional[str]) -> Port:
        dev = f"{paths.CXL_DEVICES}/{name}"
        host = self.r.link(f"{dev}/uport")
        dports = []
        entries = self.r.listdir(dev, _dport_or_decoder)  # one listing for both kinds of entry
        for dp in entries:
            if not dp.startswith("dport"):
                continue
            target = self.r.link(f"{dev}/{dp}")
            if target is None:
                continue
            alias = self.r.link(f"{dev}/{dp}/firmware_node")
            if alias == target:
                alias = None
            dports.append(Dport(int(dp[5:]), target, alias))
        decoders = tuple(n for n in entries if n.startswith("decoder"))
        kind: PortKind
        if name.startswith("root"):
            kind, depth, par = "root", 0, None
        else:
            kind = "endpoint" if name.startswith("endpoint") else "port"
            depth, par = -1, parent  # depth fixed up by the caller's tree walk
        return Port(
            name=name,
            kind=kind,
            depth=depth,
            parent=par,
            host=host,
            parent_dport=None if kind == "root" else self.r.link(f"{dev}/parent_dport"),
            dports=tuple(dports),
            decoders=decoders,
            decoders_committed=self.num_of(dev, "decoders_committed", self.r.attrs(dev, _PORT_ATTRS)[0]),
            memdev=host if kind == "endpoint" else None,
            provider=("cxl_test" if host == "cxl_acpi.0" else "ACPI.CXL") if kind == "root" else None,
        )

    def _decoder(self, name: str, port: str, port_kind: str, memdev: Optional[str], found: Dict[str, Decoder]) -> None:
        dev = f"{paths.CXL_DEVICES}/{name}"
        if port_kind == "endpoint":  # four per memdev: straight to their reader
            d = self.guarded(dev, self._endpoint_decoder, name, port, memdev, dev)
        else:
            d = self.guarded(dev, self.decoder, name, port, "root" if port_kind == "root" else "switch", memdev)
        if d is not None:
            found[name] = d

    def decoder(self, name: str, port: str, kind: DecoderKind, memdev: Optional[str]) -> Decoder:
        dev = f"{paths.CXL_DEVICES}/{name}"
        if kind == "endpoint":
            return self._endpoint_decoder(name, port, memdev, dev)
        self.r.alias(dev, f"{paths.CXL_DEVICES}/{port}", name)
        names = _DECODER_ATTRS[kind]
        v = dict(zip(names, self.r.attrs(dev, names)))  # all of them in one pass
        num, flag, g = self.num_of, self.flag_of, v.get
        targets: Tuple[int, ...] = ()
        tl = text_of(g("target_list"))
        if tl:
            try:
                targets = tuple(parse_int(x) for x in tl.split(",") if x.strip())
            except ValueError:
                self._bad(f"{dev}/target_list", tl, "a comma-separated list")
        root = kind == "root"
        return Decoder(
            name=name,
            port=port,
            kind=kind,
            resource=num(dev, "start", g("start"), unset_is_none=True),
            size=num(dev, "size", g("size")),
            interleave_ways=num(dev, "interleave_ways", g("interleave_ways")),
            interleave_granularity=num(dev, "interleave_granularity", g("interleave_granularity")),
            locked=flag(dev, "locked", g("locked")),
            target_list=targets,
            region=text_of(g("region")) or None,
            cap_pmem=flag(dev, "cap_pmem", g("cap_pmem")) if root else None,
            cap_ram=flag(dev, "cap_ram", g("cap_ram")) if root else None,
            cap_type2=flag(dev, "cap_type2", g("cap_type2")) if root else None,
            cap_type3=flag(dev, "cap_type3", g("cap_type3")) if root else None,
            qos_class=num(dev, "qos_class", g("qos_class")) if root else None,
            # reading returns the next free region name; it does not claim it
            can_create_ram=(g("create_ram_region") is not None) if root else None,
            target_type=text_of(g("target_type")),
        )

    def _endpoint_decoder(self, name: str, port: str, memdev: Optional[str], dev: str) -> Decoder:
        """An endpoint decoder: four per memdev, most of them idle, so the scan's hot spot."""
        self.r.alias(dev, f"{paths.CXL_DEVICES}/{port}", name)
        num = self.num_of
        region_b, dpa_size_b, mode_b, size_b, ways_b, locked_b = self.r.attrs(dev, _ENDPOINT_STATE)
        region = text_of(region_b) or None
        dpa_size = num(dev, "dpa_size", dpa_size_b)
        start = gran = target_type = dpa_resource = None
        if region or dpa_size != 0:  # in use (or unknown): the rest too
            start, gran, target_type, dpa_resource = self.r.attrs(dev, _IN_USE_ATTRS)
        return Decoder(
            name=name,
            port=port,
            kind="endpoint",
            resource=num(dev, "start", start, unset_is_none=True),
            size=num(dev, "size", size_b),
            interleave_ways=num(dev, "interleave_ways", ways_b),
            interleave_granularity=num(dev, "interleave_granularity", gran),
            locked=self.flag_of(dev, "locked", locked_b),
            region=region,
            target_type=text_of(target_type),
            mode=text_of(mode_b) or None,
            dpa_resource=num(dev, "dpa_resource", dpa_resource, unset_is_none=True),
            dpa_size=dpa_size,
            memdev=memdev,
        )

    def memdev(self, name: str, parent: Optional[str], endpoint: Optional[str]) -> Memdev:
        dev = f"{paths.CXL_DEVICES}/{name}"
        numa, serial, fw, payload, lsa, chardev = self.r.attrs(dev, _MEMDEV_ATTRS)
        num = self.num_of
        ram, ram_qos = self.r.attrs(f"{dev}/ram", _PARTITION_ATTRS)
        pmem, pmem_qos = self.r.attrs(f"{dev}/pmem", _PARTITION_ATTRS)
        node = num(dev, "numa_node", numa)
        return Memdev(
            name=name,
            ram_size=num(f"{dev}/ram", "size", ram),
            pmem_size=num(f"{dev}/pmem", "size", pmem),
            ram_qos_class=num(f"{dev}/ram", "qos_class", ram_qos),
            pmem_qos_class=num(f"{dev}/pmem", "qos_class", pmem_qos),
            serial=num(dev, "serial", serial),
            firmware_version=text_of(fw) or None,
            host=parent,
            numa_node=node if node is not None and node >= 0 else None,
            security_state=text_of(self.r.attrs(f"{dev}/security", _SECURITY_ATTRS)[0]),
            payload_max=num(dev, "payload_max", payload),
            label_storage_size=num(dev, "label_storage_size", lsa),
            endpoint=endpoint,
            driver=self.r.link(f"{dev}/driver"),
            chardev=chardev is not None,  # read, not stat: a record must hold it
        )

    def coords(self, base: str) -> Optional[Coordinates]:
        if not self.r.isdir(base):
            return None
        c = Coordinates(
            read_bandwidth=self.num(f"{base}/read_bandwidth"),
            write_bandwidth=self.num(f"{base}/write_bandwidth"),
            read_latency=self.num(f"{base}/read_latency"),
            write_latency=self.num(f"{base}/write_latency"),
        )
        return None if c == Coordinates() else c

    def region(self, name: str, root_decoder: Optional[str], decoders: Dict[str, Decoder]) -> Region:
        dev = f"{paths.CXL_DEVICES}/{name}"
        ways = self.num(f"{dev}/interleave_ways")
        targets = []
        for i in range(min(ways or 0, 16)):
            t = self.r.text(f"{dev}/target{i}")
            if t:
                d = decoders.get(t)
                targets.append(RegionTarget(i, t, d.memdev if d else None))
        dax_regions = self.r.listdir(dev, _is("dax_region"))
        dax_region = dax_regions[0] if dax_regions else None
        dax_devs: Tuple[str, ...] = ()
        if dax_region:
            dax_devs = tuple(self.r.listdir(f"{dev}/{dax_region}", _dax_name))
        commit = self.flag(f"{dev}/commit")
        return Region(
            name=name,
            root_decoder=root_decoder,
            mode=self.r.text(f"{dev}/mode") or None,
            size=self.num(f"{dev}/size"),
            resource=self.num(f"{dev}/resource", unset_is_none=True),
            interleave_ways=ways,
            interleave_granularity=self.num(f"{dev}/interleave_granularity"),
            uuid=self.r.text(f"{dev}/uuid") or None,
            committed=commit,
            driver=self.r.link(f"{dev}/driver"),
            targets=tuple(targets),
            access0=self.coords(f"{dev}/access0"),
            access1=self.coords(f"{dev}/access1"),
            dax_region=dax_region,
            dax_devices=dax_devs,
            extended_linear_cache_size=self.num(f"{dev}/extended_linear_cache_size"),
        )

    # -- DAX bus ----------------------------------------------------------------------------
    def dax(self, name: str) -> DaxDevice:
        return objects.dax_device(self, name)

    # -- NUMA -------------------------------------------------------------------------------
    def node(self, nid: int, cpu_nodes: Tuple[int, ...], mem_nodes: Tuple[int, ...]) -> Node:
        dev = f"{paths.NODE_DIR}/node{nid}"
        cpus = self.nodelist(f"{dev}/cpulist") or ()
        mi_text = self.r.text(f"{dev}/meminfo")
        mi = parse_meminfo(mi_text, _MEMINFO_KEYS) if mi_text else {}
        if mi_text and "MemTotal" not in mi:
            self._bad(f"{dev}/meminfo", mi_text[:40], "node meminfo")
        dist_t = self.r.text(f"{dev}/distance")
        dist: Tuple[int, ...] = ()
        if dist_t:
            try:
                dist = tuple(parse_int(x) for x in dist_t.split())
            except ValueError:
                self._bad(f"{dev}/distance", dist_t, "a distance row")
        blocks = []
        for b in self.r.listdir(dev, _is("memory")):
            # read at its own directory on the memory bus, where the node's link leads: through
            # the bus directory's handle, no link walked and checked per block (the listing logs
            # the link, so a record re-creates it)
            bid = int(b[6:])
            path = paths.memory_block(bid)
            self.r.alias(path, paths.MEMORY_DIR, b, open_parent=True)
            blk = self.guarded(path, self.block, path, bid, nid)
            if blk is not None:
                blocks.append(blk)
        return Node(
            id=nid,
            cpus=cpus,
            has_cpu=nid in cpu_nodes if cpu_nodes else bool(cpus),
            has_memory=nid in mem_nodes if mem_nodes else bool(mi.get("MemTotal")),
            mem_total=mi.get("MemTotal"),
            mem_free=mi.get("MemFree"),
            distance=dist,
            access0=self.coords(f"{dev}/access0/initiators"),
            access1=self.coords(f"{dev}/access1/initiators"),
            memory_blocks=tuple(blocks),
            tier=None,
        )

    def block(self, path: str, bid: int, nid: int) -> MemoryBlock:
        return objects.memory_block(self.r, path, bid, nid)

    def tiers(self) -> List[Tier]:
        out = []
        for t in self.r.listdir(paths.TIER_DIR, _is("memory_tier")):
            nodes = self.nodelist(f"{paths.TIER_DIR}/{t}/nodelist")
            if nodes is None:  # the ABI document calls it 'nodes'; accept both
                nodes = self.nodelist(f"{paths.TIER_DIR}/{t}/nodes")
            out.append(Tier(int(t[len("memory_tier") :]), nodes or ()))
        return out

    def weighted_interleave(self) -> WeightedInterleave:
        if not self.r.isdir(paths.WI_DIR):
            return WeightedInterleave(False, {}, None)
        weights = {}
        for n in self.r.listdir(paths.WI_DIR, _is("node")):
            w = self.num(f"{paths.WI_DIR}/{n}")
            if w is not None:
                weights[int(n[4:])] = w
        auto = self.flag(f"{paths.WI_DIR}/auto")
        if auto is None:
            # some 6.16+ builds expose the attribute as "__auto_type" (a macro leaked into
            # the attribute name); it is the same knob
            auto = self.flag(f"{paths.WI_DIR}/__auto_type")
        return WeightedInterleave(True, weights, auto)

    # -- whole scan -------------------------------------------------------------------------
    def run(self) -> Inventory:
        r = self.r
        kernel = r.text(paths.OSRELEASE)
        ports, decoders, memdevs, regions = self.cxl()
        ports = self._with_host_bridges(_fix_depths(ports))  # needs the depths: walks up to depth 1
        buses = [p for p in ports if p.kind == "root"]
        endpoints = [p for p in ports if p.kind == "endpoint"]
        plain_ports = [p for p in ports if p.kind == "port"]

        dax: List[DaxDevice] = []
        for n in r.listdir(paths.DAX_DEVICES, _dax_name):
            d = self.guarded(f"{paths.DAX_DEVICES}/{n}", self.dax, n)
            if d is not None:
                dax.append(d)

        cpu_nodes = self.nodelist(f"{paths.NODE_DIR}/has_cpu") or ()
        mem_nodes = self.nodelist(f"{paths.NODE_DIR}/has_memory") or ()
        nodes: List[Node] = []
        for n in r.listdir(paths.NODE_DIR, _is("node")):
            nd = self.guarded(f"{paths.NODE_DIR}/{n}", self.node, int(n[4:]), cpu_nodes, mem_nodes)
            if nd is not None:
                nodes.append(nd)
        block_size = objects.block_size(self)
        tiers = self.tiers()
        knobs = objects.knobs(r)
        wi = self.weighted_interleave()
        inv = Inventory(
            kernel=kernel,
            buses=tuple(buses),
            ports=tuple(plain_ports),
            endpoints=tuple(endpoints),
            decoders=tuple(decoders),
            memdevs=tuple(memdevs),
            regions=tuple(regions),
            dax_devices=tuple(dax),
            nodes=tuple(nodes),
            tiers=tuple(tiers),
            knobs=tuple(knobs),
            weighted_interleave=wi,
            memory_block_size=block_size,
            totals=Totals(0, 0, 0, 0, 0),
            warnings=(),
            notes=(),
        )
        from .derive import derive  # pure post-processing, kept apart from the reads

        return derive(inv, self.warnings + cannot_read(r), r.notes, self.vanished)


#: directories whose listing is the inventory: one that cannot be read makes the scan's
#: answer ("no CXL devices") unknown, not empty -- an error, and ``status`` exits 1
LISTED = (paths.CXL_DEVICES, paths.NODE_DIR, paths.DAX_DEVICES)

#: notes that are not "cannot read": root-only attributes (one ``not-root`` note says so) and
#: devices that went away mid-scan (the rescan handles them)
_NOT_UNREADABLE = ("root-only attribute", "vanished during the scan")


def cannot_read(r: Reader) -> List[Warning_]:
    """One ``unreadable`` warning per file or directory that is there but could not be read
    (a FIFO, a link leading out of the root, a directory this user may not list): named under
    the root, so "absent" and "cannot read" are told apart.  ``subject`` is the host path."""
    out: List[Warning_] = []
    seen = set()
    for path, why in r.notes:
        if path in seen or any(s in why for s in _NOT_UNREADABLE):
            continue
        seen.add(path)
        sev: Severity = "error" if path in LISTED else "warning"
        out.append(Warning_("unreadable", sev, f"cannot read {under(r.root, path)}: {why}", path))
    return out


def _fix_depths(ports: List[Port]) -> List[Port]:
    """Depth = distance from the root, as libcxl computes it (root 0, host bridge 1, …)."""
    by_name = {p.name: p for p in ports}
    memo: Dict[str, int] = {}
    return [p._replace(depth=_depth(p, by_name, memo)) for p in ports]


def _depth(p: Port, by_name: Dict[str, Port], memo: Dict[str, int], guard: int = 0) -> int:
    """A module-level function, not a closure: a nested function that calls itself is a reference
    cycle (function, cell, function) holding every port, left for the garbage collector by each
    scan the daemon runs."""
    if p.kind == "root":
        return 0
    if p.name in memo:
        return memo[p.name]
    parent = by_name.get(p.parent or "")
    d = 1 if parent is None or guard > 64 else _depth(parent, by_name, memo, guard + 1) + 1
    memo[p.name] = d
    return d


def scan(host: Host, reader: Optional[Reader] = None) -> Inventory:
    """Scan ``host`` (through its reader, or ``reader``: ``record``'s logging one); retried once
    when devices vanish mid-scan."""
    r = host.reader if reader is None else reader
    r.close()  # handles kept from the reader's earlier reads may be of directories replaced since
    try:
        return _scan_twice(r)
    finally:
        r.close()  # its directory handles: a retry or a later scan must not reuse them


def _scan_twice(r: Reader) -> Inventory:
    s = _Scan(r)
    inv = s.run()
    if s.vanished:
        r.notes.clear()
        r.close()  # handles on directories that went away
        s2 = _Scan(r)
        inv = s2.run()
        if s2.vanished:
            extra = Warning_(
                "vanished",
                "warning",
                "devices changed during two scans in a row ("
                + ", ".join(sorted(set(s2.vanished)))
                + "); the result may be incomplete — run again once hot-plug activity settles",
            )
            inv = inv._replace(warnings=inv.warnings + (extra,))
    return _tiering(inv, r)


def _tiering(inv: Inventory, r: Reader) -> Inventory:
    """The ``tiering-off`` warning, in the words ``stat`` and ``doctor`` use (:mod:`cxlctl.tiering`)."""
    from .tiering import ID, of_inventory

    found = of_inventory(inv, r)
    if found is None:
        return inv
    warn = Warning_(ID, "warning", f"{found[0]}; fix: {found[1]}", "demotion_enabled")
    return inv._replace(warnings=inv.warnings + (warn,))
