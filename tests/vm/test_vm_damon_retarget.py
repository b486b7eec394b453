"""The daemon re-targets DAMON tiering when a CXL node comes and goes; its DAMON metrics (6.12 and
7.x, one boot each; on 7.x DAMON_STAT, which Debian starts at boot, is stopped first as the plan says).

Topology ``hb2x2``: region A (1-way, window 2) is created and onlined before
anything runs (memory hot-added as ``online_movable``, so it can go offline
again); ``vm-damon2`` (inference-damon with short ages, scoped to the cgroup
``/retarget``) is applied: two kdamonds (DRAM node 0 → A ``migrate_cold``, A → 0 ``migrate_hot``).
Then the guest driver (tests/vm/damon_retarget_driver.py) starts ``cxlctl daemon
run``, creates region B (2-way, window 1: a second CXL node) and waits until the
kdamonds cover DRAM, A and B; offlines B's memory and waits until they cover DRAM
and A again; stops the daemon and reverts.  The layout is read from DAMON's sysfs
and compared with the nodes' online memory blocks (one kdamond per node, monitoring
exactly that node's memory).  The daemon's metrics are scraped three times and the
scheme counters compared with DAMON's stats files read around each scrape.  While both CXL
nodes are there, a helper's 48 MiB go cold on DRAM, and its pages per node (numa_maps) show
where the kernel moves them: to ``target_nid`` only, also on 7.x where the scheme has weighted
``dests/`` for both nodes (issue 20: the plan's "alone where paddr ignores them").  The
reaction times are printed (pytest -s).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

import pytest

from tests.prom import parse_exposition
from tests.vm.harness import TOPOLOGIES, out_json, out_text, run_guest

pytestmark = pytest.mark.vm

DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "damon_retarget_driver.py")

PROFILE = """
summary = "VM test: inference-damon with short ages, scoped to the re-target test's cgroup"
include = "inference-damon"
[damon]
enabled = true
reason = "VM test"
sample = "100ms"
aggregate = "2s"
update = "4s"
cold_age = "4s"
hot_accesses = "5%"
apply_interval = "1s"
quota_size = "4G"
quota_time = "500ms"
quota_interval = "1s"
memcg = "/retarget"
anon_only = true
# 6.16+ (7.x): no free-DRAM goal, a fixed quota as on 6.12 (which has no goals).  inference-damon's
# 0.5 % free is met at once in a 2 GiB guest, and the kernel then shrinks the cold scheme's quota to
# nothing; a goal the guest never meets (99 % free, with ~90 % free) grew it by only ~9 % a second.
# The quota sweeps all of DRAM every second (as test_vm_damon's): with 8M a second the scheme spent
# its quota on the same old free-memory regions, which the filters then skip (7.3.4, seen: 1.2 GB
# tried and nothing applied in 150 s in one run, 46 MiB in 33 s in another).  The memcg filter
# keeps the moves to the test's helper: the daemon's and the guest's own pages stay on DRAM.
dram_free_goal = false
"""

CONFIG = """
[reconcile]
debounce_ms = 300
max_delay_ms = 3000
rescan_interval = 0
[drift]
interval = 0
[metrics]
listen = "127.0.0.1:9861"
telemetry_interval = 2
[health]
enabled = false
"""

GUEST = r"""
echo online_movable > /sys/devices/system/memory/auto_online_blocks
# the profile's memcg, where the cold helper runs, made before the memory controller is on for it
mkdir -p /sys/fs/cgroup/retarget
RA=$(CREATE_A) || { echo "region A failed" >&2; exit 10; }
udevadm settle --timeout=30 || true
echo "$RA" > "$OUT/region-a"
mkdir -p /etc/cxlctl/profiles
cat > /etc/cxlctl/profiles/vm-damon2.toml <<'EOF'
PROFILE_TEXT
EOF
# without the memory controller it is no memcg: the kernel would fail the kdamond's state=on with
# ENOMEM (seen on 6.12: its scheme builder returns NULL), so the plan refuses and the apply writes nothing
cat /sys/fs/cgroup/cgroup.subtree_control > "$OUT/subtree-before"
ls /sys/fs/cgroup/retarget > "$OUT/retarget-files-before"
"$CXLCTL" tune plan vm-damon2 --json > "$OUT/plan-nomemory.json" 2> "$OUT/plan-nomemory.err"
"$CXLCTL" tune apply vm-damon2 > "$OUT/apply-nomemory.out" 2> "$OUT/apply-nomemory.err"
echo $? > "$OUT/apply-nomemory.rc"
cat /sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds > "$OUT/nr-kdamonds-after-refusal"
echo +memory > /sys/fs/cgroup/cgroup.subtree_control
cat > /etc/cxlctl/cxlctl.toml <<'EOF'
CONFIG_TEXT
EOF
export CREATE_B='CREATE_B_CMD'
cd "$REPO" && "$PY" DRIVER
"""

STATS = {
    "nr_tried": "tried_regions",
    "sz_tried": "tried_bytes",
    "nr_applied": "applied_regions",
    "sz_applied": "applied_bytes",
    "qt_exceeds": "quota_exceeds",
}


def _source(layout: Dict[str, Any], regions: Any) -> str:
    return ",".join(n for n, r in layout["nodes"].items() if r == regions)


def _check_metrics(out: Path, label: str, layout: Dict[str, Any]) -> str:
    """The scrape's DAMON series against the stats files read around it; a summary line."""
    ex = parse_exposition(out_text(out, f"metrics-{label}.txt"))
    kds = out_json(out, f"stats-{label}.json")["kdamonds"]
    assert len(ex.series("cxlctl_damon_kdamond_state")) == 2 * len(kds)
    parts = []
    for k in kds:
        kid = str(k["id"])
        assert ex.get("cxlctl_damon_kdamond_state", kdamond=kid, owner="cxlctl", state="on") == 1, (label, k)
        for field, name in STATS.items():
            (lab,) = [s for s in ex.series(f"cxlctl_damon_scheme_{name}_total") if s["kdamond"] == kid]
            assert lab["owner"] == "cxlctl" and lab["action"] == k["action"], (label, lab)
            assert lab["destination_node"] == k["target_nid"], (label, lab)
            assert lab["source_node"] == _source(layout, k["regions"]), (label, lab, k)
            got = ex.get(f"cxlctl_damon_scheme_{name}_total", kdamond=kid)
            assert got == int(k["stats"][field]), (label, kid, field, got, k["stats"])
        parts.append(f"kdamond {kid} {k['action']} tried {k['stats']['nr_tried']} applied {k['stats']['sz_applied']} B")
    return f"metrics {label}: " + "; ".join(parts)


@pytest.mark.parametrize("series", ["6.12", "7.x"])
def test_daemon_retargets_damon_when_a_cxl_node_comes_and_goes(series: str) -> None:
    t = TOPOLOGIES["hb2x2"]
    a = next(r for r in t.regions if r.window == 2)  # 1-way, its own NUMA node
    b = next(r for r in t.regions if r.window == 1)  # 2-way inside one bridge, another node
    script = (
        GUEST.replace("CREATE_A", a.create_command(t))
        .replace("CREATE_B_CMD", b.create_command(t))
        .replace("PROFILE_TEXT", PROFILE.strip())
        .replace("CONFIG_TEXT", CONFIG.strip())
        .replace("DRIVER", DRIVER)
    )
    res = run_guest(t, script, kernel=series, timeout=1500)
    out = res.outdir
    ctx = f"\n--- driver.log ---\n{out_text(out, 'driver.log', missing_ok=True)}\n--- daemon.log ---\n{out_text(out, 'daemon.log', missing_ok=True)[-6000:]}"
    assert res.returncode == 0, res.stderr[-3000:] + ctx
    times = out_json(out, "times.json")
    nodes = out_json(out, "nodes.json")
    (node_a,), (node_b,) = nodes["a"], nodes["b"]
    report = [
        f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s",
        f"CXL node A {node_a}, B {node_b}; daemon ready {times['ready']} s after start",
        f"region B: create_ram_region {times['create_b_seconds']} s, node online "
        f"{times['node_b_online_after_create_returned']} s after it returned, kdamonds re-targeted "
        f"{times['grow_from_node_online']} s after the node was online",
        f"node B offlined in {times['offline_b_seconds']} s, kdamonds re-targeted back "
        f"{times['shrink_from_offlined']} s later",
    ]
    print("\n[vm damon-retarget] " + "\n[vm damon-retarget] ".join(report))

    # the profile's memcg before the memory controller was on for it: a cgroup the kernel's filter
    # cannot find; the plan refused it and the apply wrote nothing
    assert "memory" not in out_text(out, "subtree-before").split()
    assert "memory.stat" not in out_text(out, "retarget-files-before").split()
    why = [r for r in out_json(out, "plan-nomemory.json")["plan"]["refusals"] if 'memcg "/retarget"' in r]
    assert why and "echo +memory > /sys/fs/cgroup/cgroup.subtree_control" in why[0], out_text(out, "plan-nomemory.json")
    assert out_text(out, "apply-nomemory.rc").strip() == "2", out_text(out, "apply-nomemory.err")
    assert "refused; nothing was changed" in out_text(out, "apply-nomemory.err")
    assert out_text(out, "nr-kdamonds-after-refusal").strip() == "0"

    # 7.x runs DAMON_STAT from boot: the plan refused beside it, naming the file that stops it
    if series == "7.x":
        assert times["damon_stat_stopped"] is True, times
        plan = out_text(out, "damon-stat-plan.json")
        assert "echo N > /sys/module/damon_stat/parameters/enabled" in plan, plan[-2000:]
    # applied by hand: two kdamonds on DRAM and A
    assert out_text(out, "apply.rc").strip() == "0", out_text(out, "apply.err", missing_ok=True)
    assert times["applied_layout"] == "ok", times["applied_layout"]
    assert [k["state"] for k in out_json(out, "layout-applied.json")["kdamonds"]] == ["on", "on"]
    # B came: three kdamonds, B's monitoring exactly its memory, migrating hot pages to DRAM
    assert times["grow_from_node_online"] is not None, ctx
    grown = out_json(out, "layout-grown.json")
    assert len(grown["kdamonds"]) == 3
    kb = [k for k in grown["kdamonds"] if _source(grown, k["regions"]) == str(node_b)]
    assert len(kb) == 1 and (kb[0]["action"], kb[0]["target_nid"], kb[0]["state"]) == ("migrate_hot", "0", "on")
    assert out_text(out, "verify-grown.rc").strip() == "0", out_text(out, "verify-grown.json", missing_ok=True)
    # where cold DRAM pages go with two CXL nodes in one tier: on 6.17+ cxlctl gives the DRAM scheme both
    # as weighted destinations (dests/), and its plan says "node X alone where paddr ignores them"; the
    # kernel is the judge: every page the helper lost went to target_nid (7.3.4: all 12,288 in 41 s,
    # none to the other destination).  6.12 has no dests/ (and the driver skips the helper there)
    (dram_grown,) = [k for k in grown["kdamonds"] if k["action"] == "migrate_cold"]
    if series == "6.12":
        assert dram_grown["dests"] is None, dram_grown
    else:
        cold = out_json(out, "cold-grown.json")
        (dram,) = cold["dram_schemes"]
        target = int(dram["target_nid"])
        pages = {int(n): v for n, v in cold["samples"][-1]["pages"].items()}
        moved = sum(v for n, v in pages.items() if n != 0)
        last = cold["samples"][-1]["t"]
        print(f"\n[vm damon-retarget] cold helper after {last} s: {pages}; DRAM target {target}, dests {dram['dests']}")
        assert sorted(d[0] for d in dram["dests"]) == sorted([node_a, node_b]), dram
        assert all(w and w > 0 for _, w in dram["dests"]), dram
        assert moved >= 0.5 * sum(pages.values()), ("the cold helper's pages did not leave DRAM", cold["samples"][-1])
        assert pages.get(target, 0) == moved, ("cold pages went elsewhere than target_nid", pages, dram)
    # B went: back to DRAM and A
    assert times["offline_failures"] == [], times
    assert times["shrink_from_offlined"] is not None, ctx
    shrunk = out_json(out, "layout-shrunk.json")
    assert sorted(_source(shrunk, k["regions"]) for k in shrunk["kdamonds"]) == sorted(["0", str(node_a)])
    assert out_text(out, "verify-shrunk.rc").strip() == "0", out_text(out, "verify-shrunk.json", missing_ok=True)
    assert "damon.nr_kdamonds" in out_text(out, "daemon.log"), ctx

    # the metrics: exactly DAMON's stats, labelled with the nodes (and not all zero: after 10 s the
    # DRAM kdamond has tried cold regions)
    one = out_json(out, "stats-one.json")["kdamonds"]
    assert sum(int(k["stats"]["nr_tried"]) for k in one if k["action"] == "migrate_cold") > 0, one
    lines = [
        _check_metrics(out, "one", out_json(out, "layout-applied.json")),
        _check_metrics(out, "two", grown),
        _check_metrics(out, "three", shrunk),
    ]
    print("\n[vm damon-retarget] " + "\n[vm damon-retarget] ".join(lines))

    # stopping the daemon leaves the kdamonds (it reverts nothing); revert removes them
    assert times["daemon_rc"] == 0, times
    assert [k["state"] for k in out_json(out, "layout-daemon-stopped.json")["kdamonds"]] == ["on", "on"]
    assert out_text(out, "revert.rc").strip() == "0", out_text(out, "revert.err", missing_ok=True)
    assert out_json(out, "layout-reverted.json")["kdamonds"] == []
    assert out_json(out, "status-after.json")["damon"] == []
