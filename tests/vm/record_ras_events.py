"""Record real CXL RAS event streams (and the tree they map onto) from a 6.12 or 7.x guest.

Why: ``cxlctl events`` parses the kernel's ``cxl`` trace events; its unit tests
replay streams a real kernel wrote for real (QEMU-injected) device events, and
map them onto the sysfs tree recorded in the same boot.

One boot of the RAS VM proof (``tests/vm/test_vm_ras.py``: ``hb2x2``, a 2-way
region on ``cxl-vmem0`` + ``cxl-vmem1``, the injections of
``tests/vm/ras_steps.py``), with ``cxlctl record`` of the tree right after the
region exists.  What the kernel wrote is kept whatever cxlctl made of it
(the streams are the kernel's); the VM test's checks then run on the same
results and the exit status says whether they passed:

* ``fixtures/linux-<series>/hb2x2-region-ras/``: the record (with peers/);
* ``fixtures/linux-<series>/events/<step>.txt``: what the guest's own trace
  instance (all ``cxl`` events on) received for each step, ``#`` header
  lines left out; ``<step>.dmesg`` the kernel log's tail after it;
* ``events/formats/``: the kernel's ``events/cxl/*/format`` files;
* ``events/facts.txt``: memdev of each QEMU device, region, base, size,
  block size and node, read from the guest's sysfs.

Run as root through the one recording route: ``scripts/record-fixtures.sh ras [--kernel 6.12|7.x]``
(7.x's streams carry the fields 6.13+ added: ``hpa_alias0``, ``region_uuid``, ...).
"""

from __future__ import annotations

import argparse
import shutil
from typing import List, Optional

from tests.fixture_status import install
from tests.vm.harness import REPO
from tests.vm.record_fixtures import SNAP
from tests.vm.test_vm_ras import boot, check

TREE = "hb2x2-region-ras"


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kernel", default="6.12", choices=("6.12", "7.x"), help="kernel series (default 6.12)")
    a = ap.parse_args(argv)
    dest = REPO / "fixtures" / f"linux-{a.kernel}"
    r = boot(prelude=SNAP + f"snap {TREE} || exit 2\n", kernel=a.kernel)
    ev = dest / "events"
    if ev.exists():
        shutil.rmtree(ev)
    shutil.copytree(r.outdir / "kernel", ev)
    shutil.copytree(r.outdir / "formats", ev / "formats")
    shutil.copy(r.outdir / "facts.txt", ev / "facts.txt")
    for err in r.outdir.glob("qmp-*.err"):
        shutil.copy(err, ev / err.name)
    tree = dest / TREE
    install(r.outdir / TREE, tree)
    print(f"recorded {ev} and {tree}; boot {r.boot_seconds} s, wall {r.wall_seconds} s; $OUT={r.outdir}")
    try:
        check(r)
    except AssertionError as e:
        print(f"the VM test's checks FAILED on this run: {e!r}")
        return 1
    print("the VM test's checks passed on this run")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
