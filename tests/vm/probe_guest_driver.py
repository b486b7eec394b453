"""Guest side of test_vm_probe: ``cxlctl probe`` and what uses its figures, in one interpreter.

``$PY probe_guest_driver.py`` inside the VM once the regions are online: ``probe --quick
--buffer-mib 4 --json`` (emulated CXL memory is ~300x slower than the guest's DRAM under TCG,
so a few MiB), ``status --json``, ``tune plan`` of a profile with ``weights = "measured"`` and of
``inference-bandwidth`` (whose weights fall back to the measured figures where the kernel has
none), and ``doctor --json``.  The helper is compiled in the guest (its CPU is not the host's)
into ``$OUT/cache``.  Results go to ``$OUT`` as LABEL.json/.err/.rc.
"""

from __future__ import annotations

import os

from tests.vm.guest import OUT, cx, log

MEASURED = """
summary = "VM test: weights from cxlctl probe's stored figures"
[knobs.weighted_interleave]
weights = "measured"
nodes = ["dram", "cxl"]
reason = "VM test"
"""


def main() -> None:
    os.environ["CXLCTL_CACHE_DIR"] = os.path.join(OUT, "cache")
    cx("probe", "probe", "--quick", "--buffer-mib", "4", "--json")
    cx("status", "status", "--json")
    os.makedirs("/etc/cxlctl/profiles", exist_ok=True)
    with open("/etc/cxlctl/profiles/vm-measured.toml", "w") as f:
        f.write(MEASURED.strip() + "\n")
    cx("plan-measured", "tune", "plan", "vm-measured", "--json")
    cx("plan-bandwidth", "tune", "plan", "inference-bandwidth", "--json")
    cx("doctor", "doctor", "--json")
    os.remove("/var/lib/cxlctl/probe.json")  # docs/probe.md: removing the file forgets the figures
    cx("status-after", "status", "--json")
    log("done")
    with open(os.path.join(OUT, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
