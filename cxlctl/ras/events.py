"""CXL RAS events, mapped onto cxlctl's inventory.

Why: a trace line names a memdev and a device address (DPA); an operator
needs the region, NUMA node and memory block it hits.  The inventory already
has the chain memdev → endpoint decoder → region → DAX → node → blocks, so
the mapping is arithmetic over it:

* an event that carries an HPA (and region), as ``cxl_poison`` does, is taken
  as the kernel gives it;
* an event with only a DPA (``cxl_general_media``/``cxl_dram`` on 6.12) is
  translated through the memdev's endpoint decoder: the decoder whose DPA
  range holds the address names the region, its position in the region's
  target list and the region's interleave (ways, granularity) give the HPA
  (modulo interleave, the CXL spec's and the kernel's ``cxl_dpa_to_hpa``);
* the HPA names the memory block (``HPA // block_size_bytes``) and the node
  holding that block; without a readable HPA the node comes from the region's
  DAX device.
"""

from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

from cxlctl.model import Decoder, Inventory, Region
from cxlctl.parse import U64_MAX, sysfs_int

from .trace import TraceLine

#: event name → short kind used in JSON, metrics and the journal
KINDS: Dict[str, str] = {
    "cxl_general_media": "general_media",
    "cxl_dram": "dram",
    "cxl_memory_module": "memory_module",
    "cxl_poison": "poison",
    "cxl_aer_correctable_error": "correctable",
    "cxl_aer_uncorrectable_error": "uncorrectable",
    "cxl_overflow": "overflow",
    "cxl_generic_event": "generic",
    # 6.15+: AER on CXL ports (root, switch and downstream ports), not on a memdev
    "cxl_port_aer_correctable_error": "port_correctable",
    "cxl_port_aer_uncorrectable_error": "port_uncorrectable",
    # 6.16+: a device's memory sparing event record (a row, bank or rank was spared)
    "cxl_memory_sparing": "memory_sparing",
}

#: kinds of events about a CXL port, whose ``device=`` names the port, not a memdev
PORT_KINDS = ("port_correctable", "port_uncorrectable")

#: what each kind means for an operator, one line (docs/ras.md says more)
MEANING: Dict[str, str] = {
    "general_media": "media error at a device address (ECC, invalid address, data path)",
    "dram": "DRAM component error at a device address (channel/rank/bank)",
    "memory_module": "device health changed (health/media status, life used, temperature)",
    "poison": "poisoned address in the device's poison list",
    "correctable": "corrected CXL link/protocol error (AER correctable)",
    "uncorrectable": "uncorrectable CXL protocol error (AER uncorrectable)",
    "overflow": "the device's event log overflowed: events were lost",
    "generic": "vendor or unknown event record",
    "port_correctable": "corrected protocol/link error on a CXL port (AER correctable)",
    "port_uncorrectable": "uncorrectable protocol error on a CXL port (AER uncorrectable): every device below it",
    "memory_sparing": "the device spared memory (row, bank or rank sparing) after errors there",
}


class Mapping(NamedTuple):
    """Where an address lands; None fields could not be told (and ``why`` says so)."""

    region: Optional[str] = None
    hpa: Optional[int] = None
    hpa_source: Optional[str] = None  # "kernel" | "decoder" | None
    node: Optional[int] = None
    memory_block: Optional[int] = None
    block_state: Optional[str] = None
    why: Optional[str] = None


class Event(NamedTuple):
    event: str  # kernel event name
    kind: str
    timestamp: float
    memdev: Optional[str]
    host: Optional[str]
    serial: Optional[int]
    severity: str  # informational|warning|failure|fatal|correctable|uncorrectable|poison|unknown
    dpa: Optional[int]
    length: Optional[int]
    mapping: Mapping
    fields: Dict[str, str]
    raw: str
    #: 6.15+ ``hpa_alias0``: the other address of the same memory where an extended linear cache
    #: aliases it (None: no alias, or an older kernel)
    hpa_alias: Optional[int] = None
    #: the CXL port an AER event names (port kinds only)
    port: Optional[str] = None

    def severity_note(self) -> str:
        """The severity where it says more than the kind: ``informational`` for a general_media event,
        nothing for poison or (port) correctable/uncorrectable, whose severity is the kind's own word
        (so text reads ``poison mem3``, not ``poison poison mem3``)."""
        return "" if self.severity in self.kind.split("_") else self.severity

    def as_json(self) -> Dict[str, Any]:
        m = self.mapping
        return {
            "timestamp": self.timestamp,
            "event": self.event,
            "kind": self.kind,
            "severity": self.severity,
            "memdev": self.memdev,
            "host": self.host,
            "serial": self.serial,
            "dpa": self.dpa,
            "length": self.length,
            "hpa": m.hpa,
            "hpa_source": m.hpa_source,
            "hpa_alias0": self.hpa_alias,
            "port": self.port,
            "region": m.region,
            "node": m.node,
            "memory_block": m.memory_block,
            "block_state": m.block_state,
            "unmapped_reason": m.why,
            "fields": self.fields,
        }


def _memdev(fields: Dict[str, str]) -> Optional[str]:
    v = fields.get("memdev") or fields.get("device")
    if not v:
        return None
    return v.split()[0] or None


def _severity(kind: str, fields: Dict[str, str]) -> str:
    if kind in ("correctable", "uncorrectable", "poison"):
        return kind
    if kind in PORT_KINDS:
        return kind[len("port_") :]
    log = fields.get("log", "").strip().lower()
    for s in ("informational", "warning", "failure", "fatal"):
        if log.startswith(s[:4]):
            return s
    return "unknown"


def to_event(t: TraceLine, inv: Optional[Inventory]) -> Event:
    """Normalise one parsed line and map it (``inv`` None: no mapping)."""
    f = t.fields
    kind = KINDS.get(t.event, t.event[4:] if t.event.startswith("cxl_") else t.event)
    port = None
    if kind in PORT_KINDS:
        port, memdev = (f.get("device") or "").split(" ")[0] or None, None
    else:
        memdev = _memdev(f)
    alias = sysfs_int(f.get("hpa_alias0"), base=16)
    if alias == U64_MAX:
        alias = None
    dpa = sysfs_int(f.get("dpa"), base=16)
    length = sysfs_int(f.get("dpa_length") or f.get("length"), base=16)
    hpa = sysfs_int(f.get("hpa"), base=16)
    if hpa == U64_MAX:  # ULLONG_MAX: the kernel's "no HPA"
        hpa = None
    region = f.get("region") or None
    if region is not None and not region.startswith("region"):
        region = None  # "", "(null)": not in a region
    serial = sysfs_int(f.get("serial"), base=0)
    if kind in PORT_KINDS:
        mapping = Mapping(why=f"a port error ({port or '?'}): it concerns every device below that port")
    else:
        mapping = Mapping(why="no inventory") if inv is None else map_address(inv, memdev, dpa, hpa, region)
    return Event(
        event=t.event,
        kind=kind,
        timestamp=t.timestamp,
        memdev=memdev,
        host=(f.get("host") or "").split()[0] or None if f.get("host") else None,
        serial=serial,
        severity=_severity(kind, f),
        dpa=dpa,
        length=length,
        mapping=mapping,
        fields=dict(f),
        raw=t.raw,
        hpa_alias=alias,
        port=port,
    )


# ----------------------------------------------------------------------- mapping


def endpoint_decoder_for(inv: Inventory, memdev: str, dpa: int) -> Optional[Decoder]:
    """The memdev's endpoint decoder whose DPA range holds ``dpa``."""
    for d in inv.decoders:
        if d.kind != "endpoint" or d.memdev != memdev:
            continue
        if d.dpa_resource is None or not d.dpa_size:
            continue
        if d.dpa_resource <= dpa < d.dpa_resource + d.dpa_size:
            return d
    return None


def dpa_to_hpa(region: Region, position: int, dpa_offset: int) -> Optional[int]:
    """HPA of ``dpa_offset`` (bytes into the endpoint decoder's DPA range) of the
    device at interleave ``position`` of ``region``.

    Modulo interleave: the device's DPA is cut into granularity-sized chunks;
    chunk ``k`` of position ``p`` is region chunk ``k * ways + p``.  (Platforms
    using XOR interleave arithmetic, CXIMS, map differently: not handled.)
    """
    ways, gran, base = region.interleave_ways, region.interleave_granularity, region.resource
    if not ways or not gran or base is None or position >= ways:
        return None
    chunk, within = divmod(dpa_offset, gran)
    off = (chunk * ways + position) * gran + within
    if region.size is not None and off >= region.size:
        return None
    return base + off


def _block_of(inv: Inventory, hpa: int) -> Tuple[Optional[int], Optional[int], Optional[str]]:
    """(block id, node, state) of the memory block holding ``hpa``; the block
    is looked up among the nodes' blocks (node None: the block is not online
    memory of any node, e.g. devdax)."""
    bs = inv.memory_block_size
    if not bs:
        return None, None, None
    bid = hpa // bs
    for n in inv.nodes:
        for b in n.memory_blocks:
            if b.id == bid:
                return bid, n.id, b.state
    return bid, None, None


def _region_node(inv: Inventory, region: Region) -> Optional[int]:
    nodes = {d.target_node for d in inv.dax_devices if d.name in region.dax_devices and d.target_node is not None}
    nodes.discard(-1)
    return nodes.pop() if len(nodes) == 1 else None


def map_address(
    inv: Inventory, memdev: Optional[str], dpa: Optional[int], hpa: Optional[int], region_name: Optional[str]
) -> Mapping:
    """Map an event's address onto region, HPA, node and memory block."""
    source: Optional[str] = "kernel" if hpa is not None else None
    why: Optional[str] = None
    if hpa is None and dpa is not None and memdev:
        dec = endpoint_decoder_for(inv, memdev, dpa)
        if dec is None:
            why = f"DPA {dpa:#x} of {memdev} is in no endpoint decoder: not part of any region"
        elif not dec.region:
            why = f"{dec.name} holds DPA {dpa:#x} but belongs to no region"
        else:
            r = inv.region(dec.region)
            pos = next((t.position for t in r.targets if t.decoder == dec.name), None) if r else None
            if r is None or pos is None:
                why = f"{dec.name} names {dec.region}, which lists no such target"
            else:
                region_name = region_name or r.name
                assert dec.dpa_resource is not None
                hpa = dpa_to_hpa(r, pos, dpa - dec.dpa_resource)
                if hpa is None:
                    why = f"{r.name}: base address, interleave or size unknown (root-only attributes?)"
                else:
                    source = "decoder"
    elif hpa is None and dpa is None:
        why = "the event carries no address"
    node: Optional[int] = None
    block: Optional[int] = None
    state: Optional[str] = None
    if hpa is not None:
        block, node, state = _block_of(inv, hpa)
    if region_name is None and hpa is not None:
        for r in inv.regions:
            if r.resource is not None and r.size and r.resource <= hpa < r.resource + r.size:
                region_name = r.name
    if node is None and region_name:
        r2 = inv.region(region_name)
        if r2 is not None:
            node = _region_node(inv, r2)
    return Mapping(region_name, hpa, source, node, block, state, why)
