"""Adopt hot-added capacity: build a free memdev into a region of its own and online it.

A fabric manager's bind arrives as a PCIe hot-add: a new ``memN`` with its
endpoint and free endpoint decoders, and no region (the kernel builds none by
itself for a hot-added device: at the endpoint port's probe, ``discover_region()``
in drivers/cxl/port.c calls ``cxl_add_to_region()`` only for decoders that are
enabled and in ``CXL_DECODER_STATE_AUTO``, i.e. committed by the platform firmware).
Adoption is ``cxlctl region create --memdevs memN --online MODE --zone ZONE``
— the same planner (:mod:`cxlctl.regions.planner`), programmer and onliner
(:func:`cxlctl.regions.batch.create_regions`, under the tuning lock) — with one
choice made for it: the window.  A window holding no region is preferred, so the
device's memory lands on a NUMA node of its own (``acpi_parse_cfmws()`` in
drivers/acpi/numa/srat.c gives each CFMWS window the SRAT does not describe a
proximity domain, and so a node, of its own), and a
later ``capacity release`` of the device takes the whole node away with it
(``try_remove_memory()`` → ``try_offline_node()``).

Shared by ``cxlctl capacity adopt`` and the daemon's ``[capacity] adopt``.
Refusals (exit 2, nothing written): an unknown memdev, one that already has a
region or DPA allocated, one the planner cannot place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from cxlctl.errors import EXIT_USAGE, CxlctlError, UsageError
from cxlctl.parse import format_size

if TYPE_CHECKING:
    from cxlctl.config import Config
    from cxlctl.hostio.host import Host
    from cxlctl.model import Inventory
    from cxlctl.progress import ProgressFn
    from cxlctl.regions.batch import Built
    from cxlctl.regions.planner import Plan

Log = Callable[[str], None]
#: what a hot-added memdev becomes (``[capacity] adopt``, ``--mode``); "none" leaves it free
MODES = ("system-ram", "devdax")
#: the zone its system-ram memory is onlined in; movable first: the one that can be given back
ZONES = ("movable", "normal")


class Adopted(NamedTuple):
    memdev: str
    serial: Optional[int]
    plan: Plan
    built: Optional[Built]  # None: a dry run
    zone: str = "movable"  # the zone its system-ram memory is (to be) onlined in
    zone_why: Optional[str] = None  # the host's split decided it (no --zone): why (capacity/pinnable.py)


def _zone(
    inv: Inventory, zone: Optional[str], cfg: Optional[Config], host: Host, added: int
) -> Tuple[str, Optional[str]]:
    """``zone`` as asked, or the host's split's decision (capacity/pinnable.py ``zone_for``) with ``added``
    bytes of kernel-zone memory a dry run's earlier memdevs would have added."""
    if zone is not None:
        return zone, None
    from . import pinnable

    sh = pinnable.share(inv, cfg) if cfg is not None else pinnable.load_share(host, inv)
    return pinnable.zone_for(sh._replace(pinnable=sh.pinnable + added), pinnable.ADOPT)


def why_not(inv: Inventory, memdev: str) -> Optional[str]:
    """Why ``memdev`` cannot be adopted (unknown, already in a region, DPA allocated, unbound); None: it can."""
    m = inv.memdev(memdev)
    if m is None:
        known = ", ".join(x.name for x in inv.memdevs) or "none"
        return f"no memdev {memdev} (memdevs: {known})"
    if m.regions:
        return f"{memdev} already has a region ({', '.join(m.regions)}): it is in use, not newly arrived"
    if m.dpa_allocated:
        return f"{memdev} has {format_size(m.dpa_allocated)} of DPA allocated in an endpoint decoder without a region"
    if not m.endpoint:
        return f"{memdev} is not bound to cxl_mem (no endpoint): the kernel has not enumerated its decoders"
    return None


#: ``security/state`` values (``security_state_show()``, drivers/cxl/core/memdev.c) a memdev is never adopted in:
#: ``locked`` (CXL_PMEM_SEC_STATE_LOCKED: a passphrase is set and the media is locked), ``frozen`` (FROZEN or a
#: passphrase limit reached: no security command until the next reset), ``sanitize`` (a sanitize in progress)
REFUSED_SECURITY = ("locked", "frozen", "sanitize")


def security_state(host: Host, memdev: str) -> Optional[str]:
    """The memdev's ``security/state`` (None: the kernel has none for it)."""
    from cxlctl.hostio import paths

    t = host.reread().text(paths.memdev_security(memdev, "state"))
    return t.strip() if t is not None else None


def security_refusal(host: Host, memdev: str) -> Optional[str]:
    """Why the memdev's security state forbids adopting it; None: it does not."""
    st = security_state(host, memdev)
    if st in REFUSED_SECURITY:
        why = {
            "locked": "its media is locked behind a passphrase (another tenant's data, or not ours to unlock)",
            "frozen": "its security state is frozen: no unlock, passphrase change or sanitize until the next reset",
            "sanitize": "a sanitize of its media is in progress",
        }[st]
        return f"{memdev}'s security state is {st}: {why}"
    return None


def plan_for(inv: Inventory, memdev: str) -> Plan:
    """The region for ``memdev`` alone: on a window holding no region first (a node of its own), else any."""
    from cxlctl.regions.planner import PlanError, Request, plan

    used = {r.root_decoder for r in inv.regions}
    roots = sorted((d for d in inv.decoders if d.kind == "root"), key=lambda d: (d.name in used, d.name))
    reasons = []
    for rd in roots:
        try:
            return plan(inv, Request(memdevs=(memdev,), decoder=rd.name))
        except PlanError as e:
            reasons.append(f"{rd.name}: {e}")
    raise PlanError(
        f"no window can hold a region of {memdev}: " + ("; ".join(reasons) or "no CXL root decoder (window) found"),
        hint="`cxlctl region plan --memdevs " + memdev + "` explains the topology",
    )


def check(inv: Inventory, memdevs: Sequence[str]) -> List[Tuple[str, Plan]]:
    """Each named memdev with its plan, or the refusal (exit 2) naming the memdev and the reason."""
    from cxlctl.capacity.release import _names

    out = []
    for m in _names(memdevs):
        why = why_not(inv, m)
        if why is not None:
            raise CxlctlError(
                f"cannot adopt {m}: {why}; nothing was changed",
                code=EXIT_USAGE,
                hint="`cxlctl capacity` lists the memdevs and their state; `free` ones can be adopted",
            )
        out.append((m, plan_for(inv, m)))
    return out


def adopt(
    host: Host,
    memdevs: Sequence[str],
    mode: str,
    zone: Optional[str],
    log: Log,
    *,
    dry_run: bool = False,
    wait: Optional[float] = None,
    progress: Optional[ProgressFn] = None,
    cfg: Optional[Config] = None,
) -> List[Adopted]:
    """Build each memdev into a region of its own and online it as ``mode``/``zone``; ``zone`` None: the
    host's split decides for each memdev (capacity/pinnable.py, ``cfg`` or the configuration file).

    Each memdev is planned on a fresh scan (the region before it took a window and a name).
    A failure after some were adopted leaves those in place and raises: the message names them.
    """
    from cxlctl.inventory import scan
    from cxlctl.regions.batch import create_regions
    from cxlctl.regions.planner import Request

    if mode not in MODES:
        raise UsageError(f"--mode {mode!r} is not one of {', '.join(MODES)}", hint="use --mode system-ram")
    if zone is not None and zone not in ZONES:
        raise UsageError(f"--zone {zone!r} is not one of {', '.join(ZONES)}", hint="use --zone movable")
    from . import surprise

    inv = scan(host)
    planned = check(inv, memdevs)
    gone = surprise.load(host)
    if gone is not None:
        raise CxlctlError(
            f"cannot adopt {', '.join(m for m, _p in planned)}: the host is to be drained and rebooted ({gone.message}); "
            "nothing was changed",
            code=EXIT_USAGE,
            hint="drain the host and reboot it; capacity it takes before then sits beside memory with no device behind it",
        )
    for m, _p in planned:
        why = security_refusal(host, m)
        if why is not None:
            raise CxlctlError(
                f"cannot adopt {m}: {why}; nothing was changed",
                code=EXIT_USAGE,
                hint=f"`cxl list -m {m} -vvv` shows its security state; unlock it (or have the fabric manager "
                "bind a device that is not locked) first",
            )
    serial = {m.name: m.serial for m in inv.memdevs}
    if dry_run:
        out, added = [], 0
        for m, p in planned:
            z, why = _zone(inv, zone, cfg, host, added)
            added += p.size if z == "normal" and mode == "system-ram" else 0
            out.append(Adopted(m, serial.get(m), p, None, z, why))
        return out
    done: List[Adopted] = []
    for m, p in planned:
        if done:  # the previous region changed the windows and names: plan on what is there now
            inv = scan(host)
            p = check(inv, [m])[0][1]
        z, why = _zone(inv, zone, cfg, host, 0)
        try:
            batch = create_regions(
                host, [p], Request(memdevs=(m,)), use_all=False, online=mode, zone=z, log=log, wait=wait,
                progress=progress,
            )  # fmt: skip
        except CxlctlError as e:
            if done:
                raise CxlctlError(
                    f"adopting {m} failed: {e}; {', '.join(a.memdev for a in done)} adopted and stay",
                    hint=e.hint,
                ) from None
            raise
        done.append(Adopted(m, serial.get(m), p, batch.built[0], z, why))
    return done


def summary(a: Adopted, block_size: Optional[int]) -> Dict[str, Any]:
    """One adoption as data (``--json``, the daemon's log line)."""
    from cxlctl.regions import region_json

    doc: Dict[str, Any] = {
        "memdev": a.memdev,
        "serial": a.serial,
        "root_decoder": a.plan.root_decoder,
        "size": a.plan.size,
        "adopted": a.built is not None,
        "zone": a.zone,
        "zone_decided_by": a.zone_why,
    }
    if a.built is not None:
        made = region_json.created(a.built, block_size)
        doc["region"] = made["region"]
        doc["dax"] = made["dax"]
        doc["nodes"] = sorted({x["target_node"] for x in made["dax"] if x["target_node"] is not None})
    return doc


def line(a: Adopted, mode: str, block_size: Optional[int]) -> str:
    """``mem1 (serial 0x5002) adopted: region1 on decoder0.1, 256 MiB, dax1.0 system-ram on node 2 in ZONE_MOVABLE``."""
    serial = f"serial {a.serial:#x}" if a.serial is not None else "serial unknown"
    where = f"{format_size(a.plan.size)} on {a.plan.root_decoder}"
    if a.built is None:
        how = f"system-ram in ZONE_{a.zone.upper()}" if mode == "system-ram" else "devdax"
        how += f" ({a.zone_why})" if a.zone_why and mode == "system-ram" else ""
        return f"{a.memdev} ({serial}): would build a region of {where}, then {how}; dry run, nothing written"
    d = summary(a, block_size)
    daxs = ", ".join(
        f"{x['chardev']} {x['mode']}"
        + (
            f" on node {x['target_node']}, {x['online_memblocks']}/{x['total_memblocks']} blocks online "
            f"in {'/'.join(x['zones']) or '-'}"
            if x["mode"] == "system-ram"
            else ""
        )
        for x in d["dax"]
    )
    return f"{a.memdev} ({serial}) adopted: {d['region']}, {where}" + (f"; {daxs}" if daxs else "")
