"""What ``cxlctl region`` and ``cxlctl dax`` were asked, checked before anything is read or written.

The command line hands over the option strings as typed; this module turns them
into the planner's :class:`~cxlctl.regions.planner.Request` (sizes, memdev
names, decoder names) and the online mode and zone, and checks a ``destroy``
target against the inventory, each refusal a :class:`~cxlctl.errors.UsageError`
(exit 2, nothing written) that names the option and the fix.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, List, Optional, Tuple

from cxlctl.errors import EXIT_USAGE, CxlctlError, UsageError
from cxlctl.parse import decimal_suffix

if TYPE_CHECKING:
    from cxlctl.hostio.host import Host
    from cxlctl.model import Inventory

    from .planner import Plan, Request

#: what a region's DAX device can become (``--online``, ``dax reconfigure --mode``)
MODES = ("system-ram", "devdax")
#: the zones system-ram memory is onlined in (``--zone``; the first is the default)
ZONES = ("normal", "movable")


def choice(value: str, allowed: Tuple[str, ...], opt: str) -> str:
    """``value`` (any case, spaces trimmed) when one of ``allowed``, else a usage error naming ``opt``."""
    v = value.strip().lower()
    if v not in allowed:
        raise UsageError(f"{opt} {value!r} is not one of {', '.join(allowed)}", hint=f"use {opt} {allowed[0]}")
    return v


def zone(value: Optional[str], mode: str, opt: str) -> str:
    """``--zone`` (default normal) for system-ram; with devdax, where no memory is onlined, a usage error
    rather than a silently ignored option."""
    if value is not None and mode == "devdax":
        raise UsageError(
            f"--zone {value} has no effect with {opt} devdax: a devdax device is not onlined as memory",
            hint=f"drop --zone, or use {opt} system-ram",
        )
    return choice(value or ZONES[0], ZONES, "--zone")


def zone_default(host: Host, inv: Inventory, value: Optional[str], mode: str, opt: str) -> Tuple[str, Optional[str]]:
    """(zone, why): ``--zone`` as given; without it the host's split decides for system-ram
    (capacity/pinnable.py ``zone_for``: the kernel zone while the host's pinnable CXL memory is below
    ``[capacity] pinnable``, movable otherwise), the same decision the daemon's adoption takes."""
    if value is not None or mode == "devdax":
        return zone(value, mode, opt), None
    from cxlctl.capacity import pinnable

    return pinnable.zone_for(pinnable.load_share(host, inv), pinnable.CREATE)


def _memdev_names(memdevs: str) -> Tuple[str, ...]:
    from cxlctl.parse import parse_name_list

    if not memdevs.replace(",", "").strip():
        raise UsageError("--memdevs is empty", hint="e.g. --memdevs mem0,mem1")
    try:  # as strict as --mem-nodes: "mem0,,mem1" is an error, not "mem0,mem1"
        names = tuple(parse_name_list(memdevs, "memdev", "mem"))
    except ValueError as e:
        raise UsageError(f"--memdevs: {e}", hint="memdevs are named memN, comma-separated (cxlctl status)") from None
    given = [p.strip() for p in memdevs.split(",")]
    if len(given) != len(names):  # parse_name_list drops repeats; a region cannot use a memdev twice
        twice = sorted({n for n in given if given.count(n) > 1})
        raise UsageError(
            f"--memdevs {memdevs!r} names {', '.join(twice)} more than once",
            hint="name each memdev once; --ways N alone lets cxlctl pick N",
        )
    return names


def _size(value: Optional[str], opt: str, example: str) -> Optional[int]:
    from cxlctl.parse import parse_size

    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as e:
        raise UsageError(f"{opt}: {e}", hint=f"e.g. {example}") from None


def request(
    memdevs: Optional[str],
    ways: Optional[int],
    size: Optional[str],
    granularity: Optional[str],
    decoder: Optional[str],
    rtype: str,
) -> Request:
    """The planner's request from ``--memdevs``, ``--ways``, ``--size``, ``--granularity``,
    ``--decoder`` and ``--type`` as typed."""
    from .planner import Request

    names = () if memdevs is None else _memdev_names(memdevs)
    if ways is not None and ways <= 0:
        raise UsageError(f"--ways {ways} must be positive")
    sz = _size(size, "--size", "--size 512M or --size 4G")
    if sz == 0:
        raise UsageError("--size 0: a region needs a size", hint="leave --size out to use all that fits")
    g = _size(granularity, "--granularity", "--granularity 4096 or 4K")
    if decoder is not None and not re.fullmatch(r"decoder[0-9]+\.[0-9]+", decoder):
        raise UsageError(
            f"--decoder {decoder!r} is not a decoder name", hint="root decoders are named decoderX.Y (cxlctl status)"
        )
    return Request(memdevs=names, ways=ways, size=sz, granularity=g, decoder=decoder, type=rtype.strip().lower())


def plans(inv: Inventory, req: Request, use_all: bool) -> List[Plan]:
    """The one plan for ``req``, or with ``--all`` one per window (which picks memdevs, ways and sizes)."""
    from .planner import plan, plan_all

    if use_all:
        if req.memdevs or req.ways is not None or req.size is not None:
            raise UsageError(
                "--all picks memdevs, ways and sizes itself", hint="drop --memdevs/--ways/--size, or drop --all"
            )
        return plan_all(inv, req)
    return [plan(inv, req)]


def check_destroy_target(host: Host, region: str) -> None:
    """Refuse (exit 2) a ``region destroy`` of a bad name (before reading anything), an unknown
    region, or one whose decoders a later region still holds.

    What the inventory can tell before the lock; the region's own state (online memory without
    ``--force``) is :func:`cxlctl.regions.program.check_destroy`, checked again under the lock."""
    from cxlctl.capacity.maygo import ORDER_REASON, region_blockers
    from cxlctl.inventory import scan

    if decimal_suffix(region, "region") is None:
        raise UsageError(f"{region!r} is not a region name", hint="regions are named regionN (cxlctl status)")
    inv = scan(host)
    if inv.region(region) is None:
        known = ", ".join(r.name for r in inv.regions) or "none"
        raise CxlctlError(f"no region {region} (regions: {known})", code=EXIT_USAGE)
    blockers = region_blockers(inv, region)
    later = [b for b in blockers if b.code == "decoder-order"]
    if later:
        raise CxlctlError(
            f"{region} cannot be torn down before "
            + ", ".join(b.subject for b in later)
            + f": {ORDER_REASON}; nothing was changed",
            code=EXIT_USAGE,
            hint=f"destroy {', '.join(b.subject for b in later)} first",
        )
    if blockers:
        b = blockers[0]
        raise CxlctlError(f"cannot destroy {region}: {b.message}; nothing was changed", code=EXIT_USAGE, hint=b.fix)


def check_dax_name(device: str) -> None:
    """Refuse (exit 2) a ``dax reconfigure`` target not named like ``daxX.Y``."""
    if not (device.startswith("dax") and "." in device):
        raise UsageError(f"{device!r} is not a DAX device name", hint="DAX devices are named daxX.Y (cxlctl status)")
