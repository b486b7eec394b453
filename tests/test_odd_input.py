"""Odd sysfs content never produces a traceback: unknown values, notes and warnings instead.

Each case edits a writable copy of a real recorded tree the way a kernel, a race or
a non-root user would present it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, Iterator, List

import pytest

from cxlctl.hostio.host import Host
from cxlctl.hostio.paths import CXL_DEVICES
from cxlctl.hostio.reader import Reader
from cxlctl.inventory import scan
from tests.kit import cli, copy_fixture, fixture_roots, status_json

REGION_FIXTURES = [r for r in fixture_roots("linux-6.12/*") if r.endswith("-region")]


@pytest.fixture
def tree() -> Iterator[str]:
    """A world-readable writable copy of a 6.12 fixture with a region (nobody must traverse it)."""
    assert REGION_FIXTURES, "needs a recorded 6.12 fixture with a region"
    base = tempfile.mkdtemp(prefix="cxlctl-odd-", dir="/tmp")
    os.chmod(base, 0o755)
    root = copy_fixture(sorted(REGION_FIXTURES, key=len)[0], os.path.join(base, "t"))
    yield root
    shutil.rmtree(base)


def _attr(root: str, dev: str, attr: str) -> str:
    return os.path.realpath(os.path.join(root, CXL_DEVICES.lstrip("/"), dev)) + "/" + attr


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def _codes(st: Dict[str, Any]) -> set:  # type: ignore[type-arg]
    return {w["code"] for w in st["warnings"]}


def test_garbage_values(tree: str) -> None:
    st0 = status_json(tree)
    mem = st0["memdevs"][0]["memdev"]
    reg = st0["regions"][0]["region"]
    _write(_attr(tree, mem, "ram/size"), b"lots\n")
    _write(_attr(tree, mem, "serial"), b"0xZZZ\n")
    _write(_attr(tree, mem, "numa_node"), b"\n")
    _write(_attr(tree, mem, "firmware_version"), b"\xff\xfe\x00bin\n")
    _write(_attr(tree, reg, "interleave_ways"), b"two\n")
    _write(_attr(tree, "decoder0.0", "target_list"), b"12,x\n")
    p = cli("--root", tree, "status", "--json")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    st = json.loads(p.stdout)
    m = next(x for x in st["memdevs"] if x["memdev"] == mem)
    assert m["ram_size"] is None and m["serial"] is None and m["numa_node"] is None
    assert next(x for x in st["regions"] if x["region"] == reg)["interleave_ways"] is None
    bad = [w for w in st["warnings"] if w["code"] == "unparsable"]
    assert len(bad) >= 4 and any("ram/size" in w["message"] for w in bad)
    # the human view copes too
    h = cli("--root", tree, "status")
    assert h.returncode == 0 and "Traceback" not in h.stderr + h.stdout


def test_empty_and_truncated_files(tree: str) -> None:
    for dirpath, _dirs, files in os.walk(os.path.join(tree, "sys", "devices")):
        for f in files:
            if f in ("size", "meminfo", "distance", "cpulist", "nodelist", "interleave_granularity"):
                _write(os.path.join(dirpath, f), b"")
    p = cli("--root", tree, "status")
    assert p.returncode == 0 and "Traceback" not in p.stderr + p.stdout


def test_vanished_device_is_skipped(tree: str) -> None:
    """A memdev whose device directory is gone but whose bus link remains (dangling)."""
    st0 = status_json(tree)
    victim = st0["memdevs"][-1]["memdev"]
    shutil.rmtree(os.path.realpath(os.path.join(tree, CXL_DEVICES.lstrip("/"), victim)))
    st = status_json(tree)
    assert victim not in {m["memdev"] for m in st["memdevs"]}
    assert len(st["memdevs"]) == len(st0["memdevs"]) - 1
    assert "vanished" in _codes(st)


class _UnplugOnce(Reader):
    """Removes a device (its directory and its bus link) the first time one of its
    files is read, as a hot-unplug racing the scan would."""

    def __init__(self, root: str, victim: List[str], trigger: str) -> None:
        super().__init__(root)
        self.victim, self.trigger, self.fired = victim, trigger, False

    def raw(self, path: str) -> Any:
        if not self.fired and path.endswith(self.trigger):
            self.fired = True
            for p in self.victim:
                if os.path.islink(p):
                    os.unlink(p)
                else:
                    shutil.rmtree(p)
        return super().raw(path)


def test_unplug_during_scan_triggers_one_rescan(tree: str) -> None:
    st0 = status_json(tree)
    victim = st0["dax_devices"][0]["chardev"]
    link = os.path.join(tree, "sys/bus/dax/devices", victim)
    r = _UnplugOnce(tree, [os.path.realpath(link), link], f"{victim}/size")
    inv = scan(Host(tree), r)
    assert r.fired
    assert victim not in {d.name for d in inv.dax_devices}
    # the rescan saw a consistent tree: the device is simply gone, no warning needed
    assert "vanished" not in {w.code for w in inv.warnings}
    assert len(inv.memdevs) == len(st0["memdevs"])


def _unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    """Run cxlctl so that file permissions apply to it.

    As root, drop CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH from the bounding set
    (setpriv): the process stays uid 0 but mode-000 files become unreadable,
    which is what a root-only (0400) sysfs attribute is to a normal user.
    """
    pre = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []
    return cli(*args, wrap=pre)


def test_permission_denied_attributes(tree: str) -> None:
    """Root-only attributes (decoder start, dax resource) as an unprivileged reader meets them."""
    st0 = status_json(tree)
    dax = st0["dax_devices"][0]["chardev"]
    start = _attr(tree, "decoder0.0", "start")
    res = os.path.realpath(os.path.join(tree, "sys/bus/dax/devices", dax)) + "/resource"
    for attr in (start, res):
        os.chmod(attr, 0)
    p = _unprivileged("--root", tree, "status", "--json")
    assert p.returncode == 0, p.stderr
    st = json.loads(p.stdout)
    assert next(d for d in st["decoders"] if d["decoder"] == "decoder0.0")["resource"] is None
    assert next(d for d in st["dax_devices"] if d["chardev"] == dax)["resource"] is None
    assert {n["path"] for n in st["notes"]} >= {
        "/sys/bus/cxl/devices/decoder0.0/start",
        f"/sys/bus/dax/devices/{dax}/resource",
    }
    assert "not-root" in _codes(st)
    # the rest of the picture is intact
    assert [m["memdev"] for m in st["memdevs"]] == [m["memdev"] for m in st0["memdevs"]]
    h = _unprivileged("--root", tree, "status")
    assert h.returncode == 0 and "root-only attributes were unreadable" in " ".join(h.stdout.split())
    # a record made this way replays to the same picture (the unreadable files stay absent)
    rec = os.path.join(os.path.dirname(tree), "rec")
    p2 = _unprivileged("--root", tree, "record", rec)
    assert p2.returncode == 0, p2.stderr
    assert not os.path.exists(rec + "/sys/bus/cxl/devices/decoder0.0/start")
    replay = status_json(rec)
    assert [m["memdev"] for m in replay["memdevs"]] == [m["memdev"] for m in st0["memdevs"]]
    assert next(d for d in replay["decoders"] if d["decoder"] == "decoder0.0")["resource"] is None


def test_unreadable_root_tree_no_cxl(tmp_path: Any) -> None:
    """An empty root (no sys/, no proc/) is no host's tree: refused (issue 35). One with empty
    sys/ and proc/ is a host without anything: no crash, clear picture."""
    p = cli("--root", str(tmp_path), "status", rc=2)
    assert "holds neither sys/ nor proc/" in p.stderr and not p.stdout
    os.makedirs(tmp_path / "sys")
    os.makedirs(tmp_path / "proc")
    p = cli("--root", str(tmp_path), "status")
    assert p.returncode == 0 and "No CXL devices" in p.stdout
    st = status_json(str(tmp_path))
    assert st["nodes"] == [] and st["knobs"]["vm.swappiness"]["supported"] is False
