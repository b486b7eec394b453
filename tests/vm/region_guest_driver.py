"""Guest side of tests/vm/test_vm_region.py: ``$PY region_guest_driver.py SCENARIO`` inside the VM.

Every cxlctl command runs in this one process through ``cxlctl.cli.run`` (a
cold ``python -m cxlctl`` costs 30-50 s under TCG).  Around the commands the
driver records what the real tools say — ``cxl list``, ``daxctl list``,
``numactl -H`` — and the raw sysfs state of every region and decoder, so the
host can check each step against the kernel.  Everything lands in
``$OUT/steps.json`` (written after every step, so a crash keeps the rest):
a list of ``{label, args, env, rc, stdout, stderr, seconds, state}``.

Scenarios (one per boot): ``hb2x2``, ``switch2``, ``hb2``, ``old-kernel``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from tests.vm.guest import OUT, capture, lib

CXL = "/sys/bus/cxl/devices"
STEPS: List[Dict[str, Any]] = []


def sh(cmd: str) -> str:
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    return p.stdout.strip()


def sh_rc(cmd: str) -> Dict[str, Any]:
    p = lib(cmd)
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def jload(text: str) -> Any:
    try:
        return json.loads(text) if text.strip() else []
    except ValueError:
        return {"unparsable": text[:2000]}


def read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def state() -> Dict[str, Any]:
    """What the kernel and the peer tools say right now."""
    names = sorted(os.listdir(CXL))
    regions = {}
    for r in (n for n in names if re.fullmatch(r"region\d+", n)):
        b = f"{CXL}/{r}"
        ways = int(read(f"{b}/interleave_ways") or 0)
        regions[r] = {
            "root_decoder": os.path.basename(os.path.dirname(os.path.realpath(b))),
            "size": read(f"{b}/size"),
            "interleave_ways": ways,
            "interleave_granularity": read(f"{b}/interleave_granularity"),
            "commit": read(f"{b}/commit"),
            "resource": read(f"{b}/resource"),
            "targets": [read(f"{b}/target{i}") for i in range(ways)],
            "driver": os.path.basename(os.readlink(f"{b}/driver")) if os.path.islink(f"{b}/driver") else None,
        }
    decoders = {}
    for d in (n for n in names if n.startswith("decoder")):
        b = f"{CXL}/{d}"
        decoders[d] = {
            k: read(f"{b}/{k}")
            for k in (
                "size",
                "start",
                "interleave_ways",
                "interleave_granularity",
                "target_list",
                "region",
                "mode",
                "dpa_size",
                "dpa_resource",
                "locked",
            )
            if os.path.exists(f"{b}/{k}")
        }
    ports = {}
    for p in (n for n in names if re.fullmatch(r"(port|endpoint)\d+", n)):
        ports[p] = read(f"{CXL}/{p}/decoders_committed")
    return {
        "regions": regions,
        "decoders": decoders,
        "decoders_committed": ports,
        "cxl_list_R": jload(sh("cxl list -R -T 2>/dev/null")),
        "cxl_list_D": jload(sh("cxl list -D 2>/dev/null")),
        "daxctl": jload(sh("daxctl list 2>/dev/null")),
        "numactl": sh("numactl -H"),
        "has_memory": read("/sys/devices/system/node/has_memory"),
        "auto_online_blocks": read("/sys/devices/system/memory/auto_online_blocks"),
        "dax_devices": sorted(os.listdir("/sys/bus/dax/devices")) if os.path.isdir("/sys/bus/dax/devices") else [],
    }


def save() -> None:
    with open(f"{OUT}/steps.json", "w") as f:
        json.dump(STEPS, f, indent=1)


def cx(label: str, *args: str, env: Optional[Dict[str, str]] = None, snap: bool = True) -> Dict[str, Any]:
    """One cxlctl command in this process; then the state after it (a step of $OUT/steps.json)."""
    t0 = time.monotonic()
    run_env = env
    if env and any(k.startswith("CXLCTL_TEST_") for k in env):
        # the hooks act on the live (guest) host only with the flag and the root-owned mark
        # (cxlctl.hostio.testhooks): this guest is a test machine
        open("/run/cxlctl-test-hooks", "a").close()
        run_env = {**env, "CXLCTL_TEST_HOOKS": "1"}
    rc, out, err = capture(list(args), run_env)
    step = {
        "label": label,
        "args": list(args),
        "env": env or {},
        "rc": rc,
        "stdout": out,
        "stderr": err,
        "seconds": round(time.monotonic() - t0, 1),
    }
    if snap:
        sh("udevadm settle --timeout=20")
        step["state"] = state()
    STEPS.append(step)
    save()
    return step


def note(label: str, **data: Any) -> None:
    STEPS.append({"label": label, "rc": 0, **data})
    save()


def created(step: Dict[str, Any]) -> Dict[str, Any]:
    if step["rc"] != 0:
        raise SystemExit(f"{step['label']} failed: {step['stderr']}")
    d = json.loads(step["stdout"])
    assert isinstance(d, dict)
    region = d["regions"][0]
    assert isinstance(region, dict)
    return region


def plan_of(step: Dict[str, Any]) -> Dict[str, Any]:
    p = json.loads(step["stdout"])["plans"][0]
    assert isinstance(p, dict)
    return p


# --------------------------------------------------------------------------- scenarios


def fault_sweep(args: List[str]) -> None:
    """Fail the K-th programming write for K = 1, 2, ... until a create succeeds; then remove it."""
    for k in range(1, 40):
        s = cx(f"fault-{k}", "region", "create", *args, "--json", env={"CXLCTL_TEST_FAULT": f"{k}:EIO"})
        if s["rc"] == 0:
            r = created(s)
            cx("fault-done-destroy", "region", "destroy", r["region"], "--force", "--json")
            return


def hb2x2(zone: str = "normal") -> None:
    """``zone``: where the system-ram regions that are destroyed again are onlined.  On 7.x
    ``movable``: there the kernel puts unmovable pages on a CXL node's ZONE_NORMAL memory at
    once (44 KiB on its first block, seen on 7.3.4), so no such region can be offlined again;
    ``normal_last`` then shows what ``destroy --force`` does about that."""
    z = ["--zone", zone]
    cx("before", "status", "--json")
    p4 = plan_of(cx("plan4", "region", "plan", "--ways", "4", "--json", snap=False))
    # 1) 4-way, memdevs given in reverse of the planned order
    r4 = created(cx("create4", "region", "create", "-m", ",".join(reversed(p4["targets"])), *z, "--json"))
    dax = r4["dax"][0]["chardev"]
    cx("status4", "status", "--json", snap=False)
    cx("devdax-refused", "dax", "reconfigure", dax, "--mode", "devdax", "--json")
    cx("devdax", "dax", "reconfigure", dax, "--mode", "devdax", "--force", "--json")
    if zone == "normal":
        cx("ram-movable", "dax", "reconfigure", dax, "--mode", "system-ram", "--zone", "movable", "--json")
        cx("ram-normal", "dax", "reconfigure", dax, "--mode", "system-ram", "--zone", "normal", "--json")
    else:  # leaving ZONE_NORMAL needs its blocks offlined: not on 7.x (above); normal_last tries it
        cx("ram-movable", "dax", "reconfigure", dax, "--mode", "system-ram", "--zone", "movable", "--json")
    cx("destroy4-refused", "region", "destroy", r4["region"], "--json")
    cx("destroy4", "region", "destroy", r4["region"], "--force", "--json")
    # 2) 2-way across the bridges, movable
    r2 = created(
        cx("create2", "region", "create", "--ways", "2", "--decoder", "decoder0.0", "--zone", "movable", "--json")
    )
    cx("destroy2", "region", "destroy", r2["region"], "--force", "--json")
    # 3) two regions at once: 2-way inside bridge A (window 1), 1-way devdax on bridge B (window 2)
    ra = created(cx("create21", "region", "create", "--ways", "2", "--decoder", "decoder0.1", *z, "--json"))
    rb = created(
        cx("create1", "region", "create", "--ways", "1", "--decoder", "decoder0.2", "--online", "devdax", "--json")
    )
    cx("destroy1", "region", "destroy", rb["region"], "--json")
    cx("destroy21", "region", "destroy", ra["region"], "--force", "--json")
    # 4) address order: a region in window 1 on bridge A, then window 0 would sit below it on A
    ra = created(
        cx("hpa-first", "region", "create", "--ways", "1", "--decoder", "decoder0.1", "--online", "devdax", "--json")
    )
    used = ra["targets"][0]
    others = [m for m in sorted(os.listdir(CXL)) if re.fullmatch(r"mem\d+", m) and m != used]
    pairs = [f"{a},{b}" for i, a in enumerate(others) for b in others[i + 1 :]]
    for pr in pairs:
        s = cx(f"hpa-plan-{pr}", "region", "plan", "-m", pr, "--decoder", "decoder0.0", "--json", snap=False)
        if "HPA order" not in s["stderr"]:
            continue
        a, b = pr.split(",")
        # what the kernel itself says, through the plain shell helper (no planner)
        k = sh_rc(f"R=$(create_ram_region decoder0.0 8192 {a} {b}) && {{ echo created $R; destroy_region $R; }}")
        note(f"hpa-kernel-{pr}", kernel=k, plan_stderr=s["stderr"], dmesg=sh("dmesg | tail -n 15"))
    cx("hpa-destroy", "region", "destroy", ra["region"], "--json")
    # 5) destroy order: two regions sharing bridge A
    ra = created(
        cx("order-a", "region", "create", "--ways", "1", "--decoder", "decoder0.1", "--online", "devdax", "--json")
    )
    rb = created(
        cx("order-b", "region", "create", "--ways", "1", "--decoder", "decoder0.1", "--online", "devdax", "--json")
    )
    cx("order-a-refused", "region", "destroy", ra["region"], "--json")
    cx("order-b-destroy", "region", "destroy", rb["region"], "--json")
    cx("order-a-destroy", "region", "destroy", ra["region"], "--json")
    # 6) --all: the widest region there is
    al = created(cx("all", "region", "create", "--all", *z, "--json"))
    cx("all-destroy", "region", "destroy", al["region"], "--force", "--json")
    # 7) requests the kernel rejects half-way: nothing may remain
    cx("tamper-swap", "region", "create", "--ways", "4", "--json", env={"CXLCTL_TEST_REGION_TAMPER": "swap-last"})
    cx(
        "tamper-oversize",
        "region",
        "create",
        "--ways",
        "2",
        "--decoder",
        "decoder0.0",
        "--json",
        env={"CXLCTL_TEST_REGION_TAMPER": "oversize"},
    )
    # 8) every programming write failing in turn
    fault_sweep(["--ways", "2", "--decoder", "decoder0.0", "--online", "devdax"])
    cx("after", "status", "--json")
    if zone != "normal":
        normal_last()
    if os.environ.get("CXLVM_EXPLORE"):
        # what the kernel does when the first of two regions sharing a port is torn down first
        ra = created(
            cx(
                "x-order-a",
                "region",
                "create",
                "--ways",
                "1",
                "--decoder",
                "decoder0.1",
                "--online",
                "devdax",
                "--json",
            )
        )
        rb = created(
            cx(
                "x-order-b",
                "region",
                "create",
                "--ways",
                "1",
                "--decoder",
                "decoder0.1",
                "--online",
                "devdax",
                "--json",
            )
        )
        k = sh_rc(f"destroy_region {ra['region']}")
        note("x-kernel-order", kernel=k, dmesg=sh("dmesg | tail -n 20"), state=state())
        cx("x-order-b-destroy", "region", "destroy", rb["region"], "--json")
        c = cx(
            "x-after-create",
            "region",
            "create",
            "--ways",
            "1",
            "--decoder",
            "decoder0.1",
            "--online",
            "devdax",
            "--json",
        )
        note("x-dmesg", dmesg=sh("dmesg | tail -n 20"), rc=c["rc"])


def normal_last() -> None:
    """A ZONE_NORMAL region, last (it may stay): created, then ``destroy --force``, which either
    removes it or, when the kernel cannot offline a block, puts every block back online."""
    r = created(cx("normal-create", "region", "create", "--ways", "4", "--zone", "normal", "--json"))
    cx("normal-destroy", "region", "destroy", r["region"], "--force", "--json")


def switch2() -> None:
    cx("before", "status", "--json")
    r2 = created(cx("create2", "region", "create", "--ways", "2", "--zone", "movable", "--json"))
    dax = r2["dax"][0]["chardev"]
    cx("devdax", "dax", "reconfigure", dax, "--mode", "devdax", "--force", "--json")
    cx("ram-normal", "dax", "reconfigure", dax, "--mode", "system-ram", "--json")
    cx("destroy2", "region", "destroy", r2["region"], "--force", "--json")
    r1 = created(cx("create1", "region", "create", "--ways", "1", "--size", "256M", "--json"))
    cx("destroy1", "region", "destroy", r1["region"], "--force", "--json")
    cx(
        "tamper-swap",
        "region",
        "create",
        "--ways",
        "2",
        "--online",
        "devdax",
        "--json",
        env={"CXLCTL_TEST_REGION_TAMPER": "swap-last"},
    )
    rs = json.loads(STEPS[-1]["stdout"] or "{}").get("regions") if STEPS[-1]["rc"] == 0 else None
    if rs:  # below a switch the order of the dports is free: the kernel accepts the swap
        cx("tamper-swap-destroy", "region", "destroy", rs[0]["region"], "--json")
    cx("tamper-oversize", "region", "create", "--ways", "2", "--json", env={"CXLCTL_TEST_REGION_TAMPER": "oversize"})
    al = created(cx("all", "region", "create", "--all", "--online", "devdax", "--json"))
    cx("all-destroy", "region", "destroy", al["region"], "--json")
    cx("after", "status", "--json")


def hb2() -> None:
    cx("before", "status", "--json")
    cx("plan1", "region", "plan", "--ways", "1", "--json", snap=False)
    r2 = created(cx("create2", "region", "create", "--ways", "2", "--json"))
    cx("destroy2", "region", "destroy", r2["region"], "--force", "--json")
    cx("tamper-swap", "region", "create", "--ways", "2", "--json", env={"CXLCTL_TEST_REGION_TAMPER": "swap-last"})
    al = created(cx("all", "region", "create", "--all", "--zone", "movable", "--json"))
    cx("all-destroy", "region", "destroy", al["region"], "--force", "--json")
    cx("after", "status", "--json")


def old_kernel() -> None:
    cx("before", "status", "--json")
    rd = f"{CXL}/decoder0.0"
    note(
        "kernel",
        uname=sh("uname -r"),
        root_decoder_attrs=sorted(os.listdir(rd)) if os.path.isdir(rd) else [],
        modprobe_dax_cxl=sh("modprobe dax_cxl 2>&1; echo rc=$?"),
        cxl_create_region=sh("cxl create-region -t ram -d decoder0.0 -m mem0 2>&1; echo rc=$?"),
    )
    cx("plan", "region", "plan", "--ways", "1", "--json")
    cx("create", "region", "create", "--ways", "1", "--json")
    cx("create-all", "region", "create", "--all", "--json")
    cx("after", "status", "--json")


SCENARIOS = {
    "hb2x2": hb2x2,
    "hb2x2-movable": lambda: hb2x2("movable"),
    "switch2": switch2,
    "hb2": hb2,
    "old-kernel": old_kernel,
}

if __name__ == "__main__":
    t0 = time.monotonic()
    try:
        SCENARIOS[sys.argv[1]]()
    finally:
        note("done", seconds=round(time.monotonic() - t0, 1))
