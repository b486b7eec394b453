"""The JSON documents of ``cxlctl region …`` and ``cxlctl dax …``, shaped in one place.

Pure functions of the engines' typed results (no host reads): the CLI adds
``schema_version`` and prints.  Field names are an interface (docs/regions.md);
DAX devices use daxctl list's vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from cxlctl.regions.dax import MODES

if TYPE_CHECKING:
    from cxlctl.model import DaxDevice
    from cxlctl.regions.batch import Built
    from cxlctl.regions.dax import Reconfigured
    from cxlctl.regions.planner import Plan
    from cxlctl.regions.program import Destroyed


def dax_device(st: DaxDevice, bs: Optional[int]) -> Dict[str, Any]:
    """daxctl list's vocabulary for one device (read fresh, so its block counts are filled in)."""
    kmem = st.driver == "kmem"
    online = st.online_memblocks or 0
    zones = list(st.zones)
    return {
        "chardev": st.name,
        "size": st.size,
        "target_node": st.target_node,
        "mode": MODES.get(st.driver or "", st.driver),
        "online_memblocks": online if kmem else 0,
        "total_memblocks": (st.total_memblocks or 0) if kmem else 0,
        "movable": (zones == ["Movable"]) if online else None,
        "zones": zones,
    }


def plan(p: Plan) -> Dict[str, Any]:
    """One region plan: the window, the targets in position order, each target's route, the port decoders."""
    index = {(lv.port, t): i for lv in p.levels for i, t in enumerate(lv.targets)}
    return {
        "decoder": p.root_decoder,
        "type": p.type,
        "size": p.size,
        "interleave_ways": p.ways,
        "interleave_granularity": p.granularity,
        "resource": p.resource,
        "window": {"size": p.window_size, "max_available_extent": p.window_free},
        "targets": [t.memdev for t in p.targets],
        "mappings": [
            {
                "position": t.position,
                "memdev": t.memdev,
                "decoder": t.decoder,
                "endpoint": t.endpoint,
                "dpa_size": t.dpa_size,
                "mode": t.mode,
                "route": [{"port": h.port, "dport": h.dport, "index": index.get((h.port, h.dport))} for h in t.hops],
            }
            for t in p.targets
        ],
        "port_decoders": [
            {
                "port": lv.port,
                "decoder": lv.decoder,
                "interleave_ways": lv.ways,
                "interleave_granularity": lv.granularity,
                "targets": list(lv.targets),
            }
            for lv in p.levels[1:]
        ],
        "notes": list(p.notes),
    }


def plans(ps: Sequence[Plan]) -> Dict[str, Any]:
    return {"plans": [plan(p) for p in ps]}


def dry_run(ps: Sequence[Plan], online: str, zone: str) -> Dict[str, Any]:
    return {"dry_run": True, "online": online, "zone": zone, "plans": [plan(p) for p in ps]}


def created(b: Built, bs: Optional[int]) -> Dict[str, Any]:
    """A created region: its plan with the kernel's names and address, its DAX devices after onlining."""
    made = b.created
    doc = plan(made.plan)
    doc.update(
        {
            "region": made.region,
            "resource": made.resource,
            "decode_state": "commit",
            "mappings": [dict(m, memdev=mm, decoder=dd) for m, (_, mm, dd) in zip(doc["mappings"], made.mappings)],
            "targets": [mm for _, mm, _ in made.mappings],
            "dax": [dax_device(d, bs) for d in b.dax],
            "steps": list(made.steps),
        }
    )
    return doc


def created_all(built: Sequence[Built], bs: Optional[int], complete: bool) -> Dict[str, Any]:
    """``region create`` (one region, or several with ``--all``); ``complete`` False: --all stopped early."""
    regions: List[Dict[str, Any]] = [created(b, bs) for b in built]
    return {"dry_run": False, "complete": complete, "regions": regions}


def destroyed(d: Destroyed) -> Dict[str, Any]:
    return {
        "region": d.region,
        "destroyed": True,
        "offlined": [{"chardev": dev, "memory_blocks": list(ids)} for dev, ids in d.offlined],
        "freed_decoders": list(d.freed_decoders),
        "steps": list(d.steps),
    }


def reconfigured(r: Reconfigured, bs: Optional[int]) -> Dict[str, Any]:
    return {"device": dax_device(r.state, bs), "before": r.before, "changed": r.changed, "actions": list(r.actions)}
