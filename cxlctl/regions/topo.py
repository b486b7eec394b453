"""The CXL port tree as the region planner sees it.

Why a separate view: the inventory lists ports flat (each with its parent and
its dports); the planner needs, for every memdev, the chain of (port, dport)
pairs from the root down to its endpoint, because a region's interleave
position is fixed by the dport each level uses (ndctl_sysfs.md §1.2,
region.c ``cxl_region_attach_position`` / ``check_last_peer``).

Which dport of a parent leads to a child: the child's ``parent_dport`` link
(Linux 6.3+) names it; a host bridge's own name (``host``) also matches the
root's dport (ACPI ``ACPI0016:NN`` or PCI ``pciDDDD:BB``, kept as name/alias);
a parent with a single dport needs no link.  Anything else is reported as
unresolvable rather than guessed.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

from cxlctl.model import Inventory, Port
from cxlctl.namedrecord import NamedTuple


class Hop(NamedTuple):
    """One level above an endpoint: ``port`` routes to the endpoint through dport ``dport``."""

    port: str
    dport: int


class Tree:
    """Parent/child/dport relations of an inventory's CXL ports (read-only)."""

    def __init__(self, inv: Inventory) -> None:
        self.ports: Dict[str, Port] = {p.name: p for p in inv.buses + inv.ports + inv.endpoints}
        self.endpoint_of_memdev: Dict[str, str] = {e.memdev: e.name for e in inv.endpoints if e.memdev}
        #: child port/endpoint -> dport id at its parent (None: cannot tell)
        self.dport_of: Dict[str, Optional[int]] = {}
        #: port -> [(dport id, child name)] in dport-id order
        self.children: Dict[str, List[Tuple[int, str]]] = {}
        for p in self.ports.values():
            if p.kind == "root" or p.parent is None:
                continue
            parent = self.ports.get(p.parent)
            if parent is None:
                continue
            d = _dport_to(parent, p)
            self.dport_of[p.name] = d
            if d is not None:
                self.children.setdefault(parent.name, []).append((d, p.name))
        for kids in self.children.values():
            kids.sort()

    def chain(self, endpoint: str) -> Tuple[Optional[str], Tuple[Hop, ...], Optional[str]]:
        """(root name, hops from the root down, error) for an endpoint port.

        ``hops[0]`` is the root's hop (its dport = the host bridge); the last hop
        is the endpoint's parent port.
        """
        hops: List[Hop] = []
        cur = self.ports.get(endpoint)
        if cur is None:
            return None, (), f"{endpoint} is not a CXL port in this inventory"
        seen: Set[str] = set()
        while cur.kind != "root":
            if cur.name in seen or len(seen) > 64:
                return None, (), f"port loop above {endpoint}"
            seen.add(cur.name)
            parent = self.ports.get(cur.parent or "")
            if parent is None:
                return None, (), f"{cur.name} has no parent port in the inventory (driver not bound?)"
            d = self.dport_of.get(cur.name)
            if d is None:
                return (
                    None,
                    (),
                    (
                        f"cannot tell which dport of {parent.name} leads to {cur.name} "
                        "(no parent_dport link: kernel older than 6.3?)"
                    ),
                )
            hops.append(Hop(parent.name, d))
            cur = parent
        hops.reverse()
        return cur.name, tuple(hops), None

    def host_bridge_of(self, root_port: str, dport: int) -> Optional[str]:
        """The host-bridge port below root port ``root_port`` reached through its dport ``dport``."""
        for d, child in self.children.get(root_port, []):
            if d == dport:
                return child
        return None


def _dport_to(parent: Port, child: Port) -> Optional[int]:
    keys = [k for k in (child.parent_dport,) if k]
    if parent.kind == "root" and child.host:
        keys.append(child.host)
    for k in keys:
        for d in parent.dports:
            if k in (d.name, d.alias):
                return d.id
    if len(parent.dports) == 1:
        return parent.dports[0].id
    return None


def decoder_index(name: str) -> int:
    """``decoder3.2`` -> 2 (the hardware instance; allocation and commit follow it)."""
    try:
        return int(name.rsplit(".", 1)[1])
    except (IndexError, ValueError):
        return 1 << 30
