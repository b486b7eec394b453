"""Issue 19, the reads slice: one read API that tells "absent" from "cannot read", cgroup v1
hosts, and the cgroup of a process on a hybrid v1/v2 host.

The trees are copies of recorded fixtures with one file changed (a FIFO, a link leading
out of the root); the cgroup v1 and hybrid ``/proc/PID/cgroup`` files are tiny hand-made
trees for one parser edge case each (no v1 host is among the recorded kernels).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, cli, copy_fixture

SINGLE = os.path.join(FIXTURES, "linux-6.12", "single-region")
TELEMETRY = os.path.join(FIXTURES, "linux-6.12", "single-region-telemetry")
SWAPPINESS = "proc/sys/vm/swappiness"


@pytest.fixture
def tree(tmp_path: Any) -> str:
    return copy_fixture(SINGLE, str(tmp_path / "root"))


def _fifo(tree: str, rel: str) -> str:
    p = os.path.join(tree, rel)
    os.unlink(p)
    os.mkfifo(p)
    return p


def _link_out(tree: str, rel: str, outside: str) -> str:
    """Replace ``rel`` with a link to ``outside`` (a path outside the tree)."""
    p = os.path.join(tree, rel)
    if os.path.isdir(p) and not os.path.islink(p):
        import shutil

        shutil.rmtree(p)
    else:
        os.unlink(p)
    os.symlink(outside, p)
    return p


# -- the read API ---------------------------------------------------------------------------


def test_reader_read_tells_absent_from_unreadable(tree: str, tmp_path: Any) -> None:
    from cxlctl.hostio.reader import Reader, Unreadable

    r = Reader(tree)
    assert r.read("/proc/sys/vm/no-such-knob") is None
    _fifo(tree, SWAPPINESS)
    with pytest.raises(Unreadable) as e:
        r.read("/" + SWAPPINESS)
    assert e.value.where == os.path.join(tree, SWAPPINESS) and "not a regular file" in e.value.reason
    (tmp_path / "host-file").write_text("60\n")
    _link_out(tree, "proc/sys/vm/zone_reclaim_mode", str(tmp_path / "host-file"))
    with pytest.raises(Unreadable, match="leading out of the root"):
        r.read("/proc/sys/vm/zone_reclaim_mode")
    assert r.body("/proc/sys/vm/zone_reclaim_mode") is None and r.notes[-1][0] == "/proc/sys/vm/zone_reclaim_mode"


# -- defect 14: unreadable is not absent ------------------------------------------------------


def test_status_names_an_unreadable_knob_instead_of_unsupported(tree: str, tmp_path: Any) -> None:
    """A FIFO knob and a knob linked out of the root: "cannot read ROOT/...", not "unsupported"."""
    _fifo(tree, SWAPPINESS)
    (tmp_path / "host-file").write_text("0\n")
    _link_out(tree, "proc/sys/vm/zone_reclaim_mode", str(tmp_path / "host-file"))
    p = cli("--root", tree, "status", timeout=60)
    assert p.returncode == 0, p.stderr
    lines = {ln.split("=")[0].strip(): ln for ln in p.stdout.splitlines() if " = " in ln}
    for knob in ("vm.swappiness", "vm.zone_reclaim_mode"):
        assert "unsupported" not in lines[knob] and "cannot read" in lines[knob], lines[knob]
    flat = " ".join(p.stdout.split())
    assert f"cannot read {os.path.join(tree, SWAPPINESS)}" in flat
    doc = json.loads(cli("--root", tree, "status", "--json", check=True, timeout=60).stdout)
    msgs = {w["subject"]: w["message"] for w in doc["warnings"] if w["code"] == "unreadable"}
    assert msgs["/" + SWAPPINESS].startswith(f"cannot read {os.path.join(tree, SWAPPINESS)}: not a regular file")
    assert "leading out of the root" in msgs["/proc/sys/vm/zone_reclaim_mode"]


def test_tune_plan_says_cannot_read_not_absent(tree: str) -> None:
    _fifo(tree, SWAPPINESS)
    p = cli("--root", tree, "tune", "plan", "cxl-common", "--json", timeout=60)
    (swap,) = [s for s in json.loads(p.stdout)["plan"]["steps"] if s["knob"] == "vm.swappiness"]
    assert "absent" not in swap["note"] and f"cannot read {os.path.join(tree, SWAPPINESS)}" in swap["note"], swap


def test_status_with_the_cxl_bus_unreadable_is_not_no_devices(tree: str, tmp_path: Any) -> None:
    """The bus directory a link leading out of the root (as a tree that cannot be listed):
    the devices are unknown, not none -- "cannot read" naming it, exit 1, in both forms."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    _link_out(tree, "sys/bus/cxl/devices", str(outside))
    where = os.path.join(tree, "sys/bus/cxl/devices")
    p = cli("--root", tree, "status", timeout=60)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "No CXL devices" not in p.stdout and f"cannot read {where}" in " ".join(p.stdout.split())
    j = cli("--root", tree, "status", "--json", timeout=60)
    assert j.returncode == 1
    (w,) = [w for w in json.loads(j.stdout)["warnings"] if w["code"] == "unreadable"]
    assert w["severity"] == "error" and w["message"].startswith(f"cannot read {where}")


# -- defect 4: cgroup v1 ----------------------------------------------------------------------


def _cgroup_v1(tmp_path: Any) -> str:
    """The telemetry fixture as a cgroup v1 host: the memory controller's own hierarchy, whose
    memory.numa_stat has v1's layout (``anon=374 N0=...``, in pages)."""
    root = copy_fixture(TELEMETRY, str(tmp_path / "v1"))
    cg = os.path.join(root, "sys/fs/cgroup")
    import shutil

    shutil.rmtree(cg)
    os.makedirs(os.path.join(cg, "memory", "system.slice"))
    for d in ("memory", "memory/system.slice"):
        with open(os.path.join(cg, d, "memory.numa_stat"), "w") as f:
            f.write("total=1000 N0=626 N1=374\nfile=626 N0=626 N1=0\nanon=374 N0=0 N1=374\nunevictable=0 N0=0 N1=0\n")
    return root


def test_top_and_stat_on_cgroup_v1_say_so(tmp_path: Any) -> None:
    root = _cgroup_v1(tmp_path)
    p = cli("--root", root, "top", "--json", "--count", "2", "--interval", "0.2", check=True, timeout=60)
    reps = [json.loads(line) for line in p.stdout.splitlines()]
    assert len(reps) == 2
    for rep in reps:
        assert rep["cgroups"] == [] and rep["cgroups_unavailable"].startswith(
            "cgroup v1: per-cgroup figures unavailable"
        )
    assert "=" not in " ".join(k for rep in reps for c in rep["cgroups"] for k in c["numa_stat"])
    human = cli("--root", root, "top", "--count", "1", env={"COLUMNS": "80"}, check=True, timeout=60)
    assert "cgroup v1: per-cgroup figures unavailable" in human.stdout
    assert "/memory" not in human.stdout
    s = cli("--root", root, "stat", "--json", check=True, timeout=60)
    assert json.loads(s.stdout.splitlines()[0])["cgroups_unavailable"].startswith("cgroup v1:")
    bad = cli("--root", root, "stat", "--cgroup", "/system.slice", timeout=60)
    assert bad.returncode == 2 and "cgroup v1: per-cgroup figures unavailable" in bad.stderr and not bad.stdout


def test_numa_stat_in_v1_layout_gives_no_junk_keys() -> None:
    from cxlctl.telemetry.counters import parse_numa_stat

    assert parse_numa_stat("anon=374 N0=0 N1=374\nfile=626 N0=626 N1=0\n") == {}


# -- processes and their cgroup on a hybrid v1/v2 host ----------------------------------------


def test_health_takes_the_v2_cgroup_on_a_hybrid_host(tmp_path: Any) -> None:
    """/proc/PID/cgroup of a hybrid host lists the v1 hierarchies first; the v2 one is ``0::``."""
    from cxlctl.ras.health import cgroups_on, processes_on

    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "comm").write_text("vllm\n")
    (proc / "cgroup").write_text(
        "12:memory:/user.slice\n11:cpuset:/\n1:name=systemd:/system.slice/vllm.service\n0::/system.slice/vllm.service\n"
    )
    (proc / "numa_maps").write_text("7f0000000000 default anon=10 dirty=10 N1=10 kernelpagesize_kB=4\n")
    procs, unreadable = processes_on(Host(str(tmp_path)), {1})
    assert unreadable == 0 and [p.cgroup for p in procs] == ["/system.slice/vllm.service"]
    assert [tuple(c) for c in cgroups_on(procs)] == [("/system.slice/vllm.service", 10 * 4096)]


# -- one place for sysfs integers, numa_maps, sizes and the page size -------------------------


def test_sysfs_int_is_ascii_only_and_bounded() -> None:
    from cxlctl.parse import sysfs_int

    assert [sysfs_int(t) for t in ("42\n", " 7 ", "", None, "١٢", "²", "-1", "0x10", "9" * 21)] == [
        42,
        7,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ]
    assert sysfs_int("0x10", base=0) == 16 and sysfs_int("10", base=0) == 10 and sysfs_int("ff", base=16) == 255
    assert sysfs_int("0x" + "f" * 17, base=0) is None  # beyond 64 bits
    assert sysfs_int("0x١", base=0) is None


def test_numa_maps_parsers_agree_and_take_ascii_digits_only() -> None:
    from cxlctl.numa_maps import parse_mappings, parse_numa_maps

    text = (
        "7f00 default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4\n"
        "7f10 bind:1 file=/dev/shm/kv mapped=5 N1=5 kernelpagesize_kB=4\n"
        "7f20 default anon=9 N\u0661=9 kernelpagesize_kB=4\n"
    )
    maps = parse_mappings(text)
    assert [m.pages for m in maps] == [{0: 2, 1: 1}, {1: 5}, {}]  # "N١=9" is no node
    summary = parse_numa_maps(text)
    assert summary.pages == {0: 2, 1: 6} and summary.shm == {"/dev/shm/kv": {1: 5}}


def test_page_size_is_the_hosts_and_sizes_format_in_one_place() -> None:
    from cxlctl.parse import PAGE_SIZE, format_size

    assert PAGE_SIZE == os.sysconf("SC_PAGE_SIZE")
    assert format_size(None) == "-" and format_size(None, unknown="size unknown") == "size unknown"
    assert format_size(3 << 30) == "3 GiB"
