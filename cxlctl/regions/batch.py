"""The region commands that write, each under the tuning lock: create, destroy, DAX reconfigure.

The one place the region engine takes ``/run/cxlctl/lock`` (shared with the
tuning engine and the daemon: onlining memory and ``auto_online_blocks`` are
knobs too).  Each entry point checks what would refuse it first
(:func:`~cxlctl.regions.program.check_destroy`,
:func:`~cxlctl.regions.dax.check_reconfigure`), so a refusal takes no lock and
writes nothing, not even the lock file; the engine checks again under the lock.

``region create``: program one plan, or with ``--all`` one region after another, and online each.

Each region is programmed by :func:`cxlctl.regions.program.create` (full undo on
failure) and its DAX device put in the asked mode and zone by
:func:`cxlctl.regions.dax.reconfigure` while the region is still undoable.
With ``--all`` the next plan is made on a fresh scan (the kernel's names and
addresses replace the prediction), at most :data:`~cxlctl.regions.planner.MAX_REGIONS`
regions — the same bound the planner uses.  A failure after some regions were
created leaves those in place and is returned beside them, so the caller can
report both.
"""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Optional, Sequence, Tuple

from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import TuneLock
from cxlctl.model import DaxDevice
from cxlctl.progress import ProgressFn
from cxlctl.regions import dax
from cxlctl.regions.planner import MAX_REGIONS, Plan, Request, plan_all
from cxlctl.regions.program import Created, Destroyed, Log, check_destroy, create, destroy


class Built(NamedTuple):
    created: Created
    dax: Tuple[DaxDevice, ...]  # each DAX device of the region, read after onlining


class Batch(NamedTuple):
    built: Tuple[Built, ...]
    block_size: Optional[int]
    error: Optional[CxlctlError]  # --all stopped by this failure after ``built`` were created (they stay)


def _online(host: Host, online: str, zone: str, log: Log, progress: Optional[ProgressFn]) -> Callable[[Created], None]:
    def step(made: Created) -> None:
        if not made.dax_devices:
            raise dax.DaxError(
                f"no DAX device appeared for {made.region} (is the dax_cxl driver loaded?)",
                hint="modprobe dax_cxl, then create the region again",
            )
        for dev in made.dax_devices:
            dax.reconfigure(host, dev, online, zone, force=True, log=log, progress=progress)

    return step


def _next(host: Host, req: Request) -> Optional[Plan]:
    from cxlctl.inventory import scan

    try:
        plans = plan_all(scan(host), req)
    except CxlctlError:
        return None  # nothing more fits
    return plans[0] if plans else None  # every memdev's RAM in a region now: done


def create_regions(
    host: Host,
    plans: Sequence[Plan],
    req: Request,
    *,
    use_all: bool,
    online: str,
    zone: str,
    log: Log,
    wait: Optional[float] = None,
    progress: Optional[ProgressFn] = None,
) -> Batch:
    """Create ``plans[0]`` (and with ``use_all`` more, re-planned each time) under the tuning lock.

    Raises the first failure when nothing was created; otherwise returns it in
    :attr:`Batch.error`.  ``progress`` is called per memory block onlined.
    """
    built: List[Built] = []
    error: Optional[CxlctlError] = None
    with TuneLock(host.root, wait):
        hold = dax.needs_hold(host, online, zone)
        current: Optional[Plan] = plans[0]
        while current is not None:
            try:
                made = create(host, current, log, on_bound=_online(host, online, zone, log, progress), hold=hold)
            except CxlctlError as e:
                if not built:
                    raise
                error = e
                break
            built.append(Built(made, tuple(dax.read_dax(host, d) for d in made.dax_devices)))
            if not use_all or len(built) >= MAX_REGIONS:
                break
            current = _next(host, req)
    return Batch(tuple(built), dax.block_size(host), error)


def destroy_region(
    host: Host, name: str, force: bool, log: Log, *, wait: Optional[float] = None, progress: Optional[ProgressFn] = None
) -> Destroyed:
    """``region destroy``: refused (exit 2, no lock taken) while its memory is online without ``force``."""
    check_destroy(host, name, force)
    with TuneLock(host.root, wait):
        from .request import check_destroy_target

        check_destroy_target(host.fresh(), name)  # may it go (maygo), again under the lock
        return destroy(host, name, force, log, progress)


def reconfigure_dax(
    host: Host,
    name: str,
    mode: str,
    zone: str,
    force: bool,
    log: Log,
    *,
    wait: Optional[float] = None,
    progress: Optional[ProgressFn] = None,
) -> dax.Reconfigured:
    """``dax reconfigure``: refused (exit 2, no lock taken) when devdax would take online memory
    away without ``force``."""
    dax.check_reconfigure(host, name, mode, zone, force)
    with TuneLock(host.root, wait):
        return dax.reconfigure(host, name, mode, zone, force, log, progress)
