"""DAX device modes and memory onlining, with ``daxctl reconfigure-device`` semantics.

Why not call daxctl: bookworm's daxctl is fine for this part, but region
creation must decide the zone *while* the kernel hot-plugs the memory (the
kmem driver is bound as a side effect of binding the region), and the same
code must work on a ``--root`` tree in tests.  What it does, and where the
behaviour comes from (ndctl ``daxctl/device.c`` and ``lib/libdaxctl.c``):

* **to system-ram**: unbind the current driver (``remove_id`` then
  ``unbind``), bind ``kmem`` (``new_id`` then ``bind``), then online every
  memory block of the device with ``online_movable`` or ``online_kernel``.
  A write that fails is followed by a re-read: if the block is online anyway,
  someone raced us (udev, the kernel's auto-online) and that is not an error
  (daxctl ``online_one_memblock``).  Afterwards the zones are read back from
  ``valid_zones``; blocks in the wrong zone are moved (offline, online in the
  right zone) where the kernel lets us, and reported where it does not.
* **the auto-online policy** (``/sys/devices/system/memory/auto_online_blocks``):
  daxctl refuses when the kernel would online the memory itself.  cxlctl
  instead holds the policy at ``offline`` for the moment kmem is bound (only
  when the policy would pick another zone than the one asked for), restores
  it right after, and onlines the blocks itself in the requested zone.  The
  hold runs under the tuning lock, because ``auto_online_blocks`` is also a
  tuning knob.
* **to devdax**: every block must be offline first.  Without ``force`` an
  online device is refused; with it the blocks are offlined one by one, and if
  one cannot be (EBUSY: unmovable pages, typical of ZONE_NORMAL), the ones
  already offlined are put back online in their zone and nothing changes.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Callable, Iterator, List, NamedTuple, Optional, Tuple

from cxlctl.capacity.zones import EBUSY_HINT
from cxlctl.errors import EXIT_USAGE, CxlctlError
from cxlctl.hostio import objects, paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.objects import Attrs, is_online, set_block_state
from cxlctl.hostio.write import KnobError, write_knob
from cxlctl.model import DaxDevice, MemoryBlock
from cxlctl.parse import format_size, is_decimal, parse_meminfo
from cxlctl.progress import ProgressFn, tick

DAX_DEVICES = paths.DAX_DEVICES
DAX_DRIVERS = paths.DAX_DRIVERS
AUTO_ONLINE = paths.AUTO_ONLINE
#: seconds ``modprobe`` may take to load a DAX driver (it resolves dependencies, runs udev rules)
MODPROBE_TIMEOUT = 30.0

#: driver -> daxctl's mode name
MODES = {"kmem": "system-ram", "device_dax": "devdax"}
DRIVER_OF = {"system-ram": "kmem", "devdax": "device_dax"}
#: zone option -> the memory block state written to online in that zone, and valid_zones' word
ONLINE_STATE = {"movable": "online_movable", "normal": "online_kernel"}
ZONE_WORD = {"movable": "Movable", "normal": "Normal"}

Log = Callable[[str], None]


class DaxError(CxlctlError):
    """A DAX step failed; the message says what state the device was left in."""


def block_size(host: Host) -> Optional[int]:
    return objects.block_size(Attrs(host.reader))


def read_block(host: Host, bid: int) -> MemoryBlock:
    """Fresh state of one memory block (after a write to it: no handle kept from before)."""
    return objects.memory_block(host.reread(), paths.memory_block(bid), bid, -1)


def read_dax(host: Host, name: str) -> DaxDevice:
    """Fresh state of one DAX device, block counts and zones included (root needed for ``resource``)."""
    return read_dax_blocks(host, name)[0]


def read_dax_blocks(host: Host, name: str) -> Tuple[DaxDevice, Tuple[MemoryBlock, ...]]:
    """Fresh state of one DAX device and of its memory blocks.

    Read through :meth:`~cxlctl.hostio.host.Host.reread`: this is what is polled while the
    kernel hot-plugs (or removes) the device's memory block directories."""
    a = Attrs(host.reread())
    dev = f"{DAX_DEVICES}/{name}"
    if not a.r.isdir(dev):
        known = a.r.listdir(DAX_DEVICES)
        raise CxlctlError(
            f"no DAX device {name} (DAX devices: {', '.join(known) or 'none'})",
            code=EXIT_USAGE,
            hint="`cxlctl status` lists them; a CXL RAM region's device is daxN.0 for regionN",
        )
    dx = objects.dax_device(a, name)
    bs = objects.block_size(a)
    blocks = objects.dax_blocks(a, dx, bs)
    return objects.with_blocks(dx, blocks, bs), blocks


def online_blocks(host: Host, name: str) -> List[MemoryBlock]:
    """The online memory blocks of a DAX device, read now."""
    return [b for b in read_dax_blocks(host, name)[1] if is_online(b)]


def _has_blocks(host: Host, name: str) -> bool:
    return bool(read_dax_blocks(host, name)[1])


def node_in_use(host: Host, node: Optional[int]) -> Optional[int]:
    """Bytes in use on a NUMA node (MemTotal - MemFree), None when unknown."""
    if node is None:
        return None
    mi = parse_meminfo(host.reader.text(paths.node_dir(node) + "/meminfo") or "")
    if "MemTotal" not in mi or "MemFree" not in mi:
        return None
    return max(0, mi["MemTotal"] - mi["MemFree"])


def policy_zone(
    policy: Optional[str],
    *,
    online_policy: Optional[str] = None,
    numa_aware: Optional[str] = None,
    ratio: Optional[str] = None,
    movable_node: bool = False,
) -> Optional[str]:
    """Zone the kernel's auto-online policy picks for a new CPU-less CXL node's memory: ``normal``,
    ``movable``, ``either`` (decided at online time, so cxlctl cannot know it), None (left offline).

    As ``zone_for_pfn_range`` (mm/memory_hotplug.c) does for ``online`` (MMOP_ONLINE):

    * ``online_policy=auto-movable``: ``auto_movable_zone_for_pfn`` onlines Movable only while
      MOVABLE stays within ``auto_movable_ratio`` % of the boot-time kernel memory, checked
      system-wide and, with ``auto_movable_numa_aware`` (the default), on the node itself, where a
      CPU-less CXL node has no boot-time kernel memory, so it gets Normal; ratio 0: Normal;
      numa-aware off: the system-wide ratio decides (``either``);
    * else (``contig-zones``) ``default_zone_for_pfn``: memory in no zone yet goes to Movable with
      ``movable_node`` on the command line, else to Normal.

    The zone is checked after onlining either way.
    """
    if not policy or policy == "offline":
        return None
    if policy == "online_movable":
        return "movable"
    if policy == "online_kernel":
        return "normal"
    if online_policy == "auto-movable":
        if ratio is not None and is_decimal(ratio) and int(ratio) == 0:
            return "normal"
        return "normal" if numa_aware in (None, "Y", "1") else "either"
    return "movable" if movable_node else "normal"


def auto_online_zone(host: Host) -> Optional[str]:
    """:func:`policy_zone` for this host: auto_online_blocks, memory_hotplug's parameters, the command line."""
    r = host.reader
    return policy_zone(
        r.text(AUTO_ONLINE),
        online_policy=r.text(paths.ONLINE_POLICY),
        numa_aware=r.text(paths.AUTO_MOVABLE_NUMA_AWARE),
        ratio=r.text(paths.AUTO_MOVABLE_RATIO),
        movable_node="movable_node" in (r.text(paths.PROC_CMDLINE) or "").split(),
    )


def needs_hold(host: Host, mode: str, zone: str) -> bool:
    """Must ``auto_online_blocks`` be held at ``offline`` while kmem binds?

    Yes when the kernel would online in another zone than ``zone``, or in a zone it decides only
    at online time (``either``): cxlctl then onlines the blocks itself, with no offline/re-online."""
    pz = auto_online_zone(host)
    if pz is None:
        return False
    return mode != "system-ram" or pz != zone


@contextmanager
def hold_auto_online(host: Host, hold: bool, log: Log) -> Iterator[Optional[str]]:
    """Keep the kernel from onlining hot-plugged memory while the body runs; restore after."""
    old = host.reader.text(AUTO_ONLINE) if hold else None
    if not hold or old is None or old == "offline":
        yield None
        return
    write_knob(host.root, AUTO_ONLINE, "offline")
    log(f"held auto_online_blocks at offline (was {old}) while kmem binds")
    try:
        yield old
    finally:
        try:
            write_knob(host.root, AUTO_ONLINE, old)
            log(f"restored auto_online_blocks to {old}")
        except KnobError as e:  # say so loudly: a tuning knob is off its value
            raise DaxError(
                f"could not restore {AUTO_ONLINE} to {old!r}: {e}",
                hint=f"echo {old} > {AUTO_ONLINE}",
            ) from None


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        if pred():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


def _ensure_driver(host: Host, drv: str) -> None:
    r = host.reader
    if r.isdir(f"{DAX_DRIVERS}/{drv}"):
        return
    why = ""
    if host.live:  # daxctl loads the module too (kmod)
        from cxlctl.hostio import tools

        try:
            tools.run(["modprobe", drv], timeout=MODPROBE_TIMEOUT, package="kmod")
        except tools.ToolError as e:
            why = f": {e}"  # the driver cannot appear now: say why instead of waiting for it
        else:
            if _wait(lambda: r.isdir(f"{DAX_DRIVERS}/{drv}"), 5):
                return
    raise DaxError(f"the {drv} driver is not available ({DAX_DRIVERS}/{drv} is missing){why}", hint=f"modprobe {drv}")


def unbind(host: Host, name: str, log: Log) -> None:
    r = host.reread()  # the driver links change under this command
    drv = r.link(f"{DAX_DEVICES}/{name}/driver")
    if drv is None:
        return
    try:  # daxctl_unbind: forget the dynamic id, then unbind
        write_knob(host.root, f"{DAX_DRIVERS}/{drv}/remove_id", name)
    except KnobError:
        pass  # not a dynamic id of this driver: fine
    try:
        write_knob(host.root, f"{DAX_DRIVERS}/{drv}/unbind", name)
    except KnobError as e:
        if r.link(f"{DAX_DEVICES}/{name}/driver") is not None:
            raise DaxError(f"{name}: could not unbind it from {drv}: {e}") from None
    if not _wait(lambda: r.link(f"{DAX_DEVICES}/{name}/driver") is None, 10):
        raise DaxError(f"{name} is still bound to {drv} after unbind")
    log(f"{name}: unbound from {drv}")


def bind(host: Host, name: str, drv: str, log: Log) -> None:
    _ensure_driver(host, drv)
    r = host.reread()
    try:
        write_knob(host.root, f"{DAX_DRIVERS}/{drv}/new_id", name)
    except KnobError:
        pass  # daxctl ignores this too: new_id may probe and bind on its own
    if r.link(f"{DAX_DEVICES}/{name}/driver") != drv:
        try:
            write_knob(host.root, f"{DAX_DRIVERS}/{drv}/bind", name)
        except KnobError as e:
            if r.link(f"{DAX_DEVICES}/{name}/driver") != drv:
                raise DaxError(f"{name}: could not bind it to {drv}: {e}") from None
    if not _wait(lambda: r.link(f"{DAX_DEVICES}/{name}/driver") == drv, 10):
        raise DaxError(f"{name}: not bound to {drv} after bind")
    log(f"{name}: bound to {drv} ({MODES[drv]})")


def online_one(host: Host, bid: int, zone: str) -> Optional[str]:
    """Online a block in ``zone``; None on success (or if someone else onlined it), else the error."""
    try:
        set_block_state(host.root, bid, ONLINE_STATE[zone])
        return None
    except KnobError as e:
        if (read_block(host, bid).state or "").startswith("online"):
            return None  # raced with another onliner; zones are checked afterwards
        return str(e)


def _offline_one(host: Host, bid: int) -> Optional[str]:
    try:
        set_block_state(host.root, bid, "offline")
        return None
    except KnobError as e:
        if read_block(host, bid).state == "offline":
            return None  # raced: someone else offlined it
        return f"{e.errno_name or 'error'}: {os.strerror(e.errno) if e.errno else e}"


def _put_back(host: Host, done: List[MemoryBlock]) -> str:
    """Online again, each in its zone, the blocks an unfinished :func:`offline_blocks` offlined; says so."""
    back = [d.id for d in done if online_one(host, d.id, "movable" if d.zone == "Movable" else "normal") is None]
    lost = [d.id for d in done if d.id not in back]
    if lost:
        return f"blocks {', '.join(f'memory{x}' for x in lost)} stay offline (re-onlining failed)"
    return f"the {len(back)} block(s) already offlined are back online, nothing changed"


def offline_blocks(
    host: Host,
    blocks: List[MemoryBlock],
    log: Log,
    what: str,
    progress: Optional[ProgressFn] = None,
    timeout: Optional[float] = None,
) -> List[int]:
    """Offline every online block, highest first; all or nothing (``progress``: called after each block).

    The one offline loop (``capacity release``, ``region destroy --force``, ``dax reconfigure
    --mode devdax --force``).  Each write is bounded (:mod:`cxlctl.capacity.bound`): by the
    release's guard inside a release, else by ``timeout`` seconds (None: the default bound,
    ``capacity.bound.OFFLINE_TIMEOUT``), and SIGINT/SIGTERM end it
    too (the kernel's ``offline_pages()`` retries pages it cannot migrate until a signal).  On
    the first block that will not go offline (EBUSY: pages the kernel cannot migrate) or an
    interruption, the blocks already offlined go back online in their previous zone; then
    :class:`DaxError` says which block refused and why (exit 1, or 128+N for signal N), or,
    inside a release, the :class:`~cxlctl.capacity.bound.Interrupted` goes on to it.
    """
    from cxlctl.capacity import bound
    from cxlctl.capacity.bound import Interrupted, guarded

    done: List[MemoryBlock] = []
    todo = [b for b in sorted(blocks, key=lambda b: -b.id) if (b.state or "").startswith("online")]
    with guarded(bound.OFFLINE_TIMEOUT if timeout is None else timeout) as (guard, owned):
        b = None
        try:
            for b in todo:
                with guard.offlining():
                    err = _offline_one(host, b.id)
                if err is not None:
                    raise DaxError(
                        f"{what}: memory{b.id} could not be offlined ({err}): it holds pages the kernel cannot "
                        f"migrate (zone {b.zone or 'unknown'}); " + _put_back(host, done),
                        hint=EBUSY_HINT,
                    )
                done.append(b)
                tick(progress, len(done), len(todo), f"{what}: offlining memory blocks")
            if owned:
                guard.check()  # a signal between the writes: this offlining did not finish either
        except Interrupted as e:
            undone = _put_back(host, done)
            if not owned:
                raise
            raise DaxError(
                f"{what}: offlining {f'memory{b.id}' if b is not None else 'its blocks'} stopped: {e.why}; " + undone,
                code=e.exit_code,
                hint="the kernel retries pages it cannot migrate (held by a pin or an extra reference) until "
                "interrupted; `dmesg | grep -A3 'migration failure'` names them; " + EBUSY_HINT,
            ) from None
    if done:
        log(f"{what}: offlined {len(done)} memory block(s)")
    return [d.id for d in done]


def online_in_zone(host: Host, name: str, zone: str, log: Log, progress: Optional[ProgressFn] = None) -> DaxDevice:
    """Online every block of a kmem-bound device in ``zone``; move blocks found in the other zone.

    ``progress`` is called after each offline block is tried (done, total, what).
    """
    st, blocks = read_dax_blocks(host, name)
    if st.resource is None:
        raise DaxError(f"{name}: its address (resource) is unreadable; run as root")
    if not blocks:
        _wait(lambda: _has_blocks(host, name), 10)
        st, blocks = read_dax_blocks(host, name)
    errors = []
    onlined = 0
    todo = [b for b in blocks if (b.state or "") == "offline"]
    for i, b in enumerate(todo, 1):
        err = online_one(host, b.id, zone)
        if err:
            errors.append(f"memory{b.id}: {err}")
        else:
            onlined += 1
        tick(progress, i, len(todo), f"{name}: onlining memory blocks")
    if onlined:
        log(f"{name}: onlined {onlined} memory block(s) in ZONE_{ZONE_WORD[zone].upper()}")
    if errors:
        raise DaxError(f"{name}: could not online " + "; ".join(errors))
    want = ZONE_WORD[zone]
    wrong = [b for b in online_blocks(host, name) if b.zone != want]
    moved, stuck = 0, []
    for b in wrong:  # auto-onlined (or onlined by someone else) in the other zone
        err = _offline_one(host, b.id)
        if err is not None:
            stuck.append(f"memory{b.id} ({b.zone}: {err})")
            continue
        err = online_one(host, b.id, zone)
        if err is not None:  # put it back where it was rather than leave it offline
            online_one(host, b.id, "movable" if b.zone == "Movable" else "normal")
            stuck.append(f"memory{b.id} ({err})")
        else:
            moved += 1
    if moved:
        log(f"{name}: moved {moved} block(s) to ZONE_{want.upper()}")
    if stuck:
        raise DaxError(
            f"{name}: {len(stuck)} block(s) are online but not in ZONE_{want.upper()} and could not be moved: "
            + ", ".join(stuck)
            + "; the memory is usable, only its zone differs (nothing lost)",
            hint="another agent onlined them first (auto_online_blocks, a udev rule); they can be moved once the "
            "pages on them are freed",
        )
    return read_dax(host, name)


class Reconfigured(NamedTuple):
    name: str
    before: str
    mode: str
    zone: Optional[str]
    changed: bool
    state: DaxDevice
    actions: Tuple[str, ...]


def check_reconfigure(host: Host, name: str, mode: str, zone: str, force: bool) -> DaxDevice:
    """The device's state, or the refusal to reconfigure it (exit 2): an unknown mode or zone,
    or memory online as System RAM that devdax would take away without ``force``.  Checked
    before the lock is taken, and again under it."""
    if mode not in DRIVER_OF:
        raise CxlctlError(f"unknown mode {mode!r}", code=EXIT_USAGE, hint="use system-ram or devdax")
    if zone not in ONLINE_STATE:
        raise CxlctlError(f"unknown zone {zone!r}", code=EXIT_USAGE, hint="use movable or normal")
    st = read_dax(host, name)
    if mode == "devdax" and st.driver == "kmem" and not force:
        online = online_blocks(host, name)
        if online:
            bs = block_size(host) or 0
            used = node_in_use(host, st.target_node)
            raise DaxError(
                f"{name} is online as System RAM on node {st.target_node} ({len(online)} block(s), "
                f"{format_size(len(online) * bs)}; {format_size(used) if used is not None else 'unknown'} in use "
                "on that node): switching it to devdax takes that memory away from the system; nothing was changed",
                code=EXIT_USAGE,
                hint="stop what uses that node, then rerun with --force (offlines the blocks first; "
                "nothing changes if one cannot be offlined)",
            )
    return st


def reconfigure(
    host: Host, name: str, mode: str, zone: str, force: bool, log: Log, progress: Optional[ProgressFn] = None
) -> Reconfigured:
    """``daxctl reconfigure-device`` for one device; see the module doc for the semantics.

    ``progress``: called per memory block onlined or offlined (:mod:`cxlctl.progress`).
    """
    st = check_reconfigure(host, name, mode, zone, force)
    actions: List[str] = []

    def note(msg: str) -> None:
        actions.append(msg)
        log(msg)

    before = st.mode or "unbound"
    if mode == "system-ram":
        if st.driver != "kmem":
            with hold_auto_online(host, needs_hold(host, mode, zone), note):
                if st.driver is not None:
                    unbind(host, name, note)
                bind(host, name, "kmem", note)
                # the kernel hot-plugs the memory during the bind; wait for its blocks
                _wait(lambda: _has_blocks(host, name), 10)
        st = online_in_zone(host, name, zone, note, progress)
        return Reconfigured(name, before, mode, zone, before != mode or bool(actions), st, tuple(actions))
    # devdax
    if st.driver == "device_dax":
        return Reconfigured(name, before, mode, None, False, st, ())
    if st.driver == "kmem":
        online = online_blocks(host, name)
        offline_blocks(host, list(online), note, name, progress)
        try:
            unbind(host, name, note)
        except DaxError:
            online_in_zone(host, name, "movable" if any(b.zone == "Movable" for b in online) else "normal", note)
            raise
    elif st.driver is not None:
        unbind(host, name, note)
    bind(host, name, "device_dax", note)
    return Reconfigured(name, before, mode, None, True, read_dax(host, name), tuple(actions))
