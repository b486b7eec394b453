"""Reconcile on writable copies of recorded real-kernel trees.

A region appearing is simulated the way the daemon sees it: the device part of
the ``*-region`` recording is copied over a working copy of the ``*-noregion``
one (knobs and cxlctl's state stay), then the fake monitor delivers an event.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

from cxlctl.hostio.host import Host
from cxlctl.hostio.lock import is_held
from cxlctl.tuning import journal as jn
from cxlctl.tuning.knobs import WI_DIR
from tests.daemon_support import (
    config,
    cxl_nodes,
    make_daemon,
    pair_id,
    pairs,
    parse_exposition,
    read,
    reboot_and_start,
    step_until,
    swap_in,
    work_tree,
    write,
)
from tests.kit import REPO, cli

PAIRS = pairs()
needs_pairs = pytest.mark.skipif(not PAIRS, reason="no recorded *-noregion/*-region fixture pairs")
SWAPPINESS = "/proc/sys/vm/swappiness"


def _weights(root: str) -> Dict[int, str]:
    d = root + WI_DIR
    return {int(n[4:]): read(root, f"{WI_DIR}/{n}") for n in os.listdir(d) if n.startswith("node")}


def _dram(root: str) -> List[int]:
    from cxlctl.inventory import scan

    return sorted(n.id for n in scan(Host(root)).nodes if n.kind == "dram" and n.has_memory)


def _cxl_cmd(root: str, *argv: str, env: Dict[str, str]) -> subprocess.Popen[str]:
    e = dict(os.environ)
    e.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "cxlctl", "--root", root, *argv],
        cwd=REPO,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@needs_pairs
@pytest.mark.parametrize("pair", PAIRS, ids=[pair_id(p) for p in PAIRS])
def test_new_cxl_node_gets_its_weight_and_a_removed_one_is_dropped(
    pair: Tuple[str, str], tmp_path: Any, capsys: Any
) -> None:
    nor, reg = pair
    root = work_tree(nor, str(tmp_path / "root"))
    cli("--root", root, "tune", "apply", "--persist", "d-ratio", check=True, inprocess=True)
    capsys.readouterr()
    assert cxl_nodes(root) == []
    d, fac, cap = make_daemon(root, config(metrics={"listen": "127.0.0.1:0"}))
    try:
        d.startup()
        assert d.rec.state == "applied" and d.stats.reconciles == {"noop": 1}
        swap_in(root, reg)  # the region is committed and onlined: a CXL node appears
        new = cxl_nodes(root)
        assert new, "the region recording has a CXL node"
        for sub, name in (("cxl", "region0"), ("dax", "dax0.0"), ("node", "node1"), ("memory", "memory146")):
            fac.current.trigger("add", sub, name)
        step_until(d, lambda: d.stats.rescans.get("event", 0) == 1)
        for n in new:
            assert cap.grep(f"CXL node {n} appeared")
        assert d.stats.changes.get("node-added") == len(new)
        if not os.path.isdir(root + WI_DIR):  # before Linux 6.9: no weights to give
            assert d.stats.knob_writes == 0 and d.stats.reconciles.get("noop") == 2
            return
        w = _weights(root)
        # the weight a node had before: 1 on 6.12; on 7.x (6.16+) with auto on, the kernel's own
        # (the HMAT guest's nodes come online with auto weights 20, 8, 3)
        for n in new:
            assert w[n] == "2", w
            assert [ln for ln in cap.grep(f"set weighted_interleave.node{n}: ") if "-> 2 (profile d-ratio)" in ln]
        for n in _dram(root):
            assert w[n] == "3", w
            assert [ln for ln in cap.grep(f"set weighted_interleave.node{n}: ") if "-> 3 (profile d-ratio)" in ln]
        assert d.stats.reconciles.get("ok") == 1 and d.stats.knob_writes >= 1
        # one log line per change, then one summary line
        assert len(cap.grep("reconciled (event)")) == 1
        # the journal now holds the new node's weight (verify and revert know it)
        j = jn.load(Host(root))
        assert j is not None and j.state == jn.APPLIED and j.pid == os.getpid()
        desired = {e.path: e.desired for e in j.entries}
        assert all(desired.get(f"{WI_DIR}/node{n}") == "2" for n in new)
        ex = parse_exposition(d.metrics_text())
        for n in new:
            assert ex.get("cxlctl_weighted_interleave_weight", node=str(n), kind="cxl") == 2
            assert (ex.get("cxlctl_node_memory_total_bytes", node=str(n), kind="cxl") or 0) > 0
        assert ex.get("cxlctl_cxl_online_bytes") == d.rec.inventory.totals.cxl_online > 0  # type: ignore[union-attr]

        # the region goes away again
        swap_in(root, nor)
        fac.current.trigger("remove", "cxl", "region0")
        step_until(d, lambda: d.stats.rescans.get("event", 0) == 2)
        for n in new:
            assert cap.grep(f"CXL node {n} removed")
        assert d.stats.changes.get("node-removed") == len(new)
        ex = parse_exposition(d.metrics_text())
        assert all(ex.get("cxlctl_node_memory_total_bytes", node=str(n), kind="cxl") is None for n in new)
        assert ex.get("cxlctl_cxl_online_bytes") == 0
    finally:
        d.close()


def _offline_cxl_memory(root: str) -> List[str]:
    """Make the tree look as if kmem hot-added the CXL memory while auto_online_blocks=offline."""
    from cxlctl.inventory import scan

    inv = scan(Host(root))
    states = []
    for n in inv.nodes:
        if n.kind != "cxl":
            continue
        for b in n.memory_blocks:
            p = f"/sys/devices/system/memory/memory{b.id}/state"
            write(root, p, "offline")
            states.append(p)
        mi = root + f"/sys/devices/system/node/node{n.id}/meminfo"
        with open(mi) as f:
            text = f.read()
        with open(mi, "w") as f:
            f.write(
                "\n".join(
                    ln if "MemTotal" not in ln and "MemFree" not in ln else ln.split(":")[0] + ":        0 kB"
                    for ln in text.splitlines()
                )
                + "\n"
            )
        hm = root + "/sys/devices/system/node/has_memory"
        keep = [str(x.id) for x in inv.nodes if x.kind != "cxl" and x.has_memory]
        with open(hm, "w") as f:
            f.write(",".join(keep) + "\n")
    write(root, "/sys/devices/system/memory/auto_online_blocks", "offline")
    return states


@needs_pairs
@pytest.mark.parametrize("pair", PAIRS[:1], ids=[pair_id(p) for p in PAIRS[:1]])
def test_offline_cxl_memory_is_onlined_by_the_profile_policy_once(
    pair: Tuple[str, str], tmp_path: Any, capsys: Any
) -> None:
    _, reg = pair
    root = work_tree(reg, str(tmp_path / "root"))
    states = _offline_cxl_memory(root)
    assert states
    cli("--root", root, "tune", "apply", "--persist", "d-online", check=True, inprocess=True)
    capsys.readouterr()
    assert read(root, "/sys/devices/system/memory/auto_online_blocks") == "online_movable"
    d, fac, cap = make_daemon(root)
    try:
        d.startup()
        assert [read(root, p) for p in states] == ["online_movable"] * len(states)
        assert d.stats.blocks_onlined == len(states)
        line = cap.grep("onlined ")
        assert len(line) == 1 and f"{len(states)} of {len(states)} offline memory block(s)" in line[0]
        assert "as online_movable: profile d-online sets auto_online_blocks" in line[0]
        # an administrator offlines a block later: the daemon leaves it alone
        write(root, states[0], "offline")
        fac.current.trigger("offline", "memory", os.path.basename(os.path.dirname(states[0])))
        step_until(d, lambda: d.stats.rescans.get("event", 0) == 1)
        assert read(root, states[0]) == "offline" and d.stats.blocks_onlined == len(states)
    finally:
        d.close()

    # with online_new_memory = false nothing is onlined
    root2 = work_tree(reg, str(tmp_path / "root2"))
    states2 = _offline_cxl_memory(root2)
    cli("--root", root2, "tune", "apply", "--persist", "d-online", check=True, inprocess=True)
    d2, _, _ = make_daemon(root2, config(reconcile={"online_new_memory": False}))
    try:
        d2.startup()
        assert [read(root2, p) for p in states2] == ["offline"] * len(states2)
    finally:
        d2.close()


def _region_root(tmp_path: Any, name: str = "root") -> str:
    if PAIRS:
        return work_tree(PAIRS[0][1], str(tmp_path / name))
    from tests.tune_support import LIVE, pristine

    return work_tree(pristine(LIVE), str(tmp_path / name))


@pytest.mark.parametrize("action", ["report", "reapply"])
def test_drift_is_reported_or_reapplied(action: str, tmp_path: Any, capsys: Any) -> None:
    root = _region_root(tmp_path)
    cli("--root", root, "tune", "apply", "inference-capacity", check=True, inprocess=True)
    capsys.readouterr()
    assert read(root, SWAPPINESS) == "10"
    d, fac, cap = make_daemon(root, config(drift={"interval": 60, "action": action}))
    try:
        d.startup()
        write(root, SWAPPINESS, "77")  # by hand, behind cxlctl's back
        d.deadlines["drift"] = time.monotonic()
        step_until(d, lambda: d.stats.drift_checks == 1)
        assert cap.grep(f"drift: vm.swappiness is 77, profile inference-capacity applied 10 (action: {action})")
        if action == "report":
            assert read(root, SWAPPINESS) == "77" and d.stats.drift_corrections == 0
            ex = parse_exposition(d.metrics_text())
            assert ex.get("cxlctl_knob_drift", setting="vm.swappiness") == 1
            assert ex.get("cxlctl_drift_settings") == 1
            # reported once, not at every check
            d.deadlines["drift"] = time.monotonic()
            step_until(d, lambda: d.stats.drift_checks == 2)
            assert len(cap.grep("drift: vm.swappiness")) == 1
            # an event (or the safety rescan) with no new work does not quietly undo it either
            fac.current.trigger()
            step_until(d, lambda: d.stats.rescans.get("event", 0) == 1)
            assert read(root, SWAPPINESS) == "77" and d.stats.knob_writes == 0
            assert cap.grep("left drifted setting(s) as found (drift.action = report): vm.swappiness")
        else:
            assert read(root, SWAPPINESS) == "10" and d.stats.drift_corrections == 1
            assert cap.grep("set vm.swappiness: 77 -> 10 (profile inference-capacity)")
            # refreshed right after the write, not one interval later
            assert parse_exposition(d.metrics_text()).get("cxlctl_knob_drift", setting="vm.swappiness") == 0
            d.deadlines["drift"] = time.monotonic()
            step_until(d, lambda: d.stats.drift_checks == 2)
            assert cap.grep("drift resolved: vm.swappiness")
            ex = parse_exposition(d.metrics_text())
            assert ex.get("cxlctl_knob_drift", setting="vm.swappiness") == 0
    finally:
        d.close()


def test_a_cli_apply_and_a_daemon_reconcile_never_interleave(tmp_path: Any, capsys: Any, monkeypatch: Any) -> None:
    """Both directions, with the engine's pause hook holding the shared flock mid-apply:
    the daemon defers while a CLI apply runs (and then follows it), and a CLI apply is
    refused (exit 4, naming the daemon's pid) while the daemon is applying."""
    root = _region_root(tmp_path)
    cli("--root", root, "tune", "apply", "--persist", "inference-capacity", check=True, inprocess=True)
    capsys.readouterr()
    d, fac, cap = make_daemon(root)
    try:
        d.startup()
        # 1. a CLI apply pauses after its first write, holding the lock
        p = _cxl_cmd(
            root,
            "tune",
            "apply",
            "latency-strict",
            env={"CXLCTL_TEST_PAUSE_AFTER_WRITES": "1", "CXLCTL_TEST_PAUSE_SECONDS": "1.5"},
        )
        t0 = time.monotonic()
        while not is_held(root):
            assert time.monotonic() - t0 < 20 and p.poll() is None, "the CLI apply never took the lock"
            time.sleep(0.02)
        fac.current.trigger()
        step_until(d, lambda: d.stats.reconciles.get("locked", 0) >= 1)
        assert d.stats.knob_writes == 0
        _, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        step_until(d, lambda: d.rec.target.name == "latency-strict" and d.deadlines.get("retry") is None)
        assert d.stats.knob_writes == 0, "the daemon follows the CLI's apply instead of undoing it"
        j = jn.load(Host(root))
        assert j is not None and j.profile == "latency-strict" and j.pid == p.pid

        # 2. the daemon applies (drift re-apply) and pauses mid-way; a CLI apply must wait and fail
        write(root, SWAPPINESS, "99")
        d.cfg = d.rec.cfg = config(drift={"interval": 60, "action": "reapply"})
        monkeypatch.setenv("CXLCTL_TEST_PAUSE_AFTER_WRITES", "1")
        monkeypatch.setenv("CXLCTL_TEST_PAUSE_SECONDS", "1.5")
        seen: Dict[str, Any] = {}

        def cli_while_daemon_applies() -> None:
            t = time.monotonic()
            while not is_held(root) and time.monotonic() - t < 20:
                time.sleep(0.01)
            q = _cxl_cmd(root, "tune", "apply", "inference-bandwidth", "--wait", "0", env={})
            seen["out"] = q.communicate(timeout=30)
            seen["rc"] = q.returncode

        th = threading.Thread(target=cli_while_daemon_applies)
        th.start()
        d.deadlines["drift"] = time.monotonic()
        step_until(d, lambda: d.stats.drift_corrections == 1, timeout=20)
        th.join()
        assert seen["rc"] == 4, seen
        assert f"held by pid {os.getpid()}" in seen["out"][1]
        assert read(root, SWAPPINESS) == "10"
        j = jn.load(Host(root))
        assert j is not None and j.profile == "latency-strict" and j.pid == os.getpid()
    finally:
        d.close()


def _snapshot(root: str) -> Dict[str, bytes]:
    out = {}
    for dp, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dp, f)
            if not os.path.islink(p):
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


def test_without_a_profile_the_daemon_only_observes(tmp_path: Any) -> None:
    root = _region_root(tmp_path)
    before = _snapshot(root)
    d, fac, cap = make_daemon(root)
    try:
        d.startup()
        fac.current.trigger()
        step_until(d, lambda: d.stats.rescans.get("event", 0) == 1)
    finally:
        d.close()
    assert d.rec.state == "observing" and cap.grep(
        "not enforcing a profile: no profile applied, persisted or configured"
    )
    assert _snapshot(root) == before, "observing must write nothing (not even a journal)"


def test_a_revert_is_respected_until_the_next_apply(tmp_path: Any, capsys: Any) -> None:
    root = _region_root(tmp_path)
    with open(root + "/etc/cxlctl/cxlctl.toml", "w") as f:
        f.write('profile = "inference-capacity"\n')
    cli("--root", root, "tune", "apply", "inference-capacity", check=True, inprocess=True)
    cli("--root", root, "tune", "revert", check=True, inprocess=True)
    capsys.readouterr()
    boot = read(root, SWAPPINESS)
    from cxlctl.config import load

    d, _, cap = make_daemon(root, load(Host(root)))
    try:
        d.startup()
        assert d.rec.state == "reverted" and read(root, SWAPPINESS) == boot
        assert cap.grep("inference-capacity was reverted at")
    finally:
        d.close()


def test_after_a_reboot_the_persisted_profile_is_applied(tmp_path: Any, capsys: Any) -> None:
    root = _region_root(tmp_path)
    pristine = read(root, SWAPPINESS)
    cli("--root", root, "tune", "apply", "--persist", "d-ratio", check=True, inprocess=True)
    capsys.readouterr()
    # reboot: /run is empty again and the kernel starts from its defaults
    cap = reboot_and_start(root, SWAPPINESS, pristine)
    assert read(root, SWAPPINESS) == "10"
    assert cap.grep("enforcing profile d-ratio (persisted by `tune apply --persist`)")
    j = jn.load(Host(root))
    assert j is not None and j.state == jn.APPLIED and j.profile == "d-ratio" and j.pid == os.getpid()


@pytest.mark.parametrize("rollback", [False, True])
def test_sigterm_rolls_back_only_when_configured(rollback: bool, tmp_path: Any, capsys: Any) -> None:
    root = _region_root(tmp_path)
    boot = read(root, SWAPPINESS)
    with open(root + "/etc/cxlctl/cxlctl.toml", "w") as f:
        f.write(f'profile = "inference-capacity"\n[shutdown]\nrollback = {json.dumps(rollback)}\n')
    from cxlctl.config import load

    cfg = load(Host(root))._replace(metrics_listen=None, health_enabled=False, drift_interval=0.0, rescan_interval=0.0)
    d, _, cap = make_daemon(root, cfg, install_signals=True)
    d.startup()
    assert read(root, SWAPPINESS) == "10"
    d._setup_signals()  # as run() does: SIGTERM reaches the loop through its wake-up pipe
    os.kill(os.getpid(), signal.SIGTERM)  # what systemd sends
    d.step()
    d._shutdown()
    d.close()
    if rollback:
        assert read(root, SWAPPINESS) == boot and cap.grep("shutdown.rollback = true: reverted inference-capacity")
    else:
        assert read(root, SWAPPINESS) == "10" and cap.grep("tuning left in place")


def test_run_once_from_the_command_line(tmp_path: Any, capsys: Any) -> None:
    """`cxlctl daemon run --once` as a process: persisted profile applied, labels written, exit 0."""
    from tests.kit import cli

    root = _region_root(tmp_path)
    cli("--root", root, "tune", "apply", "--persist", "d-ratio", check=True, inprocess=True)
    capsys.readouterr()
    shutil.rmtree(root + "/run/cxlctl")  # as after a reboot
    os.makedirs(root + "/etc/kubernetes/node-feature-discovery/features.d")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[metrics]\nlisten = ''\n[health]\nenabled = false\n")
    p = cli("--root", root, "daemon", "run", "--once", "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert "enforcing profile d-ratio (persisted by `tune apply --persist`)" in p.stderr
    assert "no udev monitor (--root or --no-udev)" in p.stderr
    j = jn.load(Host(root))
    assert j is not None and j.state == jn.APPLIED and j.profile == "d-ratio"
    with open(root + "/etc/kubernetes/node-feature-discovery/features.d/cxlctl") as f:
        assert "feature.node.kubernetes.io/cxl.profile=d-ratio" in f.read()
