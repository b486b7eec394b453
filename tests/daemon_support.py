"""Helpers for the daemon tests (tests/test_daemon_*.py).

* :class:`FakeMonitor` — a pipe-backed stand-in for ``pyudev.Monitor`` (the idea
  of pyudev's own ``tests/plugins/fake_monitor.py``): ``fileno()`` is a real fd
  the daemon's ``poll()`` waits on, ``trigger()`` queues an event and makes it
  readable, ``fail()`` queues an ``OSError`` (ENOBUFS) that ``poll()`` raises,
  ``hangup()`` closes the write end so the fd reports POLLHUP.
* Recorded trees: pairs of ``<topology>-noregion`` / ``<topology>-region``
  fixtures of one kernel; :func:`swap_in` copies the *device* part of a
  recorded state into a working tree (sysfs devices and buses), keeping the
  knob files and cxlctl's own state, which is what a region appearing looks
  like to the daemon.
* :func:`make_daemon` — a :class:`Daemon` on a tree, with a fake monitor and
  signals off, and :func:`step_until` to drive its loop from the test.
"""

from __future__ import annotations

import collections
import errno
import glob
import io
import logging
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union

from cxlctl.config import Config, validate
from cxlctl.daemon.loop import Daemon, make_logger
from cxlctl.daemon.notify import Notifier
from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, REPO, copy_fixture
from tests.prom import Exposition as Exposition  # re-exported for the tests
from tests.prom import parse_exposition as parse_exposition

#: where recorded trees live; CXLCTL_TEST_FIXTURES points elsewhere (e.g. a fresh recording)
FIXTURE_DIR = os.environ.get("CXLCTL_TEST_FIXTURES", FIXTURES)


def unit_seconds(key: str) -> int:
    """A time setting of the shipped unit (systemd/cxlctl.service), in seconds: ``WatchdogSec``,
    ``TimeoutStartSec``.

    What the daemon promises systemd is a keep-alive within every watchdog period and READY=1
    within the start timeout, so guest tests assert against these values, never a wall-clock
    figure of their own: under TCG on a slow machine a 5 s keep-alive interval was measured at
    10.47 s between two pings (issue 44).
    """
    text = Path(REPO, "systemd", "cxlctl.service").read_text()
    m = re.search(rf"^{key}=(\d+)s?$", text, re.M)
    assert m, f"systemd/cxlctl.service has no {key}= in seconds"
    return int(m.group(1))


def unit_watchdog_seconds() -> int:
    """The shipped unit's ``WatchdogSec=`` (:func:`unit_seconds`)."""
    return unit_seconds("WatchdogSec")


RATIO_PROFILE = """
summary = "daemon test: tiering plus DRAM:CXL weights 3:2"
include = "inference-capacity"
[knobs.weighted_interleave]
weights = "3:2"
nodes = ["dram", "cxl"]
reason = "explicit ratio (QEMU gives no HMAT bandwidth for DRAM)"
"""

ONLINE_PROFILE = (
    RATIO_PROFILE
    + """
[knobs.auto_online_blocks]
value = "online_movable"
reason = "CXL memory movable, so it can be offlined again"
"""
)


class FakeDevice:
    def __init__(self, action: str, subsystem: str, sys_name: str) -> None:
        self.action = action
        self.subsystem = subsystem
        self.sys_name = sys_name


class FakeMonitor:
    def __init__(self) -> None:
        self.r, self.w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.queue: Deque[Union[FakeDevice, OSError]] = collections.deque()
        self.closed = False
        self.polled = 0

    def fileno(self) -> int:
        return self.r

    def trigger(self, action: str = "add", subsystem: str = "memory", sys_name: str = "memory40") -> None:
        self.queue.append(FakeDevice(action, subsystem, sys_name))
        os.write(self.w, b"e")

    def fail(self, code: int = errno.ENOBUFS) -> None:
        self.queue.append(OSError(code, os.strerror(code)))
        os.write(self.w, b"e")

    def hangup(self) -> None:
        os.close(self.w)
        self.w = -1

    def poll(self, timeout: Optional[float] = None) -> Any:
        self.polled += 1
        try:
            if not os.read(self.r, 1):
                return None
        except BlockingIOError:
            return None
        item = self.queue.popleft()
        if isinstance(item, OSError):
            raise item
        return item

    def close(self) -> None:
        self.closed = True
        for fd in (self.r, self.w):
            if fd >= 0:
                os.close(fd)


class MonitorFactory:
    """Records every monitor it builds; ``broken`` makes the next builds raise."""

    def __init__(self) -> None:
        self.built: List[FakeMonitor] = []
        self.broken = 0

    def __call__(self) -> FakeMonitor:
        if self.broken:
            self.broken -= 1
            raise OSError(errno.EPROTONOSUPPORT, "netlink unavailable (test)")
        m = FakeMonitor()
        self.built.append(m)
        return m

    @property
    def current(self) -> FakeMonitor:
        return self.built[-1]


# ------------------------------------------------------------------------ trees


def pairs() -> List[Tuple[str, str]]:
    """(noregion, region) recorded roots of the same kernel and topology."""
    out = []
    for nor in sorted(glob.glob(os.path.join(FIXTURE_DIR, "linux-*", "*-noregion"))):
        reg = nor[: -len("-noregion")] + "-region"
        if os.path.isdir(reg) and os.path.exists(os.path.join(nor, "cxlctl-record.json")):
            out.append((nor, reg))
    return out


def pair_id(p: Tuple[str, str]) -> str:
    return os.path.relpath(p[1], FIXTURE_DIR)


#: device state (replaced by swap_in); everything else — knobs under /proc/sys and
#: /sys/kernel/mm, auto_online_blocks, /run, /etc, /var — stays as the daemon left it
DEVICE_PARTS = ("sys/bus", "sys/devices")
KEEP = ("sys/devices/system/memory/auto_online_blocks",)


def swap_in(work: str, src: str) -> None:
    """Make ``work`` show the devices of recorded tree ``src`` (a region appearing or going)."""
    kept: Dict[str, bytes] = {}
    for k in KEEP:
        p = os.path.join(work, k)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                kept[k] = f.read()
    for part in DEVICE_PARTS:
        dst = os.path.join(work, part)
        if os.path.lexists(dst):
            shutil.rmtree(dst)
        s = os.path.join(src, part)
        if os.path.isdir(s):
            copy_fixture(s, dst)
    for k, data in kept.items():
        with open(os.path.join(work, k), "wb") as f:
            f.write(data)
    _hotplug_weight_files(work, src)


def _hotplug_weight_files(work: str, src: str) -> None:
    """Linux 6.16+ (the 7.x trees) keeps a ``weighted_interleave/nodeN`` file only for nodes with
    memory, created and removed with the node: a node that appears in ``src`` gets a file (weight 1
    under manual weights, else the auto weight the recording shows), one that is gone loses it.  The weights of the nodes both trees
    have stay as ``work`` has them (what the daemon wrote).  On 6.12 every possible node has a
    file in both trees, so nothing changes."""
    wi = "sys/kernel/mm/mempolicy/weighted_interleave"
    have_dir, want_dir = os.path.join(work, wi), os.path.join(src, wi)
    if not (os.path.isdir(have_dir) and os.path.isdir(want_dir)):
        return
    have = {n for n in os.listdir(have_dir) if n.startswith("node")}
    want = {n for n in os.listdir(want_dir) if n.startswith("node")}
    auto = os.path.join(have_dir, "auto")
    manual = os.path.isfile(auto) and open(auto).read().strip().lower() in ("false", "0", "n")
    for n in sorted(want - have):
        if manual:  # manual weights: a node the table has no weight for reads the default, 1
            with open(os.path.join(have_dir, n), "w") as f:
                f.write("1\n")
        else:  # auto mode: the kernel's own weight, as the recording shows it
            shutil.copyfile(os.path.join(want_dir, n), os.path.join(have_dir, n))
    for n in sorted(have - want):
        os.unlink(os.path.join(have_dir, n))


def work_tree(src: str, dest: str, profiles: Optional[Dict[str, str]] = None) -> str:
    copy_fixture(src, dest)
    pdir = os.path.join(dest, "etc/cxlctl/profiles")
    os.makedirs(pdir, exist_ok=True)
    for name, text in (profiles or {"d-ratio": RATIO_PROFILE, "d-online": ONLINE_PROFILE}).items():
        with open(os.path.join(pdir, name + ".toml"), "w") as f:
            f.write(text)
    return dest


def read(root: str, path: str) -> str:
    with open(root + path) as f:
        return f.read().strip()


def write(root: str, path: str, text: str) -> None:
    with open(root + path, "w") as f:
        f.write(text + "\n")


def cxl_nodes(root: str) -> List[int]:
    from cxlctl.inventory import scan

    return sorted(n.id for n in scan(Host(root)).nodes if n.kind == "cxl" and n.has_memory)


#: the 6.12 kernel's ``events/cxl/*/format`` files and the event streams it wrote (RAS VM proof)
RAS_EVENTS = os.path.join(FIXTURE_DIR, "linux-6.12", "events")


def trace_pipe(root: str, instance: str) -> str:
    """A tracefs in work tree ``root`` for the daemon's RAS watcher; returns its ``trace_pipe``.

    The cxl events are the ones the 6.12 kernel has (``events/cxl/<name>/format``, copied from
    the recording).  ``instance`` is made as the kernel makes an instance on ``mkdir``: its own
    ``events/cxl/<name>/enable`` switches, and a ``trace_pipe`` that is a FIFO (consumed by one
    reader, which blocks or returns EAGAIN when empty), written by the test."""
    from cxlctl.hostio import paths

    tf = os.path.join(root, paths.TRACEFS.lstrip("/"))
    inst = os.path.join(tf, "instances", instance)
    formats = os.path.join(RAS_EVENTS, "formats")
    for f in sorted(os.listdir(formats)):
        name = f[: -len(".format")]
        os.makedirs(os.path.join(tf, "events", "cxl", name), exist_ok=True)
        shutil.copyfile(os.path.join(formats, f), os.path.join(tf, "events", "cxl", name, "format"))
        os.makedirs(os.path.join(inst, "events", "cxl", name), exist_ok=True)
        with open(os.path.join(inst, "events", "cxl", name, "enable"), "w") as fh:
            fh.write("0\n")
    pipe = os.path.join(inst, "trace_pipe")
    os.mkfifo(pipe)
    return pipe


def ras_streams() -> Dict[str, bytes]:
    """The recorded event streams that hold events (step name → the kernel's text)."""
    out: Dict[str, bytes] = {}
    for f in sorted(glob.glob(os.path.join(RAS_EVENTS, "*.txt"))):
        if os.path.basename(f) == "facts.txt":  # the guest's sysfs facts, not a stream
            continue
        with open(f, "rb") as fh:
            data = fh.read()
        if data.strip():
            out[os.path.basename(f)[: -len(".txt")]] = data if data.endswith(b"\n") else data + b"\n"
    return out


# ------------------------------------------------------------------------ daemons


def config(**sections: Dict[str, Any]) -> Config:
    """A validated config: fast timers, no HTTP, no health, unless overridden."""
    data: Dict[str, Any] = {
        "reconcile": {"debounce_ms": 50, "max_delay_ms": 400, "rescan_interval": 0, "lock_wait": 0.2},
        "drift": {"interval": 0},
        "metrics": {"listen": ""},
        "health": {"enabled": False},
    }
    for k, v in sections.items():
        if isinstance(v, dict):
            data.setdefault(k, {}).update(v)
        else:
            data[k] = v
    return validate("<test>", data)


class LogCapture:
    def __init__(self) -> None:
        self.stream = io.StringIO()

    @property
    def lines(self) -> List[str]:
        return self.stream.getvalue().splitlines()

    def grep(self, text: str) -> List[str]:
        return [ln for ln in self.lines if text in ln]


def make_daemon(
    root: str,
    cfg: Optional[Config] = None,
    *,
    factory: Optional[MonitorFactory] = None,
    env: Optional[Dict[str, str]] = None,
    config_path: Optional[str] = None,
    install_signals: bool = False,
) -> Tuple[Daemon, MonitorFactory, LogCapture]:
    fac = factory or MonitorFactory()
    cap = LogCapture()
    c = cfg or config()
    log = make_logger("debug", cap.stream)
    log.setLevel(logging.DEBUG)
    d = Daemon(
        Host(root),
        c,
        config_path=config_path,
        monitor_factory=fac,
        notifier=Notifier(dict(env or {})),
        log=log,
        install_signals=install_signals,
    )
    d.retry_after = 0.2
    d.rebuild_retry = 0.1
    return d, fac, cap


def reboot_and_start(root: str, knob: str, value: str) -> LogCapture:
    """A reboot of ``root`` (``/run`` empty again, ``knob`` back at the kernel's ``value``), then one
    daemon start-up; returns its log (what a persisted profile's tests check)."""
    shutil.rmtree(root + "/run/cxlctl")
    write(root, knob, value)
    d, _, cap = make_daemon(root)
    try:
        d.startup()
    finally:
        d.close()
    return cap


def step_until(d: Daemon, cond: Callable[[], bool], timeout: float = 5.0) -> float:
    """Run the loop one poll at a time until ``cond()``; returns the seconds it took."""
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"condition not reached in {timeout} s")
        d.deadlines["test-tick"] = time.monotonic() + 0.05  # never block the test forever
        d.step()
        d.deadlines.pop("test-tick", None)
    return time.monotonic() - t0


def step_for(d: Daemon, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        d.deadlines.setdefault("test-tick", end)
        d.step()
        d.deadlines.pop("test-tick", None)
