"""Which CPU nodes the engine runs on and which memory nodes it allocates from.

Defaults (docs/launch.md explains why):

* CPUs: the socket local to the GPUs in use.  A GPU's node is the ``numa_node``
  of its PCI device in sysfs (NVIDIA, vendor 0x10de, display or 3D class); the
  socket is every CPU node closer to it than the kernel's ``REMOTE_DISTANCE``
  (20), so sub-NUMA clusters of one package count as one socket.  Without GPUs
  (or when firmware reports no node for them): every CPU node.
* Memory: that socket's DRAM nodes plus the CXL nodes nearest to it by the
  distance table — never another socket's memory, because weights are global
  and interleaving across sockets makes the socket link the bottleneck.

Explicit ``--cpu-nodes``/``--mem-nodes`` use numactl's grammar — ``0-3,5``,
``all``, ``!LIST`` (all but), ``+LIST`` (relative to the nodes this process may
use) — parsed strictly and validated against the inventory: an unknown node, a
node without memory (for memory) or without CPUs (for CPUs) is a usage error
that names the nodes that exist.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

from cxlctl.errors import UsageError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory, Node
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, parse_hex, parse_int, parse_nodelist

PCI_DEVICES = paths.PCI_DEVICES
NVIDIA_VENDOR = 0x10DE
#: PCI base class 03 (display): subclass 00 VGA, 02 3D controller (data-center GPUs)
GPU_CLASSES = (0x0300, 0x0302)
REMOTE_DISTANCE = 20
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


class Gpu(NamedTuple):
    ordinal: int  # position in PCI bus order (= nvidia-smi / CUDA_DEVICE_ORDER=PCI_BUS_ID)
    bdf: str
    numa_node: Optional[int]  # None: firmware gave none (-1)


class NodeSets(NamedTuple):
    cpu_nodes: Tuple[int, ...]
    mem_nodes: Tuple[int, ...]
    dram: Tuple[int, ...]  # mem_nodes that are DRAM
    cxl: Tuple[int, ...]  # mem_nodes that are CXL
    other: Tuple[int, ...]  # mem_nodes that are neither (e.g. HBM, unknown)
    gpus: Tuple[Gpu, ...]  # the GPUs in use
    how: Tuple[str, ...]  # one line per decision, for --dry-run


def find_gpus(host: Host) -> List[Gpu]:
    """NVIDIA GPUs from sysfs PCI devices, in bus order."""
    r = host.reader
    found = []
    for name in r.listdir(PCI_DEVICES, lambda n: _BDF.match(n) is not None):
        base = f"{PCI_DEVICES}/{name}"
        vendor, klass = r.text(base + "/vendor"), r.text(base + "/class")
        # ASCII digits only (int() would read "١" as 1)
        try:
            if vendor is None or klass is None or parse_hex(vendor) != NVIDIA_VENDOR:
                continue
            if (parse_hex(klass) >> 8) not in GPU_CLASSES:
                continue
        except ValueError:
            continue
        numa = r.text(base + "/numa_node")
        try:
            node: Optional[int] = parse_int(numa) if numa is not None else None
        except ValueError:
            node = None
        found.append((name.lower(), node if node is not None and node >= 0 else None))
    return [Gpu(i, bdf, n) for i, (bdf, n) in enumerate(sorted(found))]


def select_gpus(gpus: Sequence[Gpu], spec: Optional[str]) -> Tuple[Gpu, ...]:
    """``--gpus``: indices in PCI order (``0,1``, ``0-3``, ``all``) or PCI addresses."""
    if spec is None:
        return tuple(gpus)
    text = spec.strip()
    if not gpus:
        raise UsageError(
            f"--gpus {spec!r}: no NVIDIA GPU in sysfs ({PCI_DEVICES})",
            hint="leave out --gpus on a host without GPUs; CPUs then default to every CPU node",
        )
    if not text:
        raise UsageError("--gpus is empty", hint="give GPU indices such as 0,1 or 0-3, 'all', or PCI addresses")
    if text == "all":
        return tuple(gpus)
    known = ", ".join(f"{g.ordinal}={g.bdf}" for g in gpus)
    parts = [p.strip() for p in text.split(",")]
    if all(_BDF.match(p) for p in parts):
        by_bdf = {g.bdf: g for g in gpus}
        out = []
        for p in parts:
            g = by_bdf.get(p.lower())
            if g is None:
                raise UsageError(f"--gpus: no NVIDIA GPU at {p}", hint=f"GPUs: {known}")
            out.append(g)
        return tuple(sorted(set(out)))
    try:
        ids = parse_nodelist(text)
    except ValueError as e:
        raise UsageError(f"--gpus: {e}", hint="give GPU indices such as 0,1 or 0-3, 'all', or PCI addresses") from None
    bad = [i for i in ids if i >= len(gpus)]
    if bad:
        raise UsageError(f"--gpus: no GPU with index {format_nodelist(bad)}", hint=f"GPUs: {known}")
    return tuple(gpus[i] for i in ids)


# --------------------------------------------------------------------------- explicit lists


def parse_node_spec(
    text: str,
    option: str,
    inv: Inventory,
    *,
    want: str,
    allowed: Optional[Sequence[int]] = None,
) -> Tuple[int, ...]:
    """A numactl node list for ``option`` (``--cpu-nodes``/``--mem-nodes``), validated.

    ``want`` is "cpu" or "memory": the property every node must have.  ``allowed``
    is the process' ``Mems_allowed``/CPU nodes, the base of ``+`` relative lists.
    """
    fix = "use numactl's node syntax: 0-3,5 | all | !LIST | +LIST"
    universe = [n.id for n in inv.nodes if (n.has_cpu if want == "cpu" else n.has_memory)]
    t = text.strip()
    if not t:
        raise UsageError(f"{option} is empty", hint=fix)
    ids: Tuple[int, ...]
    if t == "all":
        ids = tuple(universe)
    elif t.startswith("!"):
        excluded = _plain(t[1:], option, text, fix)
        _known(excluded, option, inv)
        ids = tuple(n for n in universe if n not in excluded)
    elif t.startswith("+"):
        rel = _plain(t[1:], option, text, fix)
        base = sorted(allowed) if allowed is not None else universe
        over = [i for i in rel if i >= len(base)]
        if over:
            raise UsageError(
                f"{option} {text!r}: relative node {format_nodelist(over)} is out of range: "
                f"this process may use {len(base)} node(s) ({format_nodelist(base)})",
                hint=fix,
            )
        ids = tuple(sorted(base[i] for i in rel))
    else:
        if ":" in t:
            raise UsageError(
                f"{option} {text!r}: device-anchored specs (pci:, netdev:, file:, ...) are not supported",
                hint="use --gpus to anchor the CPUs to the GPUs' socket, or give node numbers",
            )
        ids = _plain(t, option, text, fix)
    if not ids:
        raise UsageError(f"{option} {text!r} selects no node", hint=fix)
    _known(ids, option, inv)
    by_id = {n.id: n for n in inv.nodes}
    for i in ids:
        n = by_id[i]
        if want == "cpu" and not n.has_cpu:
            raise UsageError(
                f"{option}: node {i} has no CPUs ({n.kind} node)",
                hint=f"CPU nodes: {format_nodelist(universe) or 'none'}",
            )
        if want == "memory" and not n.has_memory:
            raise UsageError(
                f"{option}: node {i} has no memory online",
                hint=f"memory nodes: {format_nodelist(universe) or 'none'} (online CXL memory first: cxlctl status)",
            )
    return ids


def _plain(t: str, option: str, text: str, fix: str) -> Tuple[int, ...]:
    if not t.strip():
        raise UsageError(f"{option} {text!r}: empty node list", hint=fix)
    try:
        return parse_nodelist(t)
    except ValueError as e:
        raise UsageError(f"{option}: {e}", hint=fix) from None


def _known(ids: Sequence[int], option: str, inv: Inventory) -> None:
    have = {n.id for n in inv.nodes}
    unknown = [i for i in ids if i not in have]
    if unknown:
        raise UsageError(
            f"{option}: unknown node {format_nodelist(unknown)}",
            hint=f"this host has node(s) {format_nodelist(sorted(have)) or 'none'} (cxlctl status lists them)",
        )


# --------------------------------------------------------------------------- defaults


def distance(inv: Inventory, a: int, b: int) -> int:
    """SLIT distance from node a to node b (10 local, 20 when unknown)."""
    if a == b:
        return 10
    na = inv.node(a)
    ids = sorted(n.id for n in inv.nodes)  # the row lists online nodes in id order
    if na is None or not na.distance or len(na.distance) != len(ids) or b not in ids:
        return REMOTE_DISTANCE
    return na.distance[ids.index(b)]


def socket_of(inv: Inventory, node: int) -> Tuple[int, ...]:
    """CPU nodes closer to ``node`` than REMOTE_DISTANCE (the node itself included)."""
    return tuple(
        sorted(n.id for n in inv.nodes if n.has_cpu and (n.id == node or distance(inv, node, n.id) < REMOTE_DISTANCE))
    )


def nearest_cxl(inv: Inventory, cpu_nodes: Sequence[int]) -> Tuple[int, ...]:
    """CXL memory nodes at the smallest distance from any of ``cpu_nodes`` (all ties)."""
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    if not cxl or not cpu_nodes:
        return ()
    best: Dict[int, int] = {c.id: min(distance(inv, p, c.id) for p in cpu_nodes) for c in cxl}
    low = min(best.values())
    return tuple(sorted(i for i, d in best.items() if d == low))


def _dram(n: Node) -> bool:
    return n.kind == "dram" and n.has_memory


def resolve(
    inv: Inventory,
    host: Host,
    *,
    cpu_spec: Optional[str],
    mem_spec: Optional[str],
    gpu_spec: Optional[str],
    allowed_mems: Optional[Sequence[int]] = None,
    allowed_cpu_nodes: Optional[Sequence[int]] = None,
) -> NodeSets:
    """The node sets for a launch: explicit lists validated, defaults derived (module docstring)."""
    how: List[str] = []
    all_gpus = find_gpus(host)
    gpus = select_gpus(all_gpus, gpu_spec)
    cpu_all = [n.id for n in inv.nodes if n.has_cpu]
    if cpu_spec is not None:
        cpu_nodes = parse_node_spec(cpu_spec, "--cpu-nodes", inv, want="cpu", allowed=allowed_cpu_nodes)
        how.append(f"CPU nodes {format_nodelist(cpu_nodes)} from --cpu-nodes")
    else:
        gnodes = sorted({g.numa_node for g in gpus if g.numa_node is not None})
        if gpus and gnodes:
            sock = sorted({s for g in gnodes for s in socket_of(inv, g)})
            cpu_nodes = tuple(sock) if sock else tuple(cpu_all)
            how.append(
                "CPU nodes "
                + format_nodelist(cpu_nodes)
                + ": the socket of GPU "
                + ", ".join(f"{g.ordinal} ({g.bdf}, node {g.numa_node})" for g in gpus)
            )
        else:
            cpu_nodes = tuple(cpu_all)
            why = "no NVIDIA GPU found" if not gpus else "the GPUs' PCI devices report no NUMA node"
            how.append(f"CPU nodes {format_nodelist(cpu_nodes) or 'none'}: every CPU node ({why})")
        if not cpu_nodes:
            raise UsageError("no node with CPUs found", hint="check the tree with cxlctl status (is --root right?)")
    if mem_spec is not None:
        mem_nodes = parse_node_spec(mem_spec, "--mem-nodes", inv, want="memory", allowed=allowed_mems)
        how.append(f"memory nodes {format_nodelist(mem_nodes)} from --mem-nodes")
    else:
        dram = [n.id for n in inv.nodes if _dram(n) and n.id in cpu_nodes]
        if not dram:  # CPU nodes without local memory: the DRAM nodes nearest to them
            cands = [n for n in inv.nodes if _dram(n)]
            if cands:
                low = min(min(distance(inv, c, n.id) for c in cpu_nodes) for n in cands)
                dram = [n.id for n in cands if min(distance(inv, c, n.id) for c in cpu_nodes) == low]
        cxl = nearest_cxl(inv, cpu_nodes)
        mem_nodes = tuple(sorted(set(dram) | set(cxl)))
        how.append(
            f"memory nodes {format_nodelist(mem_nodes) or 'none'}: DRAM {format_nodelist(dram) or 'none'} of those CPUs"
            + (f" + nearest CXL {format_nodelist(cxl)}" if cxl else " (no CXL memory node online)")
        )
        if not mem_nodes:
            raise UsageError("no memory node found for the CPU nodes", hint="give --mem-nodes")
    kinds = {n.id: n.kind for n in inv.nodes}
    return NodeSets(
        cpu_nodes=tuple(cpu_nodes),
        mem_nodes=tuple(mem_nodes),
        dram=tuple(n for n in mem_nodes if kinds.get(n) == "dram"),
        cxl=tuple(n for n in mem_nodes if kinds.get(n) == "cxl"),
        other=tuple(n for n in mem_nodes if kinds.get(n) not in ("dram", "cxl")),
        gpus=gpus,
        how=tuple(how),
    )


def cpus_of(inv: Inventory, nodes: Sequence[int]) -> Tuple[int, ...]:
    out: List[int] = []
    for n in inv.nodes:
        if n.id in nodes:
            out.extend(n.cpus)
    return tuple(sorted(set(out)))
