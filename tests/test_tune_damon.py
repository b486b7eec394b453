"""DAMON tiering in the tuning engine: reader, profile, plan, apply/verify/revert, faults, crash.

Trees: DAMON sysfs recorded in the 6.12 VM with no kdamond (``single-region-damon-idle``),
with a kdamond someone else started (``single-region-damon-running``), and 6.1
(``single-noregion-damon``: no DAMON sysfs at all); see
tests/vm/test_vm_damon.py, which recorded them.  Writes go through the one write
primitive wrapped by :mod:`tests.damon_sysfs` (the kernel's side effects of
``nr_*``/``state`` writes, which a tree of regular files cannot have).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, List

import pytest

from cxlctl.damon.sysfs import probe_host, read_damon
from cxlctl.errors import EXIT_DRIFT, EXIT_USAGE
from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from cxlctl.tuning import journal as jn
from cxlctl.tuning.damon_tiering import DamonSpec, parse_duration_us, validate
from cxlctl.tuning.knobs import read_current
from cxlctl.tuning.profile import ProfileError, load
from cxlctl.tuning.recommend import recommend
from tests import damon_sysfs
from tests.kit import FIXTURES, cli
from tests.tune_support import diff, journal, kill_at_pause, snapshot, work_copy

IDLE = "linux-6.12/single-region-damon-idle"
RUNNING = "linux-6.12/single-region-damon-running"
TIERING = "linux-6.12/single-region-damon-tiering"
OLD = "linux-6.1/single-noregion-damon"
ADMIN = "/sys/kernel/mm/damon/admin/kdamonds"
DAMON_VIEW = ("sys/kernel/mm", "proc/sys", "sys/devices/system/memory")


def _tree(source: str, tmp_path: Any, monkeypatch: Any, name: str = "root") -> str:
    root = work_copy(source, str(tmp_path / name))
    damon_sysfs.install(monkeypatch, root)
    return root


def _write_profile(root: str, name: str, text: str) -> None:
    d = os.path.join(root, "etc/cxlctl/profiles")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name + ".toml"), "w") as f:
        f.write(text)


# ---------------------------------------------------------------------------- reader


def test_reader_idle_612() -> None:
    state, caps = probe_host(Host(os.path.join(FIXTURES, IDLE)))
    assert state.sysfs and state.nr_kdamonds == 0 and state.kdamonds == ()
    assert caps.migrate is True and caps.tiering and caps.why_not is None
    assert not caps.node_goals  # node_mem_used_bp goals are 6.16+


def test_reader_running_kdamond_of_someone_else() -> None:
    state = read_damon(Host(os.path.join(FIXTURES, RUNNING)).reader)
    assert state.nr_kdamonds == 1
    (k,) = state.kdamonds
    assert k.running and k.pid is not None and k.pid > 0
    (c,) = k.contexts
    assert c.operations == "paddr" and "paddr" in c.avail_operations
    (s,) = c.schemes
    assert s.action == "stat"
    assert s.stats.nr_tried is not None and s.stats.qt_exceeds is not None
    _, caps = probe_host(Host(os.path.join(FIXTURES, RUNNING)))
    assert caps.paddr is True and caps.migrate is True  # read from the tree itself
    assert any("target_nid" in e for e in caps.evidence)


def test_reader_takes_no_number_longer_than_a_u64(tmp_path: Any) -> None:
    """A DAMON file of thousands of digits reads as None (``int()`` raises past 4300 digits)."""
    k = tmp_path / "sys/kernel/mm/damon/admin/kdamonds"
    (k / "0").mkdir(parents=True)
    (k / "nr_kdamonds").write_text("9" * 5000 + "\n")
    (k / "0" / "pid").write_text("18446744073709551615\n")
    state = read_damon(Host(str(tmp_path)).reader)
    assert state.nr_kdamonds is None and state.kdamonds[0].pid == (1 << 64) - 1


def test_reader_cxlctls_kdamonds_recorded_while_tiering() -> None:
    """The VM test's own kdamonds, recorded after the cold pages moved: stats show the migration."""
    state = read_damon(Host(os.path.join(FIXTURES, TIERING)).reader)
    assert [k.running for k in state.kdamonds] == [True, True]
    cold, hot = (k.schemes[0] for k in state.kdamonds)
    assert (cold.action, cold.target_nid) == ("migrate_cold", 1) and (hot.action, hot.target_nid) == ("migrate_hot", 0)
    assert [f.type for f in cold.filters] == ["young", "anon", "memcg"]
    assert cold.filters[2].memcg_path == "/damon-test" and cold.filters[0].matching is True
    assert cold.stats.sz_applied is not None and cold.stats.sz_applied >= 4 << 20
    assert cold.quota.bytes == 4 << 30 and cold.quota.ms == 500 and cold.quota.reset_interval_ms == 1000
    (ctx,) = state.kdamonds[0].contexts
    assert ctx.operations == "paddr" and ctx.sample_us == 100_000 and ctx.aggr_us == 2_000_000
    # without cxlctl's journal these are someone else's: inference-damon refuses
    from cxlctl.inventory import scan
    from cxlctl.tuning.plan import plan

    root = os.path.join(FIXTURES, TIERING)
    p = plan(scan(Host(root)), load(Host(root), "inference-damon"), read_current(Host(root)))
    assert p.refusals and "migrate_cold" in p.refusals[0]


def test_reader_61_has_no_damon_sysfs() -> None:
    state, caps = probe_host(Host(os.path.join(FIXTURES, OLD)))
    assert not state.sysfs and not caps.tiering  # Debian's 6.1 has no DAMON sysfs at all
    assert caps.why_not is not None and "needs 6.11+ with CONFIG_DAMON_PADDR" in caps.why_not


# ---------------------------------------------------------------------------- profile


def test_units() -> None:
    assert parse_duration_us("5s", "k") == 5_000_000
    assert parse_duration_us("2min", "k") == 120_000_000
    assert parse_duration_us("100ms", "k") == 100_000
    for bad in ("5", 5, "5 parsecs", "-1s", "1.5us", "٥s", "9" * 400 + "s"):  # the last overflows a float
        with pytest.raises(ValueError):
            parse_duration_us(bad, "k")
    spec = validate({"enabled": True, "quota_size": "256M", "cold_age": "2min", "hot_accesses": "10%"})
    assert spec.quota_bytes == 256 << 20 and spec.cold_age_us == 120_000_000 and spec.hot_accesses_pct == 10


@pytest.mark.parametrize(
    "body,words",
    [
        ('cold_age = "5"', "cold_age"),
        ('quota_size = "lots"', "quota_size"),
        ('hot_accesses = "150%"', "out of range"),
        ("color = 1", "unknown key 'color'"),
        ('memcg = "relative/path"', "memcg"),
        ("watermarks = { high = 1, mid = 5, low = 0 }", "high >= mid >= low"),
        ('sample = "1s"\naggregate = "100ms"', "must not be shorter than sample"),
    ],
)
def test_bad_damon_section_is_refused_with_the_key(tmp_path: Any, body: str, words: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(f'summary = "x"\n[damon]\nenabled = true\n{body}\n')
    r = cli("--root", os.path.join(FIXTURES, IDLE), "tune", "show", str(p))
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "damon" in r.stderr and words in r.stderr and "Traceback" not in r.stderr


def test_damon_and_numa_balancing_tiering_together_are_refused(tmp_path: Any) -> None:
    p = tmp_path / "both.toml"
    p.write_text('summary = "x"\ninclude = "inference-capacity"\n[damon]\nenabled = true\n')
    with pytest.raises(ProfileError) as e:
        load(Host(os.path.join(FIXTURES, IDLE)), str(p))
    assert "kernel.numa_balancing = 2" in str(e.value) and "two promoters" in str(e.value)
    r = cli("--root", os.path.join(FIXTURES, IDLE), "tune", "apply", str(p))
    assert r.returncode == EXIT_USAGE and "two promoters" in r.stderr


def test_builtin_inference_damon() -> None:
    p = load(Host(os.path.join(FIXTURES, IDLE)), "inference-damon")
    s = p.setting("damon")
    assert s is not None and isinstance(s.value, DamonSpec) and s.value.enabled
    nb = p.setting("kernel.numa_balancing")
    de = p.setting("demotion_enabled")
    assert nb is not None and nb.value == 0 and de is not None and de.value is True


# ---------------------------------------------------------------------------- plan


def test_plan_on_612_monitors_each_nodes_blocks(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    p = engine.prepare(Host(root), "inference-damon").plan
    assert p.refusals == ()
    by = {s.setting: s for s in p.steps if s.knob == "damon"}
    from cxlctl.inventory import scan

    inv = scan(Host(root))
    cxl = [n for n in inv.nodes if n.kind == "cxl" and n.has_memory]
    assert len(cxl) == 1
    cxl_id = cxl[0].id
    assert by["damon.nr_kdamonds"].desired == "2" and by["damon.nr_kdamonds"].write == "2\n"
    assert by["damon.kdamond0.scheme0.action"].desired == "migrate_cold"
    assert by["damon.kdamond0.scheme0.target_nid"].desired == str(cxl_id)
    assert by["damon.kdamond1.scheme0.action"].desired == "migrate_hot"
    assert by["damon.kdamond1.scheme0.target_nid"].desired == "0"
    # the CXL kdamond monitors exactly the CXL node's online memory blocks
    bs = inv.memory_block_size
    assert bs
    blocks = sorted(b.id for b in cxl[0].memory_blocks if b.state == "online")
    assert by["damon.kdamond1.region0.start"].desired == str(blocks[0] * bs)
    assert by["damon.kdamond1.region0.end"].desired == str((blocks[-1] + 1) * bs)
    # states last, after every member file
    names = [s.setting for s in p.steps if s.knob == "damon"]
    assert names[-2:] == ["damon.kdamond0.state", "damon.kdamond1.state"]
    assert "quota goals on node memory need 6.16+" in by["damon.nr_kdamonds"].note
    # the journal saves the states first (restore order), each with a new kdamond's "off"
    saved = [path for k, path in p.saved if k == "damon"]
    assert saved[:3] == [f"{ADMIN}/0/state", f"{ADMIN}/1/state", f"{ADMIN}/nr_kdamonds"]
    assert dict(p.baseline) == {f"{ADMIN}/0/state": "off\n", f"{ADMIN}/1/state": "off\n"}


def test_plan_on_61_says_unavailable_and_applies_the_rest(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(OLD, tmp_path, monkeypatch)
    before = snapshot(root, DAMON_VIEW)
    p = engine.prepare(Host(root), "inference-damon").plan
    (d,) = [s for s in p.steps if s.knob == "damon"]
    assert d.action == "unsupported"
    assert "not available on this kernel" in d.note and "needs 6.11+ with CONFIG_DAMON_PADDR" in d.note
    res = engine.apply(Host(root), "inference-damon")
    assert res.ok, res.error
    assert [s for s in journal(root).skipped if s[0] == "damon"]
    changed = diff(before, snapshot(root, DAMON_VIEW))
    assert changed and not [c for c in changed if "damon" in c]


def test_someone_elses_kdamond_is_never_touched(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(RUNNING, tmp_path, monkeypatch)
    before = snapshot(root)
    p = engine.prepare(Host(root), "inference-damon").plan
    assert p.refusals and "kdamond 0 (on" in p.refusals[0] and "damo stop" in p.refusals[0]
    r = cli("--root", root, "tune", "apply", "inference-damon")
    assert r.returncode == EXIT_USAGE and "refused; nothing was changed" in r.stderr, r.stderr
    # --beside-other-damon cannot help with a sysfs kdamond (nr_kdamonds would re-create it)
    r = cli("--root", root, "tune", "apply", "--beside-other-damon", "inference-damon")
    assert r.returncode == EXIT_USAGE
    assert diff(before, snapshot(root)) == []
    # the plan still shows it, and a profile without [damon] applies as ever
    r = cli("--root", root, "tune", "plan", "inference-damon")
    assert r.returncode == 0 and "refused" in r.stdout
    assert engine.apply(Host(root), "inference-capacity").ok


def _module_running(root: str, name: str = "damon_reclaim") -> None:
    d = os.path.join(root, f"sys/module/{name}/parameters")
    os.makedirs(d, exist_ok=True)  # the recorded module, switched on for this one case
    for fname, text in (("enabled", "Y\n"), ("kdamond_pid", "321\n")):
        with open(os.path.join(d, fname), "w") as f:
            f.write(text)


@pytest.mark.parametrize("module", ["damon_reclaim", "damon_lru_sort"])
def test_damon_module_kdamond_is_refused_as_the_kernel_refuses(module: str, tmp_path: Any, monkeypatch: Any) -> None:
    """DAMON_RECLAIM and DAMON_LRU_SORT start their kdamonds exclusively, as DAMON_STAT does: in 6.12
    and 7.3.4 guests a sysfs kdamond's state=on failed with EBUSY while either ran.  The plan refuses,
    names the file that stops it, and an apply writes nothing; the old flag is gone, the old profile
    key is accepted (a bool) and changes nothing."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    _module_running(root, module)
    before = snapshot(root)
    p = engine.prepare(Host(root), "inference-damon").plan
    assert p.refusals and f"{module} (kdamond pid 321)" in p.refusals[0], p.refusals
    assert f"echo N > /sys/module/{module}/parameters/enabled" in p.refusals[0] and "EBUSY" in p.refusals[0]
    assert "damon_stat.enabled=N" not in p.refusals[0]  # that advice is DAMON_STAT's own
    r = cli("--root", root, "tune", "apply", "inference-damon")
    assert r.returncode == EXIT_USAGE and "refused; nothing was changed" in r.stderr, r.stderr
    r = cli("--root", root, "tune", "plan", "--beside-other-damon", "inference-damon")
    assert r.returncode == EXIT_USAGE and "No such option: --beside-other-damon" in r.stderr
    assert diff(before, snapshot(root)) == []
    _write_profile(
        root, "d4", 'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nbeside_other_damon = true\n'
    )
    assert engine.prepare(Host(root), "d4").plan.refusals
    _write_profile(
        root, "d5", 'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nbeside_other_damon = "yes"\n'
    )
    bad = cli("--root", root, "tune", "plan", "d5")
    assert bad.returncode == EXIT_USAGE and "beside_other_damon" in bad.stderr


def test_an_older_journal_asking_beside_other_damon_loads(tmp_path: Any, monkeypatch: Any) -> None:
    """A journal written by an earlier cxlctl with ``"beside_other_damon": true`` still loads (the key is ignored)."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    assert engine.apply(Host(root), "inference-damon").ok
    doc = jn.to_json(journal(root))
    doc["beside_other_damon"] = True
    assert jn.from_json(doc).profile == "inference-damon"
    assert engine.revert(Host(root)).ok


# ---------------------------------------------------------------------------- apply / verify / revert


def _damon_files(root: str) -> List[str]:
    return sorted(os.listdir(root + ADMIN))


def test_apply_verify_drift_revert(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    before = snapshot(root)
    res = engine.apply(Host(root), "inference-damon")
    assert res.ok, res.error
    assert _damon_files(root) == ["0", "1", "nr_kdamonds"]
    with open(root + ADMIN + "/0/contexts/0/schemes/0/action") as f:
        assert f.read() == "migrate_cold\n"
    with open(root + ADMIN + "/1/state") as f:
        assert f.read() == "on\n"
    assert engine.verify(Host(root)).drift == 0
    st = engine.status(Host(root))
    assert [(r.kdamond, r.owner, r.action) for r in st.damon] == [
        (0, "cxlctl", "migrate_cold"),
        (1, "cxlctl", "migrate_hot"),
    ]
    # applying again changes nothing
    assert engine.prepare(Host(root), "inference-damon").plan.writes == ()
    # stop cxlctl's kdamond by hand: drift (exit 3)
    damon_sysfs.Model(root).after(root + ADMIN + "/1/state", "off", None)
    with open(root + ADMIN + "/1/state", "w") as f:
        f.write("off\n")
    v = engine.verify(Host(root))
    assert [c.setting for c in v.checks if c.status == "drift"] == ["damon.kdamond1.state"]
    assert cli("--root", root, "tune", "verify").returncode == EXIT_DRIFT
    # apply again restarts it with "on"
    p = engine.prepare(Host(root), "inference-damon").plan
    assert [(s.setting, s.write) for s in p.writes] == [("damon.kdamond1.state", "on\n")]
    # a scheme changed by hand while running: drift; re-apply commits
    with open(root + ADMIN + "/0/contexts/0/schemes/0/target_nid", "w") as f:
        f.write("0\n")
    assert engine.apply(Host(root), "inference-damon").ok
    assert engine.verify(Host(root)).drift == 0
    # revert removes cxlctl's kdamonds and nothing else
    r = engine.revert(Host(root))
    assert r.ok, r.errors
    assert _damon_files(root) == ["nr_kdamonds"]
    assert diff(before, snapshot(root)) == []


def test_reapply_with_changed_settings_commits_the_running_kdamonds(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    assert engine.apply(Host(root), "inference-damon").ok
    _write_profile(
        root, "d2", 'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\ncold_age = "2min"\n'
    )
    p = engine.prepare(Host(root), "d2").plan
    writes = [(s.setting, s.write) for s in p.writes]
    assert ("damon.kdamond0.scheme0.age.min", "1200\n") in writes
    assert ("damon.kdamond0.state", "commit\n") in writes and ("damon.kdamond1.state", "commit\n") not in writes
    assert engine.apply(Host(root), "d2").ok
    assert engine.verify(Host(root)).drift == 0
    assert engine.revert(Host(root)).ok and _damon_files(root) == ["nr_kdamonds"]


def test_switching_to_a_profile_without_damon_removes_the_kdamonds(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    before = snapshot(root)
    assert engine.apply(Host(root), "inference-damon").ok
    res = engine.apply(Host(root), "inference-bandwidth")
    assert res.ok, res.error
    assert _damon_files(root) == ["nr_kdamonds"]
    assert engine.revert(Host(root)).ok
    assert diff(before, snapshot(root)) == []


def test_kdamonds_removed_by_hand_are_drift(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    assert engine.apply(Host(root), "inference-damon").ok
    for k in ("0", "1"):
        with open(root + f"{ADMIN}/{k}/state", "w") as f:
            f.write("off\n")
    damon_sysfs.Model(root).after(root + ADMIN + "/nr_kdamonds", "0", None)
    with open(root + ADMIN + "/nr_kdamonds", "w") as f:
        f.write("0\n")
    v = engine.verify(Host(root))
    assert v.drift > 0 and any(c.note == "kdamond removed" for c in v.checks)
    assert engine.revert(Host(root)).ok


# ---------------------------------------------------------------------------- faults and crash


@pytest.mark.parametrize("fault", ["EINVAL", "EBUSY", "EIO"])
def test_a_failing_damon_write_leaves_damon_as_before(tmp_path: Any, monkeypatch: Any, fault: str) -> None:
    """Every write of the apply fails in turn: DAMON (and every knob) is exactly as before."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    before = snapshot(root, DAMON_VIEW)
    writes = engine.prepare(Host(root), "inference-damon").plan.writes
    damon_writes = [i for i, s in enumerate(writes, 1) if s.knob == "damon"]
    assert len(damon_writes) > 40
    for k in range(1, len(writes) + 1):
        monkeypatch.setenv("CXLCTL_TEST_FAULT", f"{k}:{fault}")
        res = engine.apply(Host(root), "inference-damon")
        assert not res.ok and res.rollback_errors == (), (k, res.error)
        assert diff(before, snapshot(root, DAMON_VIEW)) == [], k
        assert journal(root).state == jn.ROLLED_BACK
    monkeypatch.delenv("CXLCTL_TEST_FAULT")
    assert engine.apply(Host(root), "inference-damon").ok


def _kill_at(root: str, k: int) -> None:
    code = (
        "import sys; from tests.damon_sysfs import main_with_model; "
        f"sys.exit(main_with_model({root!r}, ['--root', {root!r}, 'tune', 'apply', 'inference-damon']))"
    )
    kill_at_pause([sys.executable, "-c", code], k)


def test_sigkill_during_apply_then_revert_restores_damon(tmp_path: Any, monkeypatch: Any) -> None:
    root = _tree(IDLE, tmp_path, monkeypatch)
    before = snapshot(root)
    writes = engine.prepare(Host(root), "inference-damon").plan.writes
    first = next(i for i, s in enumerate(writes, 1) if s.knob == "damon")
    # right after the journal, after nr_kdamonds, mid-kdamond, before and after the last state
    for k in sorted({0, first, first + 20, len(writes) - 1, len(writes)}):
        _kill_at(root, k)
        assert journal(root).state == jn.APPLYING
        if k >= first:
            assert _damon_files(root) != ["nr_kdamonds"], k
        res = engine.revert(Host(root))
        assert res.ok, (k, res.errors)
        assert diff(before, snapshot(root)) == [], k


# ---------------------------------------------------------------------------- recommend, CLI


def test_recommend_names_damon_where_the_kernel_has_it() -> None:
    new = os.path.join(FIXTURES, IDLE)
    from cxlctl.inventory import scan

    rec = recommend(scan(Host(new)), read_current(Host(new)))
    text = " ".join(rec.reasons) + " ".join(f"{p} {w}" for p, w in rec.alternatives)
    assert "inference-damon" in (rec.profile or "") + text and "migrate_hot/migrate_cold" in text
    # the cost it argues from is the kernel's: in tiering mode prot-NUMA skips top-tier (DRAM) pages
    # (change_pte_range), so hint faults fall on CXL pages only, not on every scanned page
    assert "every scanned page" not in text and "CXL" in text.split("hint faults", 1)[1][:80]
    old = os.path.join(FIXTURES, OLD)
    rec = recommend(scan(Host(old)), read_current(Host(old)))
    assert rec.profile != "inference-damon" and "inference-damon" not in [p for p, _ in rec.alternatives]


def test_cli_plan_and_status_at_80_columns(tmp_path: Any, monkeypatch: Any) -> None:
    root = work_copy(IDLE, str(tmp_path / "root"))
    r = cli("--root", root, "tune", "plan", "inference-damon", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "damon." in r.stdout and "〃" in r.stdout and "Traceback" not in r.stderr
    r = cli("--root", os.path.join(FIXTURES, RUNNING), "tune", "status", env={"COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "DAMON schemes" in r.stdout and "other" in r.stdout
    doc = json.loads(cli("--root", os.path.join(FIXTURES, RUNNING), "tune", "status", "--json").stdout)
    (row,) = doc["damon"]
    assert row["owner"] == "other" and row["action"] == "stat" and "qt_exceeds" in row


# ------------------------------------------------------------------- the memcg filter's cgroup
# A memory cgroup's memory.stat, as the 7.x guest recorded it for the DAMON test's cgroup.
MEMCG_STAT = os.path.join(FIXTURES, "linux-7.x/single-region-damon-tiering/sys/fs/cgroup/damon-test/memory.stat")


def _cgroup(root: str, path: str, memory: bool, hands_on: bool = False) -> None:
    d = os.path.join(root, "sys/fs/cgroup", path.strip("/"))
    os.makedirs(d, exist_ok=True)
    if memory:
        with open(MEMCG_STAT) as src, open(os.path.join(d, "memory.stat"), "w") as dst:
            dst.write(src.read())
    with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
        f.write("cpu memory\n" if hands_on else "\n")


@pytest.mark.parametrize(
    "layout, words",
    [
        ("absent", "there is no cgroup /sys/fs/cgroup/kv"),
        ("no-memory", "echo +memory > /sys/fs/cgroup/cgroup.subtree_control"),
        ("nested-no-memory", "echo +memory > /sys/fs/cgroup/inference.slice/cgroup.subtree_control"),
    ],
)
def test_a_memcg_the_kernel_cannot_find_is_refused_before_anything_is_written(
    tmp_path: Any, monkeypatch: Any, layout: str, words: str
) -> None:
    """DAMON's memcg filter looks among memory cgroups; on 6.12 a path it did not find failed the
    kdamond's state=on with ENOMEM mid-apply (the retarget VM test, before it enabled +memory).
    The plan refuses first, naming the file that turns the controller on."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    memcg = "/inference.slice/kv.service" if layout.startswith("nested") else "/kv"
    if layout.startswith("nested"):
        _cgroup(root, "/inference.slice", memory=False)
    if layout != "absent":
        _cgroup(root, memcg, memory=False)
    _write_profile(
        root, "scoped", f'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nmemcg = "{memcg}"\n'
    )
    before = snapshot(root)
    p = engine.prepare(Host(root), "scoped").plan
    assert len(p.refusals) == 1 and words in p.refusals[0] and f'memcg "{memcg}"' in p.refusals[0], p.refusals
    r = cli("--root", root, "tune", "apply", "scoped")
    assert r.returncode == EXIT_USAGE and "refused; nothing was changed" in r.stderr and words in r.stderr, r.stderr
    assert diff(before, snapshot(root)) == []
    r = cli("--root", root, "tune", "plan", "scoped", "--json")
    (why,) = json.loads(r.stdout)["plan"]["refusals"]
    assert words in why, why
    r = cli("--root", root, "tune", "plan", "scoped")
    assert r.returncode == 0 and "refused: tune apply would change nothing: memcg" in r.stdout, r.stdout


def test_a_memory_cgroup_is_taken_and_a_parent_of_memory_cgroups_is_warned_about(
    tmp_path: Any, monkeypatch: Any
) -> None:
    """The filter compares the page's memcg id with its own (mm/damon/paddr.c): a slice that hands
    the controller on to its services matches none of their pages, so the plan says to name the
    engine's own cgroup; a leaf memory cgroup plans cleanly."""
    root = _tree(IDLE, tmp_path, monkeypatch)
    _cgroup(root, "/inference.slice", memory=True, hands_on=True)
    _cgroup(root, "/inference.slice/vllm.service", memory=True)
    for name, memcg in (("slice", "/inference.slice"), ("leaf", "/inference.slice/vllm.service")):
        _write_profile(
            root, name, f'summary = "x"\ninclude = "inference-damon"\n[damon]\nenabled = true\nmemcg = "{memcg}"\n'
        )
    leaf = engine.prepare(Host(root), "leaf").plan
    assert leaf.refusals == () and not [w for w in leaf.warnings if "memcg" in w], leaf.warnings
    assert any(s.path.endswith("memcg_path") and s.desired == "/inference.slice/vllm.service" for s in leaf.steps)
    sl = engine.prepare(Host(root), "slice").plan
    assert sl.refusals == ()
    assert [w for w in sl.warnings if "hands the memory controller on" in w and "/inference.slice/vllm.service" in w]
