"""The inventory's immutable, typed model.

NamedTuples rather than dataclasses: they are immutable, mypy-typed, and cheap
at import time (``dataclasses`` pulls in ``inspect``, about 10 ms on these
machines), which matters for ``cxlctl status --json`` start-up.  For the same
reason they are not made by ``typing.NamedTuple`` at run time: mypy sees
``typing.NamedTuple`` (``TYPE_CHECKING``), the interpreter
:class:`cxlctl.namedrecord.Record`, which builds the same kind of class from
the class body without importing ``typing`` or ``collections`` (see there).

Sizes, addresses and serials are ints in bytes; ``None`` always means "not known"
(attribute absent on this kernel, unreadable, or unparsable: the scan's notes and
warnings say which).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, Literal, Optional, Tuple
    from typing import NamedTuple as _Record

    # tags are types: mypy rejects a compare with a word the tag never holds (``kind == "cxll"``)
    DecoderKind = Literal["root", "switch", "endpoint"]
    PortKind = Literal["root", "port", "endpoint"]
    NodeKind = Literal["dram", "cxl", "other"]
    Severity = Literal["info", "warning", "error"]
else:
    from .namedrecord import Record as _Record


class Warning_(_Record):
    """Something an operator should know or fix.  ``code`` is stable for scripts."""

    code: str
    severity: Severity
    message: str
    subject: Optional[str] = None


class Dport(_Record):
    id: int  # hardware port id, as used in decoder target lists
    name: str  # basename of the link target: PCI BDF, pciDDDD:BB or ACPI0016:NN
    alias: Optional[str] = None  # the other name of a host bridge (ACPI vs PCI)


class Decoder(_Record):
    name: str
    port: str
    kind: DecoderKind
    resource: Optional[int]  # 'start'; root-only readable
    size: Optional[int]
    interleave_ways: Optional[int]
    interleave_granularity: Optional[int]
    locked: Optional[bool] = None
    target_list: Tuple[int, ...] = ()  # root/switch: dport ids in interleave order
    region: Optional[str] = None  # switch/endpoint: region using it
    # root decoders
    cap_pmem: Optional[bool] = None
    cap_ram: Optional[bool] = None
    cap_type2: Optional[bool] = None
    cap_type3: Optional[bool] = None
    qos_class: Optional[int] = None
    can_create_ram: Optional[bool] = None  # root: has create_ram_region (Linux 6.3+)
    # switch/endpoint
    target_type: Optional[str] = None
    # endpoint decoders
    mode: Optional[str] = None
    dpa_resource: Optional[int] = None
    dpa_size: Optional[int] = None
    memdev: Optional[str] = None


class Port(_Record):
    """A CXL port: ``rootN`` (depth 0), host bridge / switch ``portN``, or ``endpointN``."""

    name: str
    kind: PortKind
    depth: int
    parent: Optional[str]
    host: Optional[str]  # basename of uport (ACPI0017:00, pci0000:0c, 0000:0e:00.0, memN)
    parent_dport: Optional[str]
    dports: Tuple[Dport, ...]
    decoders: Tuple[str, ...]
    decoders_committed: Optional[int] = None
    memdev: Optional[str] = None  # endpoints only
    provider: Optional[str] = None  # roots only: ACPI.CXL / cxl_test
    host_bridge: Optional[str] = None  # the depth-1 port above (or itself)


class Memdev(_Record):
    name: str
    ram_size: Optional[int]
    pmem_size: Optional[int]
    ram_qos_class: Optional[int]
    pmem_qos_class: Optional[int]
    serial: Optional[int]
    firmware_version: Optional[str]
    host: Optional[str]  # PCI BDF of the device
    numa_node: Optional[int]  # CPU node of the PCI device, NOT where its memory lands
    security_state: Optional[str]
    payload_max: Optional[int]
    label_storage_size: Optional[int]
    endpoint: Optional[str]
    driver: Optional[str]
    chardev: bool  # /dev/cxl/memN present
    # derived
    dpa_allocated: int = 0
    regions: Tuple[str, ...] = ()


class Coordinates(_Record):
    """HMAT/CDAT access characteristics: MB/s and ns."""

    read_bandwidth: Optional[int] = None
    write_bandwidth: Optional[int] = None
    read_latency: Optional[int] = None
    write_latency: Optional[int] = None


class Figures(_Record):
    """The performance figures the kernel holds for a node (:func:`cxlctl.figures.node_figures`).

    ``cpu`` is the CPU access class (``access1``), the one the kernel weights and tiers by:
    ``node_set_perf_attrs``/``node_update_perf_attrs`` pass ``ACCESS_COORDINATE_CPU`` to
    ``mempolicy_set_node_perf``, and ``hmat_calculate_adistance``/``cxl_region_calculate_adistance``
    read ``coord[ACCESS_COORDINATE_CPU]``.  ``nearest`` is ``access0`` (the nearest initiator, which
    may be a GPU or accelerator in SRAT), kept only to show where it differs.
    """

    cpu: Optional[Coordinates] = None
    nearest: Optional[Coordinates] = None
    #: "node": the node's own ``accessN/initiators``; "regions": its CXL region's (Linux 7.x gives
    #: a CXL node no files of its own); None: no figures
    source: Optional[str] = None
    #: the region(s) the figures are from (several only when they all agree)
    regions: Tuple[str, ...] = ()
    #: set when the node's regions differ and sysfs does not show which one the kernel took
    undetermined: Optional[str] = None
    #: set when the node's regions differ and its memory tier shows which one the kernel took
    chosen_by: Optional[str] = None


class RegionTarget(_Record):
    position: int
    decoder: str
    memdev: Optional[str]


class Region(_Record):
    name: str
    root_decoder: Optional[str]
    mode: Optional[str]  # ram | pmem
    size: Optional[int]
    resource: Optional[int]
    interleave_ways: Optional[int]
    interleave_granularity: Optional[int]
    uuid: Optional[str]
    committed: Optional[bool]
    driver: Optional[str]
    targets: Tuple[RegionTarget, ...]
    access0: Optional[Coordinates] = None
    access1: Optional[Coordinates] = None
    dax_region: Optional[str] = None
    dax_devices: Tuple[str, ...] = ()
    #: bytes of DRAM the platform uses as a direct-mapped cache in front of this region (6.14+;
    #: None where the attribute is absent: no such cache, or an older kernel)
    extended_linear_cache_size: Optional[int] = None


class DaxDevice(_Record):
    name: str
    size: Optional[int]
    target_node: Optional[int]
    numa_node: Optional[int]
    align: Optional[int]
    resource: Optional[int]
    memmap_on_memory: Optional[bool]
    driver: Optional[str]
    mode: Optional[str]  # daxctl's words: system-ram | devdax | famfs | None (unbound)
    region: Optional[str]  # CXL region, when it comes from one
    provider: str  # "cxl" | "hmem" | "other"
    dax_region_path: Optional[str]
    online_memblocks: Optional[int] = None
    total_memblocks: Optional[int] = None
    zones: Tuple[str, ...] = ()


class MemoryBlock(_Record):
    id: int
    node: int
    state: Optional[str]  # online | offline | going-offline
    zone: Optional[str]  # from valid_zones; for offline blocks the default candidate


class Node(_Record):
    id: int
    cpus: Tuple[int, ...]
    has_cpu: bool
    has_memory: bool
    mem_total: Optional[int]
    mem_free: Optional[int]
    distance: Tuple[int, ...]
    access0: Optional[Coordinates]
    access1: Optional[Coordinates]
    memory_blocks: Tuple[MemoryBlock, ...]
    tier: Optional[int]
    kind: NodeKind = "other"  # derived
    regions: Tuple[str, ...] = ()  # CXL regions whose memory lands here
    memdevs: Tuple[str, ...] = ()
    dax_devices: Tuple[str, ...] = ()


class Tier(_Record):
    id: int  # memory_tierN
    nodes: Tuple[int, ...]


class Knob(_Record):
    """A kernel setting the tuning engine manages.  ``value`` None = unsupported."""

    name: str
    path: str
    value: Optional[str]
    supported: bool


class WeightedInterleave(_Record):
    supported: bool
    weights: Dict[int, int]
    auto: Optional[bool]  # None: kernel has no auto mode


class Totals(_Record):
    cxl_capacity: int  # sum of memdev ram+pmem sizes
    cxl_in_regions: int  # sum of region sizes
    cxl_online: int  # memory online on CXL nodes (bytes of online blocks)
    cxl_free: int  # MemFree on CXL nodes
    cxl_unassigned: int  # memdev capacity in no region (DPA not allocated)


class Inventory(_Record):
    kernel: Optional[str]
    buses: Tuple[Port, ...]
    ports: Tuple[Port, ...]
    endpoints: Tuple[Port, ...]
    decoders: Tuple[Decoder, ...]
    memdevs: Tuple[Memdev, ...]
    regions: Tuple[Region, ...]
    dax_devices: Tuple[DaxDevice, ...]
    nodes: Tuple[Node, ...]
    tiers: Tuple[Tier, ...]
    knobs: Tuple[Knob, ...]
    weighted_interleave: WeightedInterleave
    memory_block_size: Optional[int]
    totals: Totals
    warnings: Tuple[Warning_, ...]
    notes: Tuple[Tuple[str, str], ...]

    @property
    def unknown(self) -> bool:
        """Could a directory the inventory is listed from not be read (``unreadable`` errors)?
        Then "no devices" is unknown, not empty: ``status`` exits 1."""
        return any(w.code == "unreadable" and w.severity == "error" for w in self.warnings)

    @property
    def has_cxl(self) -> bool:
        return bool(self.buses or self.memdevs)

    def node(self, node_id: int) -> Optional[Node]:
        for n in self.nodes:
            if n.id == node_id:
                return n
        return None

    def region(self, name: str) -> Optional[Region]:
        for r in self.regions:
            if r.name == name:
                return r
        return None

    def memdev(self, name: str) -> Optional[Memdev]:
        for m in self.memdevs:
            if m.name == name:
                return m
        return None

    def decoder(self, name: str) -> Optional[Decoder]:
        for d in self.decoders:
            if d.name == name:
                return d
        return None

    def knob_value(self, name: str) -> Optional[str]:
        """The value of knob ``name`` as read (None: not read, or no such knob)."""
        for k in self.knobs:
            if k.name == name:
                return k.value
        return None
