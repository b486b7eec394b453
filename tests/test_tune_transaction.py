"""The tuning transaction as other parts hold it: objects in, one plan, commit, rollback.

The daemon and the launcher build a :class:`Transaction` from objects they already
have (an inventory, a profile built in memory); these tests pin what that buys:
one scan per reconcile pass (no private re-plan), no profile file written to
``/run`` for the launcher's weights, and a rollback to the exact values before.
"""

from __future__ import annotations

import os
from typing import Any, List

from cxlctl.cli import run
from cxlctl.hostio.host import Host
from cxlctl.inventory import scan
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from cxlctl.tuning.profile import from_data, load
from cxlctl.tuning.transaction import Transaction
from tests.tune_support import diff, journal, representative, snapshot, work_copy

SOURCE = [s for s in representative() if s != "live-host"][0]
REGION = "linux-6.12/single-region"  # a DRAM node and an online CXL node


def test_the_plan_is_what_prepare_gives_and_commit_writes_it(tmp_path: Any) -> None:
    root = work_copy(SOURCE, str(tmp_path / "root"))
    inv = scan(Host(root))
    txn = Transaction(root, load(root, "t-everything"), inventory=inv)
    assert txn.prepared.inventory is inv, "an inventory the caller has is used, not rescanned"
    assert txn.plan == engine.prepare(root, "t-everything").plan
    res = txn.commit()
    assert res.ok and journal(root).state == jn.APPLIED
    written = {r.path for r in res.results if r.status == "written"}
    assert written == {s.path for s in txn.plan.writes}


def test_rollback_puts_back_the_exact_values_and_the_journal_before(tmp_path: Any) -> None:
    root = work_copy(SOURCE, str(tmp_path / "root"))
    assert run(["--root", root, "tune", "apply", "latency-strict"]) == 0
    before, j_before = snapshot(root), journal(root)
    txn = Transaction(root, "t-everything")
    assert txn.commit().ok and diff(before, snapshot(root)) != []
    undone = txn.rollback()
    assert undone.ok and undone.back_to == "latency-strict"
    assert diff(before, snapshot(root)) == []
    assert journal(root) == j_before


def test_launcher_weights_are_an_in_memory_profile_no_file_in_run(tmp_path: Any) -> None:
    """The launch profile goes to the transaction as an object; the journal keeps its document,
    and the daemon rebuilds it from there and finds nothing to write."""
    from cxlctl.daemon.reconcile import load_target, resolve_target
    from cxlctl.launch import sysweights
    from cxlctl.launch.nodesets import resolve
    from tests.daemon_support import make_daemon

    root = work_copy(REGION, str(tmp_path / "root"))
    inv = scan(Host(root))
    ns = resolve(inv, Host(root), cpu_spec=None, mem_spec=None, gpu_spec=None)
    wp = sysweights.plan(Host(root), inv, ns, ns.mem_nodes, (3, 1))
    assert wp.writes and wp.transaction is not None
    assert wp.transaction.profile.data == sysweights.profile_data(ns.mem_nodes, (3, 1), None)
    sysweights.apply(Host(root), wp)
    assert not os.path.exists(os.path.join(root, "run/cxlctl/launch")), "no profile file is written to pass weights"
    j = journal(root)
    assert j.profile == "launch-weights" and j.profile_data == wp.transaction.profile.data
    from tests.daemon_support import config

    target = resolve_target(root, config())
    assert target.state == "applied" and target.data == j.profile_data
    prof = load_target(root, target)
    assert prof.setting("weighted_interleave") is not None
    # the daemon enforces it like any profile: nothing to write, still applied
    before = snapshot(root)
    d, _, cap = make_daemon(root)
    try:
        d.startup()
    finally:
        d.close()
    assert d.rec.state == "applied" and not cap.grep("cannot load profile")
    assert diff(before, snapshot(root)) == []
    # `tune plan` with no argument plans the profile in effect (rebuilt from the journal)
    assert run(["--root", root, "tune", "plan"]) == 0


def test_a_reconcile_pass_scans_once_and_plans_through_one_transaction(tmp_path: Any, monkeypatch: Any) -> None:
    """The daemon hands its own scan to the transaction: the commit does not rescan."""
    import cxlctl.inventory
    from tests.daemon_support import make_daemon

    root = work_copy(SOURCE, str(tmp_path / "root"))
    with open(os.path.join(root, "etc/cxlctl/cxlctl.toml"), "w") as f:
        f.write('profile = "t-everything"\n')
    from cxlctl.config import load as load_config

    calls: List[str] = []
    real = cxlctl.inventory.scan

    def counting(h: Any, *a: Any, **kw: Any) -> Any:
        calls.append(h.root)
        return real(h, *a, **kw)

    monkeypatch.setattr(cxlctl.inventory, "scan", counting)
    d, _, _ = make_daemon(root, load_config(Host(root))._replace(metrics_listen=None, health_enabled=False))
    try:
        res = d.rec.reconcile("test")
    finally:
        d.close()
    assert res.result == "ok" and res.written > 0
    # the pass's scan, then the rescan after writing (metrics must show the new values): no third
    assert len(calls) == 2, calls
    assert journal(root).profile == "t-everything"


def test_from_data_validates_like_a_file(tmp_path: Any) -> None:
    import pytest

    from cxlctl.tuning.profile import ProfileError

    root = work_copy(SOURCE, str(tmp_path / "root"))
    with pytest.raises(ProfileError, match="unknown knob"):
        from_data(root, "x", {"knobs": {"vm.swapiness": 1}}, "test (in memory)")
    p = from_data(root, "x", {"include": "latency-strict", "knobs": {"vm.swappiness": 30}}, "test (in memory)")
    assert p.setting("vm.swappiness") is not None and p.setting("kernel.numa_balancing") is not None
    assert p.chain[-1] == "test (in memory)" and p.data is not None
