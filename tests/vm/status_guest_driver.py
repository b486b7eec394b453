"""Guest side of test_vm_status: every cxlctl view of the host, in ONE interpreter.

Under TCG each Python cold start costs many seconds, so instead of four
`python -m cxlctl` runs per snapshot this calls the real entry point
(`cxlctl.__main__.main`, fast path and typer path alike) in-process.
Usage: python status_guest_driver.py LABEL OUTDIR
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import List

from tests.vm.guest import capture


def run(argv: List[str], path: str) -> int:
    """cxlctl ARGV in this process; its stdout then its stderr in PATH."""
    rc, out, err = capture(argv)
    with open(path, "w") as f:
        f.write(out + err)
    return rc


def snap(label: str, out: str) -> None:
    os.environ["COLUMNS"] = "160"
    # Record onto the guest's tmpfs: hundreds of small writes through the 9p
    # results folder cost minutes under TCG.  Only the record's own status
    # document is copied out; the replay runs here, on the guest's copy.
    rec = tempfile.mkdtemp(prefix=f"cxlctl-rec-{label}-")
    shutil.rmtree(rec)
    for argv, name in (
        (["status", "--json"], f"{label}-status.json"),
        (["status"], f"{label}-status.txt"),
        (["record", rec], f"{label}-record.log"),
        (["--root", rec, "status", "--json"], f"{label}-replay.json"),
    ):
        rc = run(argv, os.path.join(out, name))
        if rc != 0:
            raise SystemExit(f"cxlctl {' '.join(argv)} exited {rc}")
    os.makedirs(os.path.join(out, f"{label}-rec"), exist_ok=True)
    shutil.copy(os.path.join(rec, "cxlctl-status.json"), os.path.join(out, f"{label}-rec", "cxlctl-status.json"))


if __name__ == "__main__":
    snap(sys.argv[1], sys.argv[2])
