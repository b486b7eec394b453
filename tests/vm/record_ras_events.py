"""Record real CXL RAS event streams (and the tree they map onto) from a 6.12 guest.

Why: ``cxlctl events`` parses the kernel's ``cxl`` trace events; its unit tests
replay streams a real kernel wrote for real (QEMU-injected) device events, and
map them onto the sysfs tree recorded in the same boot.

One boot of ``hb2x2``: a 2-way region on window 1 (``cxl-vmem0`` +
``cxl-vmem1``), ``cxlctl record`` of that state to
``fixtures/linux-6.12/hb2x2-region-ras/``, then for each step of
``tests/vm/ras_steps.py`` the host injects over QMP and the guest copies what
its private trace instance received to ``fixtures/linux-6.12/events/<step>.txt``.
The event formats (``events/cxl/*/format``) go to ``events/formats/``.

Run as root: ``.venv/bin/python -m tests.vm.record_ras_events``.
"""

from __future__ import annotations

import shutil
import sys

from tests.vm.harness import REPO, run_guest
from tests.vm.ras_steps import TOPOLOGY, guest_session, host_driver
from tests.vm.record_fixtures import SNAP

DEST = REPO / "fixtures" / "linux-6.12"
TREE = "hb2x2-region-ras"


def guest_script() -> str:
    return SNAP + guest_session(
        before_steps=f"snap {TREE} || exit 2",
        after_steps="""
"$PY" -m cxlctl events --json > "$OUT/collect.jsonl" 2> "$OUT/collect.err"
"$PY" -m cxlctl health --json > "$OUT/health.json" 2> "$OUT/health.err"
"$PY" -m cxlctl events --stop
""",
    )


def main() -> int:
    r = run_guest(TOPOLOGY, guest_script(), kernel="6.12", timeout=900, qmp=host_driver())
    print(r.stdout)
    print(r.stderr, file=sys.stderr)
    if r.returncode != 0:
        print(f"guest failed ({r.returncode}); $OUT={r.outdir}", file=sys.stderr)
        return 1
    ev = DEST / "events"
    if ev.exists():
        shutil.rmtree(ev)
    shutil.copytree(r.outdir / "kernel", ev)
    shutil.copytree(r.outdir / "formats", ev / "formats")
    shutil.copy(r.outdir / "facts.txt", ev / "facts.txt")
    for err in r.outdir.glob("qmp-*.err"):
        shutil.copy(err, ev / err.name)
    tree = DEST / TREE
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(r.outdir / TREE, tree, symlinks=True)
    print(f"boot {r.boot_seconds} s, wall {r.wall_seconds} s; $OUT={r.outdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
