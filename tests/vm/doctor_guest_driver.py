"""Guest side of test_vm_doctor (and the recorder of the ``*-doctor`` fixtures): ONE interpreter.

Usage: python doctor_guest_driver.py SCENARIO OUTDIR, SCENARIO ``6.12``, ``6.1`` or ``7.x``.

Each step runs ``cxlctl doctor --json`` in-process (cold starts cost seconds
under TCG) and writes ``OUTDIR/<step>.json`` ({"rc", "doc", "shell"}); the
faults are made with the peer tools (daxctl, modprobe, sysfs writes), the way
an operator's host gets into those states.  With ``CXLCTL_RECORD_FIXTURES=1`` in
its environment, records (``cxlctl record``) go to ``OUTDIR/fixtures/<name>/`` with the
peers' output in ``peers/``, and the host test copies them to ``fixtures/linux-<series>/``.

6.12: clean host with a region onlined (no failures), then in the same boot:
region left unonlined, the fix applied, DAX device in devdax, kmem unloaded,
auto_online_blocks=offline with memory offline, memory onlined movable, the fix.
6.1: no region can be made: doctor must say "no RAM regions on this kernel".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

from tests.vm.guest import capture, peers


def cxlctl(argv: List[str]) -> Dict[str, Any]:
    rc, out, err = capture(argv)
    return {"rc": rc, "stdout": out, "stderr": err}


def sh(cmd: str) -> Dict[str, Any]:
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    return {"cmd": cmd, "rc": p.returncode, "out": (p.stdout + p.stderr)[-2000:]}


class Steps:
    def __init__(self, out: str) -> None:
        self.out = out
        self.shell: List[Dict[str, Any]] = []

    def run(self, cmd: str) -> None:
        r = sh(cmd)
        self.shell.append(r)
        sys.stderr.write(f"doctor-driver: {cmd} -> {r['rc']} {r['out'][-300:]}\n")

    def cxlctl(self, *argv: str) -> None:
        """A cxlctl command (in-process) that makes or fixes a state, logged as the shell steps are."""
        r = cxlctl(list(argv))
        self.shell.append(
            {"cmd": " ".join(("cxlctl",) + argv), "rc": r["rc"], "out": (r["stdout"] + r["stderr"])[-2000:]}
        )

    def doctor(self, name: str, *extra: str) -> None:
        r = cxlctl(["doctor", "--json", *extra])
        try:
            doc = json.loads(r["stdout"])
        except ValueError:
            doc = None
        human = cxlctl(["doctor", *extra])
        with open(os.path.join(self.out, f"{name}.json"), "w") as f:
            json.dump({"rc": r["rc"], "doc": doc, "stderr": r["stderr"][-3000:], "shell": self.shell}, f, indent=1)
        with open(os.path.join(self.out, f"{name}.txt"), "w") as f:
            f.write(human["stdout"] + human["stderr"])
        self.shell = []

    def record(self, name: str) -> None:
        """cxlctl record onto the guest's tmpfs, copied out once, with the peers beside it; only when
        recording fixtures (``CXLCTL_RECORD_FIXTURES=1``, exported by test_vm_doctor.recording)."""
        if os.environ.get("CXLCTL_RECORD_FIXTURES") != "1":
            return
        tmp = tempfile.mkdtemp(prefix="doctor-rec-")
        shutil.rmtree(tmp)
        r = cxlctl(["record", "--include-process-data", tmp])
        if r["rc"] != 0:
            raise SystemExit(f"cxlctl record failed: {r}")
        dest = os.path.join(self.out, "fixtures", name)
        shutil.copytree(tmp, dest, symlinks=True)
        peers(os.path.join(dest, "peers"))
        with open("/proc/modules") as src, open(os.path.join(dest, "peers", "proc-modules.txt"), "w") as f:
            f.write(src.read())


def scenario_612(s: Steps) -> None:
    s.record("single-noregion-doctor")
    s.doctor("noregion")
    s.cxlctl("region", "create", "--all")
    s.record("single-region-doctor")
    s.doctor("clean")
    s.doctor("clean-vllm", "--for", "vllm")
    # a region left unonlined
    s.run("daxctl offline-memory dax0.0")
    s.doctor("unonlined")
    s.cxlctl("dax", "reconfigure", "dax0.0", "--mode", "system-ram", "--zone", "normal")
    s.doctor("unonlined-fixed")
    # a DAX device in devdax
    s.cxlctl("dax", "reconfigure", "dax0.0", "--mode", "devdax", "--force")
    s.doctor("devdax")
    # a module unloaded (kmem: nothing uses it while the device is in devdax)
    s.run("modprobe -r kmem")
    s.doctor("module-unloaded")
    s.run("modprobe kmem")
    # auto_online_blocks=offline, then the device back to system-ram: its memory stays offline
    s.run("echo offline > /sys/devices/system/memory/auto_online_blocks")
    s.run(
        "daxctl reconfigure-device --mode=system-ram --no-online dax0.0 || "
        "{ echo dax0.0 > /sys/bus/dax/drivers/device_dax/unbind; echo dax0.0 > /sys/bus/dax/drivers/kmem/new_id; "
        "echo dax0.0 > /sys/bus/dax/drivers/kmem/bind; }; sleep 1; cat /sys/devices/system/node/node1/memory*/state | sort | uniq -c"
    )
    s.doctor("auto-offline")
    # onlined movable
    s.run(
        "daxctl online-memory --movable dax0.0 || for b in $(ls -d /sys/devices/system/node/node1/memory*); do echo online_movable > $b/state; done"
    )
    s.run("echo online > /sys/devices/system/memory/auto_online_blocks")
    s.doctor("movable")
    s.cxlctl("dax", "reconfigure", "dax0.0", "--mode", "system-ram", "--zone", "normal")
    s.doctor("movable-fixed")


def scenario_7x(s: Steps) -> None:
    """Linux 7.x (Debian 13's packaging): the config is only at /usr/lib/modules/VER/config
    (nothing is mounted at /boot); the clean host, before and after a region.  The fault
    scenarios test doctor's own logic and run on 6.12 only (docs/testing.md)."""
    s.record("single-noregion-doctor")
    s.doctor("noregion")
    s.cxlctl("region", "create", "--all")
    s.record("single-region-doctor")
    s.doctor("clean")
    s.doctor("clean-vllm", "--for", "vllm")


def scenario_61(s: Steps) -> None:
    s.record("single-noregion-doctor")
    s.doctor("linux61")


def main() -> None:
    scenario, out = sys.argv[1], sys.argv[2]
    os.environ["COLUMNS"] = "80"
    os.makedirs(out, exist_ok=True)
    s = Steps(out)
    {"6.12": scenario_612, "6.1": scenario_61, "7.x": scenario_7x}[scenario](s)
    with open(os.path.join(out, "done"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
