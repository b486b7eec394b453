"""Guest side of test_vm_probe: ``cxlctl probe`` and what uses its figures, in one interpreter.

``$PY probe_guest_driver.py`` inside the VM once the regions are online: ``probe --quick
--buffer-mib 4 --json`` (emulated CXL memory is ~300x slower than the guest's DRAM under TCG,
so a few MiB), ``status --json``, ``tune plan`` of a profile with ``weights = "measured"`` and of
``inference-bandwidth`` (whose weights fall back to the measured figures where the kernel has
none), and ``doctor --json``.  The helper is compiled in the guest (its CPU is not the host's)
into ``$OUT/cache``.  Results go to ``$OUT`` as LABEL.json/.err/.rc, and the last-level caches the
guest's CPUs see (``cpuN/cache/indexK``) to ``llc.json``, so the host checks the sizing rule against
the guest's own tree.  With ``RECORD=NAME`` in the environment (``CXLCTL_RECORD_FIXTURES=1`` on the
host: ``scripts/record-fixtures.sh probe``) the guest is recorded into ``$OUT/NAME`` (its CPUs'
caches, which the probe sizes by, included).
"""

from __future__ import annotations

import json
import os
from typing import Dict

from tests.vm.guest import OUT, cx, get, log, peers

MEASURED = """
summary = "VM test: weights from cxlctl probe's stored figures"
[knobs.weighted_interleave]
weights = "measured"
nodes = ["dram", "cxl"]
reason = "VM test"
"""


def caches() -> Dict[str, Dict[str, str]]:
    """Every CPU's cache indexes: level, size, shared_cpu_list, as the guest's kernel shows them."""
    out: Dict[str, Dict[str, str]] = {}
    base = "/sys/devices/system/cpu"
    for cpu in sorted(x for x in os.listdir(base) if x[3:].isdigit() and x.startswith("cpu")):
        d = f"{base}/{cpu}/cache"
        for idx in sorted(os.listdir(d)) if os.path.isdir(d) else ():
            if idx.startswith("index"):
                out[f"{cpu}/{idx}"] = {k: get(f"{d}/{idx}/{k}") for k in ("level", "size", "shared_cpu_list")}
    return out


def main() -> None:
    os.environ["CXLCTL_CACHE_DIR"] = os.path.join(OUT, "cache")
    with open(os.path.join(OUT, "llc.json"), "w") as f:
        json.dump(caches(), f)
    cx("probe", "probe", "--quick", "--buffer-mib", "4", "--json")
    cx("status", "status", "--json")
    os.makedirs("/etc/cxlctl/profiles", exist_ok=True)
    with open("/etc/cxlctl/profiles/vm-measured.toml", "w") as f:
        f.write(MEASURED.strip() + "\n")
    cx("plan-measured", "tune", "plan", "vm-measured", "--json")
    cx("plan-bandwidth", "tune", "plan", "inference-bandwidth", "--json")
    cx("doctor", "doctor", "--json")
    if os.environ.get("RECORD"):
        tree = os.path.join(OUT, os.environ["RECORD"])
        cx("record", "record", "--include-process-data", tree)
        peers(os.path.join(tree, "peers"))  # the real tools' view, as every recorded tree carries
    os.remove("/var/lib/cxlctl/probe.json")  # docs/probe.md: removing the file forgets the figures
    cx("status-after", "status", "--json")
    log("done")
    with open(os.path.join(OUT, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
