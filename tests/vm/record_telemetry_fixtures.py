"""Record the telemetry fixtures: the end state of the telemetry scenario, per kernel (one boot each).

Why: ``cxlctl stat``'s unit tests replay trees in which pages really were
demoted to a CXL node by a real kernel, and a 6.1 tree that lacks counters
6.12 has.  The scenario is :mod:`tests.vm.telemetry_guest` (the same as
``test_vm_telemetry``): a C helper in cgroup ``/cxltel`` with 16 MiB anonymous
and a 2 MiB ``/dev/shm`` offload file, ``memory.reclaim`` of 12M, then ``cxlctl
record``.  Output:

* ``fixtures/linux-6.12/single-region-telemetry/`` (region created, demotion on,
  pages demoted to the CXL node);
* ``fixtures/linux-6.1/single-noregion-telemetry/`` (6.1 cannot create RAM
  regions: no CXL node, no demotion target; the counters this kernel has).

Each tree gets ``peers/`` with the kernel's own files copied right after the
last ``stat`` (``D.*``: node vmstat, /proc/vmstat, memory.numa_stat,
memory.stat, the helper's numa_maps, its PID) and ``recorded.txt``.

Run as root through the one recording route: ``scripts/record-fixtures.sh telemetry [--kernel 6.12]``.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional

from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, HarnessError, kernel, run_guest
from tests.vm.record_fixtures import package_of, series_of
from tests.vm.telemetry_guest import ANON_MIB, CGROUP, RECLAIM, SHM_FILE, SHM_MIB, build_helper, script

FIXTURES = REPO / "fixtures"
PEER_FILES = ("D.node0.vmstat", "D.cxl.vmstat", "D.vmstat", "D.numa_stat", "D.memory.stat", "D.numa_maps", "helper.pid")


def record_one(series: str) -> str:
    t = TOPOLOGIES["single"]
    k = kernel(series)
    work = Path(tempfile.mkdtemp(prefix=f"telemetry-fixture-{series}-"))
    helper = build_helper(work / "tools")
    region = t.widest
    assert region is not None
    # 6.1 has no create_ram_region: the scenario then runs without a region
    create = region.create_command(t) if series != "6.1" else ""
    r = run_guest(t, script(helper, create, promote=False), kernel=k, workdir=work, timeout=1200)
    if r.returncode != 0:
        raise HarnessError(f"{k.release}: guest script exited {r.returncode}\n{r.stderr[-3000:]}")
    src = r.outdir / "record"
    if not (src / "cxlctl-record.json").exists():
        raise HarnessError(f"{k.release}: no record made: {(r.outdir / 'record.log').read_text(errors='replace')}")
    name = "single-region-telemetry" if create else "single-noregion-telemetry"
    dst = FIXTURES / f"linux-{series if series == '7.x' else series_of(k.release)}" / name
    install(src, dst)
    peers = dst / "peers"
    peers.mkdir(exist_ok=True)
    for f in PEER_FILES:
        if (r.outdir / f).exists():
            shutil.copy(r.outdir / f, peers / f)
    (peers / "recorded.txt").write_text(
        "\n".join(
            [
                f"kernel: {k.release} ({package_of(k.release)})",
                f"recorded: {datetime.date.today().isoformat()} by tests/vm/record_telemetry_fixtures.py --kernel {series}",
                f"topology: single: {t.description}",
                f"region: {'created with ' + create if create else 'none (this kernel cannot create RAM regions)'}",
                f"scenario: helper in cgroup {CGROUP}: {ANON_MIB} MiB anonymous + {SHM_MIB} MiB {SHM_FILE}; "
                f"demotion_enabled true; echo {RECLAIM} > memory.reclaim; then cxlctl record",
                f"boot {r.boot_seconds:.0f} s, wall {r.wall_seconds:.0f} s",
            ]
        )
        + "\n"
    )
    return f"{dst.relative_to(REPO)}: boot {r.boot_seconds:.0f} s, wall {r.wall_seconds:.0f} s"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kernel", action="append", help="kernel series (default: 6.12 and 6.1)")
    a = ap.parse_args(argv)
    summary = [record_one(s) for s in a.kernel or ["6.12", "6.1"]]
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
