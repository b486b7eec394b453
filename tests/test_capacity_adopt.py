"""Capacity that arrives and leaves: ``cxlctl capacity adopt`` and the daemon's ``[capacity]``, on recorded trees.

The trees are the pool guests' own (fixtures/linux-*/pool-hotadd: mem1 just bound, free,
with endpoint decoders and no region; pool-hotremoved: mem1 unbound).  The daemon sees
a memdev arrive as the recorded hot-add swapped over the recorded hot-remove
(tests/daemon_support.swap_in), and leave as the reverse.  Programming a region needs a
kernel (tests/vm/test_vm_capacity.py runs the whole cycle with the daemon); here the
building step is replaced where noted, to see what the daemon asked of it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cxlctl.errors import CxlctlError
from tests.daemon_support import config, make_daemon, swap_in, work_tree
from tests.kit import FIXTURES, cli, copy_fixture
from tests.test_region_cli import tree_digest

KERNELS = ["linux-6.12", "linux-7.x"]
MiB = 1 << 20


def _hotadd(kernel: str) -> str:
    return os.path.join(FIXTURES, kernel, "pool-hotadd")


def _hotremoved(kernel: str) -> str:
    return os.path.join(FIXTURES, kernel, "pool-hotremoved")


# ----------------------------------------------------------------------------- cxlctl capacity adopt


@pytest.mark.parametrize("kernel", KERNELS)
def test_adopt_dry_run_picks_a_window_of_its_own(kernel: str, tmp_path: Path) -> None:
    """mem1 goes on decoder0.1, the window without a region (so its memory is a node of its own,
    and a release takes the node away); nothing is written."""
    root = copy_fixture(_hotadd(kernel), tmp_path / "t")
    before = tree_digest(root)
    p = cli("--root", root, "capacity", "adopt", "mem1", "--dry-run", "--json", check=True, inprocess=True)
    doc = json.loads(p.stdout)
    assert (doc["dry_run"], doc["mode"], doc["zone"]) == (True, "system-ram", "movable")
    (m,) = doc["memdevs"]
    assert (m["memdev"], m["serial"], m["root_decoder"], m["size"], m["adopted"]) == (
        "mem1",
        0x5002,
        "decoder0.1",
        256 * MiB,
        False,
    )
    text = cli(
        "--root", root, "capacity", "adopt", "mem1", "--dry-run", "--zone", "normal", env={"COLUMNS": "80"}, check=True
    ).stdout
    assert "mem1 (serial 0x5002): would build a region of 256 MiB on decoder0.1, then system-ram in ZONE_NORMAL" in (
        " ".join(text.split())
    )
    assert all(len(ln) <= 80 for ln in text.splitlines())
    assert tree_digest(root) == before


REFUSALS = [
    (["mem0"], "cannot adopt mem0: mem0 already has a region (region0)"),
    (["mem7"], "cannot adopt mem7: no memdev mem7 (memdevs: mem0, mem1)"),
    (["dax0.0"], "'dax0.0' is not a memdev name"),
    (["mem1", "mem1"], "mem1 is named twice"),
    ([], "name the memdevs to adopt"),
    (["mem1", "--zone", "sideways"], "--zone 'sideways' is not one of movable, normal"),
    (["mem1", "--mode", "fsdax"], "--mode 'fsdax' is not one of system-ram, devdax"),
]


@pytest.mark.parametrize("args,needle", REFUSALS, ids=[" ".join(a) or "none" for a, _ in REFUSALS])
def test_adopt_refusals_exit_2_and_write_nothing(args: List[str], needle: str, tmp_path: Path) -> None:
    root = copy_fixture(_hotadd("linux-7.x"), tmp_path / "t")
    before = tree_digest(root)
    p = cli("--root", root, "capacity", "adopt", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert needle in p.stderr and "Traceback" not in p.stderr
    assert tree_digest(root) == before and not os.path.exists(os.path.join(root, "run/cxlctl/lock"))


# ----------------------------------------------------------------------------- the daemon


class _Build:
    """Stands in for regions.batch.create_regions (the kernel's part): records what it was asked."""

    def __init__(self) -> None:
        self.calls: List[Dict[str, Any]] = []

    def __call__(self, host: Any, plans: Any, req: Any, **kw: Any) -> Any:
        (p,) = plans
        self.calls.append({"decoder": p.root_decoder, "memdevs": [t.memdev for t in p.targets], **kw})
        raise CxlctlError("no kernel behind this tree")


def _daemon(tmp_path: Path, start: str, **capacity: Any) -> Any:
    """The daemon on a copy of ``start``, a pool member adopting any serial unless ``capacity`` says otherwise."""
    root = work_tree(start, str(tmp_path / "root"))
    d, _fac, cap = make_daemon(root, config(capacity={"pool_member": True, "adopt_serials": "any", **capacity}))
    d.startup()
    return root, d, cap


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_daemon_adopts_a_memdev_that_arrives(kernel: str, tmp_path: Path, monkeypatch: Any) -> None:
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root, d, cap = _daemon(tmp_path, _hotremoved(kernel))
    try:
        assert build.calls == []  # the first pass adopts nothing
        swap_in(root, _hotadd(kernel))
        d.rec.reconcile("event")
        (call,) = build.calls
        assert call["decoder"] == "decoder0.1" and call["memdevs"] == ["mem1"]
        assert (call["online"], call["zone"], call["use_all"]) == ("system-ram", "movable", False)
        assert cap.grep("memdev mem1 appeared (256 MiB)")
        (err,) = cap.grep("adopting mem1 failed: no kernel behind this tree")
        assert d.stats.adoptions == {"failed": 1}
        d.rec.reconcile("event")  # a failure is reported once, not retried on every pass
        assert len(build.calls) == 1
        text = d.metrics_text()
        assert 'cxlctl_capacity_adoptions_total{result="failed"} 1' in text
        assert 'cxlctl_capacity_bytes{memdev="mem1",serial="0x5002"} 268435456' in text
        assert 'cxlctl_capacity_state{memdev="mem1",serial="0x5002",state="free"} 1' in text
    finally:
        d.close()


def test_adopt_none_leaves_it_free(tmp_path: Path, monkeypatch: Any) -> None:
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root, d, cap = _daemon(tmp_path, _hotremoved("linux-7.x"), adopt="none")
    try:
        swap_in(root, _hotadd("linux-7.x"))
        d.rec.reconcile("event")
        assert build.calls == []
        assert cap.grep("memdev mem1 arrived (256 MiB); left free: [capacity] adopt = none")
    finally:
        d.close()


@pytest.mark.parametrize(
    "capacity, adopted, needle",
    [
        ({"pool_member": False}, False, "left free: this host is not configured as a pool member"),
        ({"adopt_serials": []}, False, "left free: serial 0x5002 is not in [capacity] adopt_serials"),
        ({"adopt_serials": ["0x5003", 7]}, False, "serial 0x5002 is not in [capacity] adopt_serials"),
        ({"adopt_serials": ["0x5002"]}, True, "memdev mem1 appeared"),
        ({"adopt_serials": [0x5002]}, True, "memdev mem1 appeared"),
    ],
    ids=["not-a-member", "no-serials", "other-serials", "listed-hex", "listed-int"],
)
def test_the_daemon_adopts_only_on_a_pool_member_from_the_allowlist(
    capacity: Dict[str, Any], adopted: bool, needle: str, tmp_path: Path, monkeypatch: Any
) -> None:
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root, d, cap = _daemon(tmp_path, _hotremoved("linux-7.x"), **capacity)
    try:
        swap_in(root, _hotadd("linux-7.x"))
        d.rec.reconcile("event")
        assert cap.grep(needle), cap.lines
        assert bool(build.calls) == adopted
        assert d.stats.adoptions == ({"failed": 1} if adopted else {"refused": 1})
    finally:
        d.close()


def test_the_default_configuration_adopts_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    """No [capacity] at all: adopt = system-ram, but not a pool member: a device that arrives is left free."""
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root = work_tree(_hotremoved("linux-7.x"), str(tmp_path / "root"))
    d, _fac, cap = make_daemon(root)
    d.startup()
    try:
        swap_in(root, _hotadd("linux-7.x"))
        d.rec.reconcile("event")
        assert build.calls == [] and cap.grep("not configured as a pool member")
    finally:
        d.close()


def _security(root: str, memdev: str, state: str) -> None:
    """The one edit: the memdev's security/state as security_state_show() reports a locked or frozen device."""
    with open(os.path.join(root, f"sys/bus/cxl/devices/{memdev}/security/state"), "w") as f:
        f.write(state + "\n")


@pytest.mark.parametrize("state", ["locked", "frozen"])
def test_a_locked_or_frozen_device_is_never_adopted(state: str, tmp_path: Path, monkeypatch: Any) -> None:
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    root, d, cap = _daemon(tmp_path, _hotremoved("linux-7.x"))
    try:
        swap_in(root, _hotadd("linux-7.x"))
        _security(root, "mem1", state)
        d.rec.reconcile("event")
        assert build.calls == []
        assert cap.grep(f"left free: mem1's security state is {state}")
        assert d.stats.adoptions == {"refused": 1}
    finally:
        d.close()
    # and by hand: refused before the root check and the lock, nothing written
    t = copy_fixture(_hotadd("linux-7.x"), tmp_path / "t")
    _security(t, "mem1", state)
    before = tree_digest(t)
    p = cli("--root", t, "capacity", "adopt", "mem1", "--dry-run", rc=2)
    assert f"cannot adopt mem1: mem1's security state is {state}" in p.stderr and "Traceback" not in p.stderr
    assert tree_digest(t) == before


def test_memdevs_present_at_start_are_not_adopted(tmp_path: Path, monkeypatch: Any) -> None:
    """A free memdev at the first pass may be one released and waiting for the FM's unbind: left alone."""
    build = _Build()
    monkeypatch.setattr("cxlctl.regions.batch.create_regions", build)
    _root, d, _cap = _daemon(tmp_path, _hotadd("linux-7.x"))
    try:
        d.rec.reconcile("event")
        assert build.calls == []
    finally:
        d.close()


def test_a_kernel_less_adoption_failure_leaves_the_daemon_running(tmp_path: Path) -> None:
    """No stand-in: the programmer writes the copied tree, the region never appears, the undo says what is
    left; the daemon logs it and goes on."""
    root, d, cap = _daemon(tmp_path, _hotremoved("linux-6.12"))
    try:
        swap_in(root, _hotadd("linux-6.12"))
        res = d.rec.reconcile("event")
        assert res.result in ("ok", "noop", "skipped")
        assert cap.grep("adopting mem1 failed: region create failed")
        assert d.stats.adoptions == {"failed": 1}
    finally:
        d.close()


def _nfd(root: str) -> Dict[str, str]:
    with open(os.path.join(root, "etc/kubernetes/node-feature-discovery/features.d/cxlctl")) as f:
        lines = [ln.split("=", 1) for ln in f.read().splitlines() if "=" in ln and not ln.startswith("#")]
    return {k.rsplit("/", 1)[-1]: v for k, v in lines}


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_free_memdev_leaving_is_clean(kernel: str, tmp_path: Path) -> None:
    """Also what the daemon publishes: the NFD labels' releasable capacity follows (mem1 free: 256 MiB,
    gone: 0; mem0 blocked in ZONE_NORMAL throughout)."""
    root = work_tree(_hotadd(kernel), str(tmp_path / "root"))
    os.makedirs(os.path.join(root, "etc/kubernetes/node-feature-discovery/features.d"))
    d, _fac, cap = make_daemon(root)
    d.startup()
    try:
        before = _nfd(root)
        assert (before["cxl.releasable-mib"], before["cxl.blocked-mib"]) == ("256", "256")
        swap_in(root, _hotremoved(kernel))
        d.rec.reconcile("event")
        assert cap.grep("memdev mem1 (serial 0x5002) left; it had no region: nothing was lost")
        assert not cap.grep("surprise removal")
        assert d.stats.removals == {"clean": 1}
        d.publish()
        after = _nfd(root)
        assert (after["cxl.releasable-mib"], after["cxl.blocked-mib"], after["cxl.capacity-mib"]) == ("0", "256", "256")
    finally:
        d.close()


def test_a_surprise_removal_names_what_was_lost(tmp_path: Path) -> None:
    """switch2-devdax (7.x guest): mem0's region0 devdax, mem1's region1 online as System RAM on node 2.
    The one edit: mem1's device entry removed, as the kernel shows a memdev unbound under its region."""
    src = os.path.join(FIXTURES, "linux-7.x", "switch2-devdax")
    root, d, cap = _daemon(tmp_path, src)
    os.makedirs(os.path.join(root, "etc/kubernetes/node-feature-discovery/features.d"), exist_ok=True)
    try:
        os.unlink(os.path.join(root, "sys/bus/cxl/devices/mem1"))
        d.rec.reconcile("event")
        (line,) = cap.grep("surprise removal")
        assert "memdev mem1 (serial 0x" in line and "without a `cxlctl capacity release`" in line
        assert "region1 held 256 MiB online as System RAM on node" in line
        assert "(0 B movable, 256 MiB normal)" in line
        assert d.stats.removals == {"surprise": 1}
        assert 'cxlctl_capacity_removals_total{kind="surprise"} 1' in d.metrics_text()
        d.rec.reconcile("rescan")  # still running, and the loss is logged once
        assert len(cap.grep("surprise removal")) == 1
        # System RAM left with its device: the host is to be drained and rebooted, and says so everywhere
        (drain,) = cap.grep("the host is to be drained and rebooted")
        assert "dev_dax_kmem_remove()" in drain and "mem1 left while online as System RAM" in drain
        assert "cxlctl_capacity_host_ready 0" in d.metrics_text()
        doc = json.loads(cli("--root", root, "capacity", "--json", check=True).stdout)
        assert doc["host_state"]["state"] == "drain-and-reboot" and "reboot" in doc["host_state"]["reason"]
        text = cli("--root", root, "capacity", env={"COLUMNS": "80"}, check=True).stdout
        assert "host: drain-and-reboot: mem1 left while online as System RAM" in text
        d.publish()
        assert _nfd(root)["cxl.capacity-ready"] == "false"
        why = d.rec._adopt_refusal("mem7", None)
        assert why is not None and why.startswith("the host is to be drained and rebooted")
        # another boot's record is over: that reboot took the memory out
        path = os.path.join(root, "run/cxlctl/surprise-removal.json")
        with open(path) as f:
            rec = json.load(f)
        rec["boot_id"] = "the-boot-before"
        with open(path, "w") as f:
            json.dump(rec, f)
        boot = os.path.join(root, "proc/sys/kernel/random/boot_id")
        os.makedirs(os.path.dirname(boot), exist_ok=True)
        with open(boot, "w") as f:
            f.write("the-boot-after\n")
        doc = json.loads(cli("--root", root, "capacity", "--json", check=True).stdout)
        assert doc["host_state"] == {"state": "ready", "reason": None}
    finally:
        d.close()


# ----------------------------------------------------------------------------- metrics and labels


@pytest.mark.parametrize("kernel", KERNELS)
def test_metrics_and_labels_show_capacity(kernel: str) -> None:
    root = _hotadd(kernel)
    doc = json.loads(cli("--root", root, "daemon", "metrics", "--json", check=True).stdout)
    got = {
        (s["name"], tuple(sorted(s["labels"].items()))): s["value"]
        for f in doc["metrics"]
        if f["name"].startswith("cxlctl_capacity")
        for s in f["samples"]
    }
    assert got[("cxlctl_capacity_bytes", (("memdev", "mem1"), ("serial", "0x5002")))] == 256 * MiB
    assert got[("cxlctl_capacity_state", (("memdev", "mem1"), ("serial", "0x5002"), ("state", "free")))] == 1
    assert got[("cxlctl_capacity_state", (("memdev", "mem0"), ("serial", "0x5001"), ("state", "blocked")))] == 1
    # every state has its series (0 or 1): a memdev changing state neither adds nor drops one (issue 44)
    assert got[("cxlctl_capacity_state", (("memdev", "mem0"), ("serial", "0x5001"), ("state", "free")))] == 0
    assert got[("cxlctl_capacity_releasable_bytes", (("memdev", "mem1"), ("serial", "0x5002")))] == 256 * MiB
    assert got[("cxlctl_capacity_releasable_bytes", (("memdev", "mem0"), ("serial", "0x5001")))] == 0
    code = (("code", "zone-normal"), ("memdev", "mem0"), ("serial", "0x5001"))
    assert got[("cxlctl_capacity_blockers", code)] == 1
    assert got[("cxlctl_capacity_node_online_bytes", (("node", "1"), ("zone", "normal")))] == 256 * MiB
    assert got[("cxlctl_capacity_node_releasable_bytes", (("node", "1"),))] == 0
    lbl = json.loads(cli("--root", root, "daemon", "labels", "--json", check=True).stdout)
    labels = lbl.get("labels", lbl)
    ns = "feature.node.kubernetes.io/"
    assert labels[ns + "cxl.releasable-mib"] == "256" and labels[ns + "cxl.blocked-mib"] == "256"
    assert labels[ns + "cxl.capacity-mib"] == "512"


# ----------------------------------------------------------------------------- doctor


def _doctor_checks(root: str) -> Dict[str, Dict[str, Any]]:
    doc = json.loads(cli("--root", root, "doctor", "--json").stdout)
    return {c["id"]: c for c in doc["checks"]}


@pytest.mark.parametrize("adopt,warns", [("system-ram", True), ("none", False), (None, False)])
def test_doctor_warns_of_zone_normal_on_a_lending_host(adopt: Any, warns: bool, tmp_path: Path) -> None:
    """pool-hotadd's boot region is online in ZONE_NORMAL (recorded so): a warning only where the daemon's
    configuration lends capacity ([capacity] adopt set, not none), naming the movable ways to online."""
    root = copy_fixture(_hotadd("linux-7.x"), tmp_path / "t")
    if adopt is not None:
        os.makedirs(os.path.join(root, "etc/cxlctl"))
        with open(os.path.join(root, "etc/cxlctl/cxlctl.toml"), "w") as f:
            f.write(f'[capacity]\nadopt = "{adopt}"\n')
    c = _doctor_checks(root).get("devices.dax.dax0.0.zone")
    if not warns:
        assert c is None
        return
    assert c is not None and c["result"] == "warn"
    assert "ZONE_NORMAL on a host that lends capacity" in c["message"] and "(zone-normal)" in c["message"]
    assert "auto_online_blocks=online puts new memory" in c["message"]
    for fix in ("--zone movable", "without --no-movable", "memory_hotplug.online_policy=auto-movable"):
        assert fix in c["fix"]


def test_doctor_does_not_advise_auto_movable_alone_for_a_cpu_less_node(tmp_path: Path) -> None:
    """auto_movable_zone_for_pfn() with auto_movable_numa_aware=Y (the default) asks the node itself, and a
    CPU-less CXL node has no boot-time kernel memory: ZONE_NORMAL.  The one edit: memory_hotplug's
    parameters as a kernel booted with online_policy=auto-movable shows them."""
    root = copy_fixture(_hotadd("linux-7.x"), tmp_path / "t")
    os.makedirs(os.path.join(root, "etc/cxlctl"))
    with open(os.path.join(root, "etc/cxlctl/cxlctl.toml"), "w") as f:
        f.write('[capacity]\nadopt = "system-ram"\n')
    params = os.path.join(root, "sys/module/memory_hotplug/parameters")
    os.makedirs(params)
    for name, v in (("online_policy", "auto-movable"), ("auto_movable_numa_aware", "Y"), ("auto_movable_ratio", "301")):
        with open(os.path.join(params, name), "w") as f:
            f.write(v + "\n")
    c = _doctor_checks(root)["devices.dax.dax0.0.zone"]
    assert "auto_movable_numa_aware=Y" in c["message"] and "auto_movable_can_online_movable()" in c["message"]
    assert "auto-movable only together with memory_hotplug.auto_movable_numa_aware=N" in c["fix"]
    assert "memhp_default_state=online_movable" in c["fix"] and "--try-normal" in c["fix"]
    assert "only after a reboot" not in c["fix"]


def test_capacity_adopt_refuses_on_a_host_to_be_rebooted(tmp_path: Path) -> None:
    """pool-hotadd (7.x): mem1 free; the one edit: the daemon's record of a surprise removal in this boot."""
    from cxlctl.capacity import surprise
    from cxlctl.hostio.host import Host

    root = copy_fixture(_hotadd("linux-7.x"), tmp_path / "t")
    cli("--root", root, "capacity", "adopt", "mem1", "--dry-run", check=True)
    surprise.record(Host(root), "mem2", 0x5003, "256 MiB online as System RAM on node 3")
    p = cli("--root", root, "capacity", "adopt", "mem1", "--dry-run", rc=2)
    assert "cannot adopt mem1: the host is to be drained and rebooted (mem2 left while online" in p.stderr
    doc = json.loads(cli("--root", root, "capacity", "--json", check=True).stdout)
    assert doc["host_state"]["state"] == "drain-and-reboot"
