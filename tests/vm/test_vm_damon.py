"""DAMON tiering on real kernels: one 6.12 boot with a CXL node, one short 6.1 boot.

6.12 (``single`` topology, a RAM region online as a CPU-less CXL node): the guest
driver (tests/vm/damon_guest_driver.py) records DAMON's sysfs idle and with a
kdamond started by hand, checks that cxlctl refuses to work beside that kdamond,
then applies ``vm-damon`` — inference-damon with short ages, scoped to a cgroup
and to anonymous pages — while two C helpers (compiled here with the host's cc)
run in that cgroup: ``cold`` touches 4 MiB on the DRAM node once and sleeps,
``hot`` keeps touching 1 MiB placed on the CXL node.  The cold pages must move to
the CXL node and the hot ones back to DRAM (``/proc/PID/numa_maps``; first run:
all 1024 cold pages on CXL after 17 s, 254 of 256 hot pages on DRAM after 20 s);
the figures are printed (pytest -s).  Then a
kdamond of cxlctl's stopped by hand is drift (exit 3), and revert leaves no
kdamond and the boot values.

6.1: DAMON's part of the profile is reported unavailable and the rest applies.

``CXLCTL_RECORD_DAMON_FIXTURES=1`` (set by ``scripts/record-fixtures.sh damon``) copies the recorded trees into ``fixtures/``
(that is how the committed DAMON fixtures were made).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest

from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, GuestResult, Topology, build_c, out_json, out_text, run_guest
from tests.vm.record_fixtures import package_of

pytestmark = pytest.mark.vm

#: the DAMON guests' vCPUs.  Guests get one by default (tests/vm/harness.py), but with one the 7.x
#: goal check stalled at 40 % hot share on DRAM in CI (the kernel's goal metric stayed 0 while its
#: tuned quota rose and fell), where it converged to 82-83 % with two: kdamond and the workload
#: that heats the pages share the vCPU.  Two vCPUs take both guest slots, so these run alone.  (7.x's
#: shared boot, test_vm_linux7.py; the 6.12 boot below has no goal check and one vCPU.)
DAMON_CPUS = 2
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "damon_guest_driver.py")

TIER_C = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
/* tier cold|hot MIB NODE READY: map MIB MiB of anonymous memory preferring NODE, touch every
   page, write our PID to READY; then "cold" sleeps (the pages stay untouched) and "hot" keeps
   touching them.  Before each pass "hot" drops its TLB entries (mprotect read-only and back):
   DAMON clears a page's accessed bit without a TLB flush (x86's ptep_clear_flush_young does not
   flush), and the CPU sets the bit again only when it walks the page table.  QEMU's TCG keeps a
   large TLB that can go long without a flush while the helper spins on its vCPU, and then DAMON
   sees the hottest pages as never accessed (CI once: 2 regions tried in 180 s, none moved). */
int main(int argc, char **argv) {
    if (argc < 5) return 2;
    size_t len = (size_t)atoi(argv[2]) << 20;
    unsigned long mask = 1UL << atoi(argv[3]);
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    madvise(p, len, MADV_NOHUGEPAGE);
    if (syscall(SYS_mbind, p, len, 1 /* MPOL_PREFERRED */, &mask, 64, 0) != 0) perror("mbind");
    memset(p, 1, len);
    FILE *f = fopen(argv[4], "w");
    if (!f) { perror(argv[4]); return 1; }
    fprintf(f, "%d\n", getpid());
    fclose(f);
    if (strcmp(argv[1], "hot") == 0)
        for (unsigned char v = 0;; v++) {
            if (mprotect(p, len, PROT_READ) != 0 || mprotect(p, len, PROT_READ | PROT_WRITE) != 0) {
                perror("mprotect");
                return 1;
            }
            for (size_t i = 0; i < len; i += 4096) p[i] = (char)v;
        }
    for (;;) pause();
}
"""

VM_PROFILE = """
summary = "VM test: inference-damon with short ages, scoped to the test cgroup"
include = "inference-damon"
[damon]
enabled = true
reason = "VM test"
sample = "100ms"
aggregate = "2s"
update = "4s"
min_regions = 200
cold_age = "4s"
hot_accesses = "5%"
apply_interval = "1s"
quota_size = "4G"
quota_time = "500ms"
quota_interval = "1s"
memcg = "/damon-test"
anon_only = true
"""

#: vm-damon with the operator's statement "keep at least 70 % of the hot set on DRAM" (7.2+) and
#: no fixed goals beside it, so the one goal the kernel tunes the hot scheme's quota to is that one
GOALS_PROFILE = VM_PROFILE.replace("short ages,", "short ages and hot_on_dram 70 %,") + (
    'dram_free_goal = false\ndram_used_goal = false\nhot_on_dram = "70%"\n'
)

GUEST_FULL = r"""
R=$(CREATE) || { echo "region creation failed" >&2; exit 10; }
udevadm settle --timeout=30 || true
mkdir -p /etc/cxlctl/profiles "$OUT/fixtures"
cat > /etc/cxlctl/profiles/vm-damon.toml <<'EOF'
PROFILE
EOF
cat > /etc/cxlctl/profiles/vm-damon-goals.toml <<'EOF'
GOALS
EOF
cd "$REPO" && "$PY" DRIVER MODE TOOLS
"""

GUEST_OLD = r"""
mkdir -p "$OUT/fixtures"
cd "$REPO" && "$PY" DRIVER old
"""


def _readback(out: Path, label: str) -> Dict[str, str]:
    rows = [line.rsplit(" ", 1) for line in out_text(out, f"{label}-readback.txt").splitlines() if " " in line]
    return {k: v for k, v in rows}


def _record_env() -> str:
    """The guest driver records its trees only when asked (a record costs a minute under TCG)."""
    return "export CXLCTL_RECORD_DAMON_FIXTURES=1\n" if os.environ.get("CXLCTL_RECORD_DAMON_FIXTURES") == "1" else ""


def _keep(out: Path, series: str, names: List[str], release: str = "") -> None:
    """Copy the guest's records into fixtures/ (only with CXLCTL_RECORD_DAMON_FIXTURES=1)."""
    if os.environ.get("CXLCTL_RECORD_DAMON_FIXTURES") != "1":
        return
    for name in names:
        src = out / "fixtures" / name
        dst = REPO / "fixtures" / f"linux-{series}" / name
        install(src, dst)
        about = (
            f"kernel: {release or series} ({package_of(release) if release else 'Debian linux-image, unsigned'})\n"
            f"recorded: {datetime.date.today().isoformat()} by tests/vm/test_vm_damon.py "
            "(CXLCTL_RECORD_DAMON_FIXTURES=1; guest side tests/vm/damon_guest_driver.py)\n"
            f"topology: single: {TOPOLOGIES['single'].description}\n"
            f"state: {name} (fixtures/README.md, DAMON trees)\n"
        )
        (dst / "peers" / "recorded.txt").write_text(about)


def guest_script(work: Path, t: Topology, mode: str = "full") -> str:
    """The guest side of the tiering check (``mode`` full) or of the goal check (``goals``: see
    :func:`check_goals`) on ``t`` (its widest region), tools built under ``work``."""
    region = t.widest
    assert region is not None
    tools = work / "tools"
    build_c(tools, "tier", TIER_C)
    return _record_env() + (
        GUEST_FULL.replace("CREATE", region.create_command(t))
        .replace("PROFILE", VM_PROFILE.strip())
        .replace("GOALS", GOALS_PROFILE.strip())
        .replace("DRIVER", DRIVER)
        .replace("MODE", mode)
        .replace("TOOLS", str(tools))
    )


def test_damon_tiering_on_612(tmp_path: Path) -> None:
    t = TOPOLOGIES["single"]
    work = tmp_path / "vm"
    # one vCPU: 6.12 has no goal check (it refuses goals: test_vm_linux7.py's goal check keeps two), and the
    # 6.12 `single` boot's DAMON view (test_vm_telemetry_damon) moves pages with one; a 2-vCPU guest beside
    # the unit tier used 114 s of QEMU CPU in CI against 51 s alone (docs/testing.md)
    check(run_guest(t, guest_script(work, t), kernel="6.12", workdir=work, timeout=1200), "6.12")


def check(res: GuestResult, series: str) -> None:
    """The host's assertions on the guest's files (``series`` names the fixture folder to record into)."""
    out = res.outdir
    report = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s"]
    assert res.returncode == 0, out_text(out, "driver.log", missing_ok=True) + res.stderr[-3000:]
    _keep(
        out,
        series,
        ["single-region-damon-idle", "single-region-damon-running", "single-region-damon-tiering"],
        res.kernel.release,
    )
    cxl = int(out_text(out, "cxl-node"))
    assert cxl > 0
    boot = _readback(out, "boot")
    assert boot["nr_kdamonds"] == "0"

    # -- DAMON_STAT (7.x starts it at boot; the kernel starts no kdamond beside it): refused, the fix named
    if series == "7.x":
        (stat_step,) = [s for s in out_json(out, "damon-stat-plan.json")["plan"]["steps"] if s["knob"] == "damon"]
        assert stat_step["action"] == "skip" and "damon_stat (kdamond pid" in stat_step["note"], stat_step
        assert "echo N > /sys/module/damon_stat/parameters/enabled" in stat_step["note"]

    # -- DAMON_RECLAIM starts exclusively too: the kernel refuses a sysfs kdamond beside it, and so does the plan
    kernel = out_json(out, "reclaim-module-kernel.json")
    assert kernel["state_on"] == "errno 16" and kernel["state"] == "off", kernel  # EBUSY
    (mod_step,) = [s for s in out_json(out, "reclaim-module-plan.json")["plan"]["steps"] if s["knob"] == "damon"]
    assert mod_step["action"] == "skip" and "damon_reclaim (kdamond pid" in mod_step["note"], mod_step
    assert "EBUSY" in mod_step["note"] and "echo N > /sys/module/damon_reclaim/parameters/enabled" in mod_step["note"]
    report.append(f"DAMON_RECLAIM on: a sysfs kdamond's state=on gave {kernel['state_on']}; the plan refused")

    # -- a kdamond someone else runs: refused, untouched
    assert out_text(out, "foreign-apply.rc").strip() == "2", out_text(out, "foreign-apply.err", missing_ok=True)
    assert "refused; nothing was changed" in out_text(out, "foreign-apply.err")
    plan = out_json(out, "foreign-plan.json")["plan"]
    (step,) = [s for s in plan["steps"] if s["knob"] == "damon"]
    assert step["action"] == "skip" and step["note"].startswith("refused: ") and "kdamond 0 (on" in step["note"]
    assert _readback(out, "foreign")["nr_kdamonds"] == "1"

    # -- tiering
    assert out_text(out, "apply.rc").strip() == "0", out_text(out, "apply.err", missing_ok=True)
    applied = _readback(out, "applied")
    assert applied["sysctl kernel.numa_balancing"] == "0" and applied["demotion_enabled"] in ("1", "true")
    assert applied["nr_kdamonds"] == "2"
    tree = out_text(out, "applied-tree.txt")
    assert "./0/state:on" in tree and "./1/state:on" in tree
    assert "./0/contexts/0/schemes/0/action:migrate_cold" in tree
    assert f"./0/contexts/0/schemes/0/target_nid:{cxl}" in tree
    assert "./1/contexts/0/schemes/0/action:migrate_hot" in tree
    assert out_text(out, "verify.rc").strip() == "0", out_text(out, "verify.json", missing_ok=True)
    start = out_json(out, "pages-start.json")
    trace = out_json(out, "pages-trace.json")
    last = trace[-1]
    cold = {int(k): v for k, v in last["cold"].items()}
    hot = {int(k): v for k, v in last["hot"].items()}
    report.append(f"cold helper 4 MiB, before apply: {start['cold']}; after {last['t']} s: {cold}")
    report.append(f"hot helper 1 MiB on node{cxl}, before apply: {start['hot']}; after {last['t']} s: {hot}")
    moved_at = next((p["t"] for p in trace if int(p["cold"].get(str(cxl), 0)) >= 0.9 * 1024), None)
    report.append(
        f"cold pages on the CXL node (>= 90 %) after {moved_at} s"
        + (" (the cold scheme's node_mem_free_bp goal is met in this guest)" if moved_at is None else "")
    )
    st = out_json(out, "status.json")
    rows = st["damon"]
    report.append(
        "DAMON stats: "
        + "; ".join(
            f"kdamond {r['kdamond']} {r['action']}: "
            f"applied {r['nr_applied']} ({r['sz_applied']} B), tried {r['nr_tried']}, qt_exceeds {r['qt_exceeds']}"
            for r in rows
        )
    )
    print("\n".join(report))
    assert sum(int(v) for v in start["cold"].values()) == 1024 and int(start["cold"].get("0", 0)) >= 0.9 * 1024
    # 6.16+ (7.x): inference-damon's cold scheme has the quota goal node_mem_free_bp 50 (demote while
    # DRAM has under 0.5 % free, mem_tier.sh); this guest's DRAM is mostly free, so the goal is met and
    # the kernel keeps the scheme's quota at zero: the cold pages stay.  Without goals (6.12) they move.
    free_goal = "./0/contexts/0/schemes/0/quotas/goals/0/target_metric:node_mem_free_bp" in tree
    if free_goal:
        assert cold.get(0, 0) >= 0.9 * 1024, ("the free-memory goal is met: nothing to demote", report)
    else:
        assert cold.get(cxl, 0) >= 0.9 * 1024, report
    # the hot direction worked on QEMU TCG too (254 of 256 pages back on DRAM after 20 s when first run)
    assert sum(hot.values()) == 256 and hot.get(0, 0) >= 0.5 * 256, report
    assert [r["owner"] for r in rows] == ["cxlctl", "cxlctl"]
    cold_row = next(r for r in rows if r["action"] == "migrate_cold")
    if not free_goal:
        # the kernel's own counter (sz_applied: what the scheme's action moved, damos_apply_scheme()) says the
        # scheme moved them, by the same 90 % bar as the placement above, not the whole 4 MiB, which the
        # kernel does not promise by any time (a 2x slower machine, 2026-12-07: 927 of 1,024 pages on the CXL
        # node, 3,981,312 B applied)
        assert cold_row["sz_applied"] >= 0.9 * (4 << 20) and cold_row["nr_applied"] > 0, report

    # -- drift, then revert
    assert out_text(out, "drift-verify.rc").strip() == "3"
    drift = out_json(out, "drift-verify.json")
    assert [c["setting"] for c in drift["checks"] if c["status"] == "drift"] == ["damon.kdamond0.state"]
    assert out_text(out, "revert.rc").strip() == "0", out_text(out, "revert.err", missing_ok=True)
    back = _readback(out, "reverted")
    assert back == boot, (back, boot)
    assert out_json(out, "after-revert-status.json")["damon"] == []

    # -- the goal statement 6.12 lacks: refused with a clear message, nothing written
    if series == "6.12":
        assert out_text(out, "goals-apply.rc").strip() == "2", out_text(out, "goals-apply.err", missing_ok=True)
        err = out_text(out, "goals-apply.err")
        assert "hot_on_dram needs the DAMON quota goal metric node_eligible_mem_bp, which Linux 7.2 added" in err, err
        assert "refused; nothing was changed" in err, err
        assert _readback(out, "goals") == boot
        print(f"6.12 refuses hot_on_dram: {err.strip().splitlines()[0]}")


def guest_script_61() -> str:
    """The guest side of the 6.1 check (DAMON unavailable): a check of test_vm_linux61's shared boot."""
    return _record_env() + GUEST_OLD.replace("DRIVER", DRIVER)


def check_61(res: GuestResult) -> None:
    """6.1 has no DAMON paddr: the plan says so and the rest of the profile applies and reverts."""
    out = res.outdir
    assert res.returncode == 0, out_text(out, "driver.log", missing_ok=True) + res.stderr[-3000:]
    _keep(out, "6.1", ["single-noregion-damon"], res.kernel.release)
    plan = out_json(out, "plan.json")["plan"]
    (d,) = [s for s in plan["steps"] if s["knob"] == "damon"]
    print(f"guest {res.kernel.release}, boot {res.boot_seconds} s: damon {d['action']}: {d['note']}")
    assert d["action"] == "unsupported" and "needs 6.11+ with CONFIG_DAMON_PADDR" in d["note"]
    assert out_text(out, "apply.rc").strip() == "0", out_text(out, "apply.err", missing_ok=True)
    assert _readback(out, "applied")["sysctl vm.swappiness"] == "10"
    assert _readback(out, "reverted") == _readback(out, "boot")


def hot_share_trace(trace: List[Dict[str, Any]], dram: int = 0) -> List[Tuple[float, float]]:
    """(seconds after apply, share of the hot helper's pages on DRAM) per sample of ``pages-trace.json``."""
    out = []
    for p in trace:
        hot = {int(k): int(v) for k, v in p["hot"].items()}
        total = sum(hot.values())
        out.append((float(p["t"]), hot.get(dram, 0) / total if total else 0.0))
    return out


def check_goals(res: GuestResult, goal: float = 0.70, band: float = 0.05) -> List[str]:
    """The ``hot_on_dram`` statement on a kernel with ``node_eligible_mem_bp`` (mode ``goals``).

    Converged: from some sample on, the hot set's share on DRAM stays at or above ``goal - band``
    (the statement is "at least"); its time is the first such sample's.  No ping-pong: once
    converged, the share never drops by more than ``band`` again, and the cold set never comes
    back to DRAM.  Returns the measured lines (printed with -s)."""
    out = res.outdir
    assert res.returncode == 0, out_text(out, "driver.log", missing_ok=True) + res.stderr[-3000:]
    assert out_text(out, "apply.rc").strip() == "0", out_text(out, "apply.err", missing_ok=True)
    tree = out_text(out, "applied-tree.txt")
    assert "./1/contexts/0/schemes/0/quotas/goals/0/target_metric:node_eligible_mem_bp" in tree, tree[-2000:]
    assert "./1/contexts/0/schemes/0/quotas/goals/0/target_value:7000" in tree
    trace = out_json(out, "pages-trace.json")
    cxl = int(out_text(out, "cxl-node"))
    shares = hot_share_trace(trace)
    start = out_json(out, "pages-start.json")
    sizes = out_json(out, "sizes.json")
    report = [
        f"guest {res.kernel.release}: hot_on_dram 70 %, hot {sizes['hot_mib']} MiB on node{cxl} / "
        f"cold {sizes['cold_mib']} MiB on node0; "
        f"before apply hot {start['hot']}, cold {start['cold']}",
        "hot share on DRAM (numa_maps): " + ", ".join(f"{t:.0f}s {s:.0%}" for t, s in shares),
        "kernel (kdamond 1 scheme 0): "
        + ", ".join(
            f"{p['t']:.0f}s {p['kernel']['1'].get('goal0')} q={p['kernel']['1'].get('effective_bytes')}"
            for p in trace[::5]
        ),
    ]
    conv = next((i for i in range(len(shares)) if all(s >= goal - band for _, s in shares[i:])), None)
    report.append(
        f"converged (share >= {goal - band:.0%} from then on) after {shares[conv][0]:.0f} s; final {shares[-1][1]:.0%}"
        if conv is not None
        else f"not converged in {shares[-1][0]:.0f} s; final {shares[-1][1]:.0%}"
    )
    # the kernel tunes the quota to the statement: it grows while the goal is unmet and shrinks once
    # met (quotas/effective_bytes; the goal's current_value file is not refreshed by the state commands
    # on 7.3.4 and reads 0).  Over the CXL node's ranges alone the kernel read the share as 0 and the
    # quota only grew (854500 -> 1101000 B with 511 of 512 hot pages on DRAM)
    quota = [int(p["kernel"]["1"].get("effective_bytes") or 0) for p in trace]
    report.append(f"hot scheme's tuned quota: peak {max(quota)} B, last {quota[-1]} B")
    print("\n".join(report))
    assert conv is not None, report
    assert quota[-1] <= max(quota) // 10, ("the kernel never saw the goal met: the quota did not shrink", report)
    peak = shares[conv][1]
    for t, s in shares[conv:]:
        assert s >= peak - band or s >= goal - band, (t, s, report)
        peak = max(peak, s)
    cold = [int(p["cold"].get("0", 0)) for p in trace]
    lowest = min(cold)
    assert cold[-1] <= lowest + band * 1024, ("cold pages came back to DRAM", cold)
    assert out_text(out, "revert.rc").strip() == "0", out_text(out, "revert.err", missing_ok=True)
    assert _readback(out, "reverted") == _readback(out, "boot")
    return report
