"""Record ``fixtures/linux-<series>/switch2-devdax/``: a devdax region beside a system-ram region (one boot).

Why: the devdax KV backends (``cxlctl launch lmcache``, ``--devdax --mooncake``)
and the fleet labels need a tree where a real DAX device is bound to
``device_dax`` — with the alignment, size and driver link the kernel gives it —
next to a CXL NUMA node.  The guest creates both regions with ``cxlctl region
create`` (the same commands tests/vm/test_vm_fleet.py runs), then records the
tree and the peer tools' output (tests/vm/record_fixtures.py's ``snap``).

Run as root through the one recording route: ``scripts/record-fixtures.sh fleet [--kernel 6.12|7.x]``.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
from typing import List, Optional

from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, HarnessError, kernel, run_guest
from tests.vm.record_fixtures import SNAP, package_of, tool_version

NAME = "switch2-devdax"
REGIONS = [
    "region create --ways 1 --online devdax --json",
    "region create --ways 1 --online system-ram --json",
]


def guest_script() -> str:
    lines = [SNAP]
    for i, args in enumerate(REGIONS):
        lines.append(f'"$PY" -m cxlctl {args} > "$OUT/create{i}.json" 2> "$OUT/create{i}.err" || exit 3')
    lines += ["udevadm settle --timeout=30 || true", f"snap {NAME} || exit 2"]
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kernel", default="6.12", choices=("6.12", "7.x"), help="kernel series (default 6.12)")
    a = ap.parse_args(argv)
    t = TOPOLOGIES["switch2"]
    k = kernel(a.kernel)
    r = run_guest(t, guest_script(), kernel=k, timeout=900)
    if r.returncode != 0:
        raise HarnessError(f"guest script exited {r.returncode}\n{r.stderr[-3000:]}")
    src = r.outdir / NAME
    dst = REPO / "fixtures" / f"linux-{a.kernel}" / NAME
    install(src, dst)
    for i in range(len(REGIONS)):
        shutil.copy(r.outdir / f"create{i}.json", dst / "peers" / f"region-create{i}.json")
    about = [
        f"kernel: {k.release} ({package_of(k.release)})",
        f"qemu: {tool_version(['qemu-system-x86_64', '--version'])}",
        f"recorded: {datetime.date.today().isoformat()} by tests/vm/record_fleet.py",
        f"topology: switch2: {t.description}",
        "regions: " + "; ".join(f"cxlctl {a}" for a in REGIONS) + " (their JSON in region-create*.json)",
    ]
    (dst / "peers" / "recorded.txt").write_text("\n".join(about) + "\n")
    print(f"{dst.relative_to(REPO)}: boot {r.boot_seconds:.0f} s, wall {r.wall_seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
