"""Program a region plan through sysfs, with full undo; tear regions down.

The sequence is the one ``cxl create-region`` uses (ndctl ``cxl/region.c``),
verified on Linux 6.12 in the VM tier (docs/testing.md):

1. read ``decoderX.Y/create_ram_region`` and write the name back (a cmpxchg:
   EBUSY when another creator won the name; re-read and retry);
2. region ``interleave_granularity``, ``interleave_ways``, then ``size``
   (allocates the address range in the window);
3. per position: the endpoint decoder's ``mode`` (``ram``, only if it differs),
   ``dpa_size`` (size / ways), then ``target<position>``;
4. ``commit`` 1; bind the region to the ``cxl_region`` driver.

Every step is recorded as it succeeds.  On any failure the recorded steps are
undone in reverse — decommit, targets cleared, ``dpa_size`` 0 (the kernel
frees DPA in decreasing decoder order), modes restored, region deleted through
the root decoder's ``delete_region`` — and then checked, so no half-built
region remains.  If an undo step itself fails the error names what is left and
the command that removes it.

Teardown of a whole region (``destroy``) is the same undo preceded by
offlining its memory (see :mod:`.dax`) and unbinding it.

All writes go through :func:`cxlctl.hostio.write.write_knob`.  Test hooks
(environment, for the test suite only):

``CXLCTL_TEST_FAULT=K:ERRNO``
    the K-th programming write fails with that errno instead of being written
    (write_knob's hook; undo writes are not counted).
``CXLCTL_TEST_REGION_TAMPER=swap-last|oversize``
    program a deliberately wrong plan so the *kernel* rejects it half-way:
    ``swap-last`` exchanges the last two positions' memdevs, ``oversize``
    asks for more address space than the window has.
"""

from __future__ import annotations

import errno as E
import os
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from cxlctl.errors import EXIT_USAGE, CxlctlError
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.write import KnobBusy, KnobError, write_knob
from cxlctl.parse import format_size, sysfs_int
from cxlctl.progress import ProgressFn

from . import dax as daxmod
from .planner import Plan, Target

CXL = paths.CXL_DEVICES
REGION_DRIVER = paths.CXL_REGION_DRIVER

Log = Callable[[str], None]


class ProgramError(CxlctlError):
    """Programming failed; ``undone`` says whether everything was rolled back."""

    def __init__(self, message: str, *, undone: bool, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.undone = undone


class Created(NamedTuple):
    region: str
    root_decoder: str
    size: int
    ways: int
    granularity: int
    resource: Optional[int]
    mappings: Tuple[Tuple[int, str, str], ...]  # (position, memdev, decoder)
    dax_devices: Tuple[str, ...]
    steps: Tuple[str, ...]
    plan: Plan  # the plan as programmed


def _exists(host: Host, path: str) -> bool:
    return host.reader.exists(path)


def _wait(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while not pred():
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
    return True


def tamper(plan: Plan, root: str) -> Plan:
    """Test hook ``CXLCTL_TEST_REGION_TAMPER``: make the plan wrong in a way only the kernel catches
    (gated by :func:`cxlctl.hostio.testhooks.hook`: the VM tier's guests only)."""
    from cxlctl.hostio.testhooks import hook

    how = hook("CXLCTL_TEST_REGION_TAMPER", root) or ""
    if how == "swap-last" and len(plan.targets) >= 2:
        t = list(plan.targets)
        a, b = t[-2], t[-1]
        t[-2] = b._replace(position=a.position)
        t[-1] = a._replace(position=b.position)
        return plan._replace(targets=tuple(t))
    if how == "oversize":
        unit = (256 << 20) * plan.ways
        grown = ((plan.window_size or 0) // unit + 1) * unit
        return plan._replace(size=grown)
    return plan


class _Builder:
    """One region being built: the steps done so far, so they can be undone."""

    def __init__(self, host: Host, plan: Plan, log: Log, hold: bool = False) -> None:
        self.host = host
        #: the host's reader, its handles from before the build dropped (it reopens a directory
        #: replaced since: see Reader._at)
        self.reader = host.reread()
        self.plan = plan
        self.log = log
        self.hold = hold
        self.region: Optional[str] = None
        self.steps: List[str] = []
        self.writes = 0
        self.modes: Dict[str, str] = {}  # decoder -> mode before we changed it
        self.dpa: List[str] = []  # decoders whose DPA we allocated
        self.targets: List[int] = []  # positions we set
        self.committed = False
        self.bound = False

    def w(self, path: str, value: str, what: str) -> None:
        """A programming write (counted for the fault hook); raises KnobError."""
        self.writes += 1
        write_knob(self.host.root, path, value, index=self.writes)
        self.steps.append(f"{what}: {value.strip() or '(empty)'} > {path}")
        self.log(f"{what}: wrote {value.strip() or '(empty)'} to {path}")

    # -- the sequence -------------------------------------------------------------------
    def build(self) -> Created:
        p = self.plan
        rd = p.root_decoder
        crr = f"{CXL}/{rd}/create_ram_region"
        if not _exists(self.host, crr):
            raise CxlctlError(
                f"{crr} does not exist: this kernel cannot create RAM regions in {rd} (Linux 6.3+ and a "
                "RAM-capable window are needed); nothing was changed",
                code=EXIT_USAGE,
            )
        # 1. claim a region name (cmpxchg; retry when another creator won the race)
        for attempt in range(5):
            name = self.reader.text(crr)
            if not name:
                raise CxlctlError(f"{crr} gave no region name; nothing was changed")
            try:
                self.w(crr, name, "claim region name")
                self.region = name
                break
            except KnobBusy:
                if attempt == 4:
                    raise
                time.sleep(0.05)
        r = f"{CXL}/{self.region}"
        if not _wait(lambda: _exists(self.host, r), 5):
            raise KnobError(r, None, f"{r} did not appear after claiming {self.region}")
        # 2. geometry, then the address range
        self.w(f"{r}/interleave_granularity", str(p.granularity), "granularity")
        self.w(f"{r}/interleave_ways", str(p.ways), "ways")
        self.w(f"{r}/size", f"{p.size:#x}", "size")
        # 3. per position: DPA, then the target
        for t in p.targets:
            self._target(r, t)
        # 4. commit and bind; binding makes the kernel create the DAX device and
        #    (kmem) hot-plug its memory, so the auto-online policy is held here
        self.w(f"{r}/commit", "1", "commit")
        self.committed = True
        with daxmod.hold_auto_online(self.host, self.hold, self.log):
            try:
                self.w(f"{REGION_DRIVER}/bind", self.region or "", "bind to cxl_region")
            except KnobError:
                if not _exists(self.host, f"{r}/driver"):  # probed on its own already is fine
                    raise
            self.bound = True
            self._settle()
        return self.verify()

    def _settle(self) -> None:
        """Wait until the region's DAX devices exist and are bound (and kmem's blocks are added)."""
        assert self.region is not None

        def ready() -> bool:
            devs = self.dax_devices()
            if not devs:
                return False
            for d in devs:
                st, blocks = daxmod.read_dax_blocks(self.host, d)
                if st.driver is None or (st.driver == "kmem" and st.resource is not None and not blocks):
                    return False
            return True

        _wait(ready, 20)

    def _target(self, r: str, t: Target) -> None:
        d = f"{CXL}/{t.decoder}"
        cur_dpa = sysfs_int(self.reader.text(f"{d}/dpa_size"), base=0) or 0
        if cur_dpa:
            raise KnobError(
                f"{d}/dpa_size",
                None,
                f"{t.decoder} already has DPA allocated ({cur_dpa:#x}); state changed since the plan",
            )
        mode = self.reader.text(f"{d}/mode")
        if mode != "ram":
            self.w(f"{d}/mode", "ram", f"{t.decoder} mode")
            self.modes[t.decoder] = mode or ""
        self.w(f"{d}/dpa_size", f"{t.dpa_size:#x}", f"{t.decoder} DPA")
        self.dpa.append(t.decoder)
        self.w(f"{r}/target{t.position}", t.decoder, f"position {t.position} ({t.memdev})")
        self.targets.append(t.position)

    def verify(self) -> Created:
        """Read the region back: committed, with the planned geometry and targets."""
        assert self.region is not None
        r = f"{CXL}/{self.region}"
        p = self.plan
        got = {
            "commit": self.reader.text(f"{r}/commit"),
            "size": sysfs_int(self.reader.text(f"{r}/size"), base=0),
            "ways": sysfs_int(self.reader.text(f"{r}/interleave_ways"), base=0),
            "granularity": sysfs_int(self.reader.text(f"{r}/interleave_granularity"), base=0),
        }
        want = {"commit": "1", "size": p.size, "ways": p.ways, "granularity": p.granularity}
        bad = [f"{k} is {got[k]!r}, expected {want[k]!r}" for k in want if got[k] != want[k]]
        for t in p.targets:
            v = self.reader.text(f"{r}/target{t.position}")
            if v != t.decoder:
                bad.append(f"target{t.position} is {v!r}, expected {t.decoder}")
        if bad:
            raise KnobError(r, None, f"{self.region} read back wrong: " + "; ".join(bad))
        res = sysfs_int(self.reader.text(f"{r}/resource"), base=0)
        return Created(
            self.region,
            p.root_decoder,
            p.size,
            p.ways,
            p.granularity,
            None if res is None or res == (1 << 64) - 1 else res,
            tuple((t.position, t.memdev, t.decoder) for t in p.targets),
            tuple(self.dax_devices()),
            tuple(self.steps),
            p,
        )

    def dax_devices(self) -> List[str]:
        assert self.region is not None
        return region_dax_devices(self.host, self.region)

    # -- undo ---------------------------------------------------------------------------
    def undo(self) -> List[str]:
        """Reverse every recorded step; returns what could not be undone (empty = clean)."""
        left: List[str] = []
        if self.region is None:
            return left
        rd = self.plan.root_decoder
        r = f"{CXL}/{self.region}"

        def u(path: str, value: str, what: str) -> bool:
            try:
                write_knob(self.host.root, path, value)
                self.log(f"undo {what}: wrote {value.strip() or '(empty)'} to {path}")
                return True
            except KnobError as e:
                left.append(f"{what} ({e})")
                self.log(f"undo {what} failed: {e}")
                return False

        if self.bound and _exists(self.host, f"{r}/driver"):
            for dev in region_dax_devices(self.host, self.region):
                try:
                    daxmod.offline_blocks(self.host, daxmod.online_blocks(self.host, dev), self.log, dev)
                except CxlctlError as e:
                    left.append(str(e))
                    return left  # memory still online: leave the region whole rather than leak it
            u(f"{REGION_DRIVER}/unbind", self.region, "unbind")
        if self.committed or self.reader.text(f"{r}/commit") == "1":
            u(f"{r}/commit", "0", "decommit")
        for pos in reversed(self.targets):
            u(f"{r}/target{pos}", "\n", f"clear target{pos}")
        for d in reversed(self.dpa):
            u(f"{CXL}/{d}/dpa_size", "0", f"free {d} DPA")
        for d, mode in self.modes.items():
            if mode in ("ram", "pmem"):
                u(f"{CXL}/{d}/mode", mode, f"restore {d} mode")
        u(f"{CXL}/{rd}/delete_region", self.region, f"delete {self.region}")
        # check
        if _exists(self.host, r) and self.host.reader.isdir(r):
            left.append(f"{self.region} still exists")
        for d in self.dpa:
            v = sysfs_int(self.reader.text(f"{CXL}/{d}/dpa_size"), base=0)
            if v:
                left.append(f"{d} still has {v:#x} of DPA")
        return left


def region_dax_devices(host: Host, region: str) -> List[str]:
    base = f"{CXL}/{region}"
    out: List[str] = []
    r = host.reader
    for dr in r.listdir(base, lambda n: n.startswith("dax_region")):
        out.extend(
            r.listdir(f"{base}/{dr}", lambda n: n.startswith("dax") and "." in n and not n.startswith("dax_region"))
        )
    return out


def create(
    host: Host, plan: Plan, log: Log, on_bound: Optional[Callable[[Created], None]] = None, hold: bool = False
) -> Created:
    """Build ``plan``; on failure undo everything and raise :class:`ProgramError`.

    ``hold`` keeps ``auto_online_blocks`` at ``offline`` while the region is
    bound (its memory is then onlined by ``on_bound`` in the zone asked for).
    ``on_bound`` runs after the region is committed and bound (the DAX step);
    if it raises, the region is torn down too.
    """
    b = _Builder(host, tamper(plan, host.root), log, hold)
    try:
        made = b.build()
        if on_bound is not None:
            on_bound(made)
        return made
    except (KnobError, CxlctlError) as e:
        where = b.steps[-1] if b.steps else "before the first write"
        left = b.undo()
        if isinstance(e, KnobError):
            cause = f"writing {e.path} failed ({e.errno_name or 'error'}: {os.strerror(e.errno) if e.errno else e})"
        else:
            cause = str(e)
        if left:
            raise ProgramError(
                f"region create failed: {cause}; undo was incomplete: " + "; ".join(left),
                undone=False,
                hint=f"finish by hand with `cxlctl region destroy {b.region} --force`" if b.region else "",
            ) from None
        raise ProgramError(
            f"region create failed: {cause} (last step done: {where}); every step was undone"
            + (f" ({b.region} deleted)" if b.region else "")
            + ", nothing remains",
            undone=True,
            hint=_hint_for(e),
        ) from None


def _hint_for(e: Exception) -> str:
    if isinstance(e, KnobError) and e.errno is not None:
        if e.errno in (E.ENXIO, E.EINVAL) and "/target" in e.path:
            return "the kernel rejected a target's position; `cxlctl region plan` shows the order it expects (dmesg has the kernel's reason with dynamic debug)"
        if e.errno == E.ENOSPC or e.path.endswith("/size"):
            return "the window has no room for that size; check `cxlctl region plan` and existing regions"
        if e.path.endswith("/commit"):
            return "commit failed: dmesg says why (under QEMU, -cpu max,hypervisor=off is needed)"
    return "see dmesg for the kernel's reason"


# --------------------------------------------------------------------------- teardown


class RegionState(NamedTuple):
    name: str
    root_decoder: Optional[str]
    committed: bool
    bound: bool
    ways: int
    targets: Tuple[Tuple[int, str], ...]
    dax_devices: Tuple[str, ...]


def read_region(host: Host, name: str) -> RegionState:
    r = f"{CXL}/{name}"
    reader = host.reader
    if not reader.isdir(r):
        raise CxlctlError(f"no region {name}", code=EXIT_USAGE, hint="`cxlctl status` lists the regions")
    real = os.path.realpath(host.path(r))
    rd = os.path.basename(os.path.dirname(real))
    ways = sysfs_int(reader.text(f"{r}/interleave_ways"), base=0) or 0
    targets = []
    for i in range(min(ways, 16)):
        v = reader.text(f"{r}/target{i}")
        if v:
            targets.append((i, v))
    return RegionState(
        name,
        rd if rd.startswith("decoder") else None,
        reader.text(f"{r}/commit") == "1",
        _exists(host, f"{r}/driver"),
        ways,
        tuple(targets),
        tuple(region_dax_devices(host, name)),
    )


class Destroyed(NamedTuple):
    region: str
    offlined: Tuple[Tuple[str, Tuple[int, ...]], ...]
    freed_decoders: Tuple[str, ...]
    steps: Tuple[str, ...]


def check_destroy(host: Host, name: str, force: bool) -> RegionState:
    """The region's state, or the refusal to destroy it (exit 2): unknown root decoder, or
    memory online without ``force``.  Checked before the lock is taken, and again under it."""
    st = read_region(host, name)
    if st.root_decoder is None:
        raise CxlctlError(f"cannot tell the root decoder of {name}")
    for dev in st.dax_devices if not force else ():
        online = daxmod.online_blocks(host, dev)
        if online:
            ds = daxmod.read_dax(host, dev)
            bs = daxmod.block_size(host) or 0
            used = daxmod.node_in_use(host, ds.target_node)
            raise CxlctlError(
                f"{name}'s memory is online: {dev} has {len(online)} block(s) ({format_size(len(online) * bs)}) "
                f"online as System RAM on node {ds.target_node}"
                + (f", {format_size(used)} in use on that node" if used is not None else "")
                + "; destroying the region would take that memory away; nothing was changed",
                code=EXIT_USAGE,
                hint=f"stop what uses node {ds.target_node}, then `cxlctl region destroy {name} --force` "
                "(offlines the blocks first; stops without changing anything if one cannot be offlined)",
            )
    return st


def destroy(host: Host, name: str, force: bool, log: Log, progress: Optional[ProgressFn] = None) -> Destroyed:
    """Offline (with ``force``), unbind, decommit, clear targets, free DPA, delete.

    ``progress``: called per memory block offlined (:mod:`cxlctl.progress`).
    """
    st = check_destroy(host, name, force)
    offlined: List[Tuple[str, Tuple[int, ...]]] = []
    for dev in st.dax_devices:
        online = daxmod.online_blocks(host, dev)
        ids = daxmod.offline_blocks(host, list(online), log, f"{name}/{dev}", progress)
        offlined.append((dev, tuple(ids)))
    steps: List[str] = []

    def w(path: str, value: str, what: str) -> None:
        try:
            write_knob(host.root, path, value)
        except KnobError as e:
            raise CxlctlError(
                f"region destroy {name}: {what} failed: {e}; done before it: {', '.join(steps) or 'nothing'}"
                + (" (its memory was offlined first)" if any(ids for _, ids in offlined) else ""),
                hint=f"dmesg says why; `cxlctl region destroy {name}` continues from where it stopped",
            ) from None
        steps.append(what)
        log(f"{what}: wrote {value.strip() or '(empty)'} to {path}")

    r = f"{CXL}/{name}"
    reader = host.reread()  # after the blocks were offlined
    if st.bound:
        w(f"{REGION_DRIVER}/unbind", name, "unbind")
        _wait(lambda: not _exists(host, f"{r}/driver"), 10)
    if reader.text(f"{r}/commit") == "1":
        w(f"{r}/commit", "0", "decommit")
    freed = []
    for pos, dec in reversed(st.targets):
        w(f"{r}/target{pos}", "\n", f"clear target{pos}")
        freed.append(dec)
    for dec in sorted(freed, key=lambda d: -int(d.rsplit(".", 1)[1]) if "." in d else 0):
        if sysfs_int(reader.text(f"{CXL}/{dec}/dpa_size"), base=0):
            w(f"{CXL}/{dec}/dpa_size", "0", f"free {dec} DPA")
    w(f"{CXL}/{st.root_decoder}/delete_region", name, f"delete {name}")
    _wait(lambda: not reader.isdir(r), 5)
    if reader.isdir(r):
        raise CxlctlError(f"{name} still exists after delete_region")
    return Destroyed(name, tuple(offlined), tuple(freed), tuple(steps))


def destroy_plan(host: Host, name: str, force: bool) -> Dict[str, Any]:
    """``region destroy --dry-run``: the same refusals as the destroy (online memory without
    ``force``), then what it would do, in its order; nothing is written."""
    st = check_destroy(host, name, force)
    steps: List[str] = []
    for dev in st.dax_devices:
        online = daxmod.online_blocks(host, dev)
        if online:
            steps.append(f"offline {len(online)} memory block(s) of {dev}")
    if st.bound:
        steps.append(f"unbind {name} from cxl_region")
    if st.committed:
        steps.append(f"decommit {name}")
    if st.targets:
        steps.append("clear its targets and free their DPA: " + ", ".join(d for _, d in st.targets))
    steps.append(f"delete {name} ({st.root_decoder}/delete_region)")
    return {"region": name, "dry_run": True, "steps": steps}
