"""The CXL device events the RAS VM test and the event recorder inject, and the
guest/host choreography both use.

Why one module: the recorded fixtures (``fixtures/linux-6.12/events/``) and the
VM proof (``tests/vm/test_vm_ras.py``) must come from the very same
injections, so a fixture can be re-made and checked against the test.

Topology ``hb2x2``: a 2-way RAM region on window 1 interleaves ``cxl-vmem0``
and ``cxl-vmem1`` (both behind host bridge ``cxl.1``); ``cxl-vmem2`` and
``cxl-vmem3`` stay outside any region.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from tests.vm.harness import TOPOLOGIES, Region
from tests.vm.qmp import QmpSession, device_path

TOPOLOGY = TOPOLOGIES["hb2x2"]
#: the region the guest creates: window 1, 2-way across the first bridge's devices
REGION = Region(1, 8192, ("cxl-vmem0", "cxl-vmem1"))
INSIDE = ("cxl-vmem0", "cxl-vmem1")
OUTSIDE = "cxl-vmem3"


@dataclass(frozen=True)
class Step:
    """One injection: a name (also the fixture file name), the QEMU device,
    the QMP commands to run, the trace event it must produce, and the DPA it
    is about (None for events without one)."""

    name: str
    device: str
    commands: Tuple[Tuple[str, Dict[str, Any]], ...]
    event: str
    dpa: Any = None
    #: devices whose poison list the guest reads after the injection
    poison_list: Tuple[str, ...] = ()
    extra: Dict[str, Any] = field(default_factory=dict)


def _gm(dev: str, dpa: int, log: str) -> Tuple[str, Dict[str, Any]]:
    return (
        "cxl-inject-general-media-event",
        # descriptor 1: uncorrectable; type 0: ECC error; transaction 1: host read
        {
            "path": device_path(dev),
            "log": log,
            "flags": 1,
            "dpa": dpa,
            "descriptor": 1,
            "type": 0,
            "transaction-type": 1,
        },
    )


def _dram(dev: str, dpa: int, log: str) -> Tuple[str, Dict[str, Any]]:
    return (
        "cxl-inject-dram-event",
        {
            "path": device_path(dev),
            "log": log,
            "flags": 1,
            "dpa": dpa,
            "descriptor": 1,
            "type": 0,
            "transaction-type": 1,
            "channel": 1,
            "rank": 0,
        },
    )


def _module(dev: str) -> Tuple[str, Dict[str, Any]]:
    return (
        "cxl-inject-memory-module-event",
        {
            "path": device_path(dev),
            "log": "warning",
            "flags": 1,
            "type": 3,
            "health-status": 3,
            "media-status": 7,
            "additional-status": 33,
            "life-used": 30,
            "temperature": 40,
            "dirty-shutdown-count": 1,
            "corrected-volatile-error-count": 5,
            "corrected-persistent-error-count": 0,
        },
    )


def _poison(dev: str, dpa: int) -> Tuple[str, Dict[str, Any]]:
    return ("cxl-inject-poison", {"path": device_path(dev), "start": dpa, "length": 64})


STEPS: Tuple[Step, ...] = (
    # cxl-vmem1 is interleave position 1: its DPA 0x4000 (its third 8 KiB chunk)
    # lands at region offset (2 * 2 + 1) * 8 KiB
    Step(
        "general-media-in-region",
        "cxl-vmem1",
        (_gm("cxl-vmem1", 0x4000, "informational"),),
        "cxl_general_media",
        0x4000,
    ),
    Step("general-media-no-region", OUTSIDE, (_gm(OUTSIDE, 0x1000, "failure"),), "cxl_general_media", 0x1000),
    Step("dram-in-region", "cxl-vmem0", (_dram("cxl-vmem0", 0x2040, "failure"),), "cxl_dram", 0x2040),
    Step("memory-module-in-region", "cxl-vmem0", (_module("cxl-vmem0"),), "cxl_memory_module"),
    Step("memory-module-no-region", OUTSIDE, (_module(OUTSIDE),), "cxl_memory_module"),
    # poison at the very DPAs of the media and DRAM events above: the kernel prints
    # the HPA of a poison record, an oracle for cxlctl's translation of the others
    Step(
        "poison-in-region",
        "cxl-vmem1",
        (_poison("cxl-vmem1", 0x4000), _poison("cxl-vmem0", 0x2040)),
        "cxl_poison",
        0x4000,
        poison_list=("cxl-vmem1", "cxl-vmem0"),
    ),
    Step("poison-no-region", OUTSIDE, (_poison(OUTSIDE, 0x3000),), "cxl_poison", 0x3000, poison_list=(OUTSIDE,)),
    Step(
        "correctable-error",
        "cxl-vmem0",
        (("cxl-inject-correctable-error", {"path": device_path("cxl-vmem0"), "type": "mem-data-ecc"}),),
        "cxl_aer_correctable_error",
    ),
    Step(
        "uncorrectable-error",
        "cxl-vmem0",
        (
            (
                "cxl-inject-uncorrectable-errors",
                {
                    "path": device_path("cxl-vmem0"),
                    "errors": [{"type": "mem-data-ecc", "header": [0xA5A5A5A5, 1, 2, 3]}],
                },
            ),
        ),
        "cxl_aer_uncorrectable_error",
    ),
)


def host_driver(steps: Tuple[Step, ...] = STEPS, results: Any = None) -> Any:
    """The QMP driver for ``run_guest(qmp=...)``: for each step, wait for the
    guest's ``ready-<step>``, run the step's commands, write ``done-<step>``
    (holding the serials of the devices whose poison list the guest reads).
    A QEMU error is written to ``$OUT/qmp-<step>.err`` and the guest goes on,
    so one unsupported injection does not hide the others."""

    def drive(s: QmpSession) -> None:
        for st in steps:
            s.wait_file(f"ready-{st.name}", timeout=600)
            errors: List[str] = []
            for cmd, args in st.commands:
                try:
                    s.execute(cmd, args)
                except Exception as e:  # noqa: BLE001 - recorded for the test to judge
                    errors.append(f"{cmd}: {e}")
            if errors:
                (s.out / f"qmp-{st.name}.err").write_text("\n".join(errors) + "\n")
            serials = " ".join(f"{TOPOLOGY.serials[d]:#x}" for d in st.poison_list)
            s.signal(f"done-{st.name}", serials + "\n")
        if results is not None:
            results.append("driver done")

    return drive


#: guest shell: functions the RAS guest scripts share.  ``ras_wait_host STEP``
#: writes ready-STEP and waits (bounded) for done-STEP; prints its content.
GUEST_FUNCS = r"""
TR=/sys/kernel/tracing
ras_tracefs() {
  if [ ! -d "$TR/instances" ]; then mount -t tracefs nodev "$TR" || return 1; fi
}
ras_wait_host() {
  local step=$1 i=0
  : > "$OUT/ready-$step"
  while [ ! -e "$OUT/done-$step" ]; do
    i=$((i + 1))
    if [ "$i" -gt 600 ]; then echo "host never answered $step" >&2; return 1; fi
    sleep 0.2
  done
  cat "$OUT/done-$step"
}
"""


def parse_facts(text: str) -> Dict[str, Any]:
    """``facts.txt`` as :func:`guest_session` writes it: memdev by QEMU device, numbers as ints."""
    f: Dict[str, Any] = {"memdev": {}}
    for line in text.splitlines():
        k, *v = line.split()
        if not v:
            continue  # e.g. "node " for a dax_region glob hit that is no device
        if k == "memdev":
            f["memdev"][v[0]] = v[1]
        elif k in ("region_base", "region_size", "block_size"):
            f[k] = int(v[0], 0)
        elif k == "node":
            f["node"] = int(v[0])
        else:
            f[k] = v[0]
    return f


def guest_session(before_steps: str = "", after_steps: str = "") -> str:
    """The guest side both the recorder and the VM test run, in one boot:

    1. create the 2-way region (``$R``), write ``$OUT/facts.txt`` (memdev of each
       QEMU device, region base/ways/granularity, block size, the region's node);
    2. ``before_steps`` (shell), then an independent kernel view: the test's own
       trace instance ``ras-kernel-view`` (not cxlctl's) with every cxl event on;
    3. ``cxlctl events --collect`` and a background ``cxlctl events --follow
       --json`` whose lines are stamped with the guest's uptime on arrival;
    4. per step: clear the kernel view, hand over to the host (which injects),
       read the poison lists the step names, wait 3 s, save the kernel view to
       ``$OUT/kernel/<step>.txt`` (its arrival time in ``$OUT/t/<step>``);
    5. stop the follower; ``after_steps`` (shell).
    """
    steps = " ".join(st.name for st in STEPS)
    devs = " ".join(f"{d}={TOPOLOGY.serials[d]:#x}" for d in TOPOLOGY.device_ids)
    return (
        GUEST_FUNCS
        + f"""
R=$({REGION.create_command(TOPOLOGY)}) || exit 3
D=/sys/bus/cxl/devices
{{
  for pair in {devs}; do echo "memdev ${{pair%%=*}} $(memdev_by_serial ${{pair#*=}})"; done
  echo "region $R"
  echo "region_base $(cat $D/$R/resource)"
  echo "region_size $(cat $D/$R/size)"
  echo "block_size 0x$(cat /sys/devices/system/memory/block_size_bytes)"
  for x in $D/$R/dax_region*/dax*; do echo "node $(cat /sys/bus/dax/devices/${{x##*/}}/target_node)"; done
}} > "$OUT/facts.txt"
{before_steps}
ras_tracefs || exit 4
K=$TR/instances/ras-kernel-view
mkdir "$K" && echo 1 > "$K/events/cxl/enable" || exit 4
mkdir -p "$OUT/kernel" "$OUT/t" "$OUT/formats"
for f in "$K"/events/cxl/*/format; do e=${{f%/format}}; cp "$f" "$OUT/formats/${{e##*/}}.format"; done
ls "$K/events/cxl" > "$OUT/kernel-events.txt"
"$CXLCTL" events --collect --json > "$OUT/collect-start.jsonl" 2> "$OUT/collect-start.err"
"$PY" -m cxlctl events --follow --json 2> "$OUT/follow.err" > >(while IFS= read -r l; do
    echo "$(cut -d' ' -f1 /proc/uptime) $l"; done > "$OUT/follow.jsonl") &
FPID=$!
for i in $(seq 600); do grep -q following "$OUT/follow.err" 2>/dev/null && break; sleep 0.2; done
for step in {steps}; do
  echo > "$K/trace"
  # asked: before the host can inject (the lower bound of what this step caused); t/STEP: once the
  # guest saw the host's answer, which a slow guest sees seconds after the event itself
  cut -d' ' -f1 /proc/uptime > "$OUT/t/$step.asked"
  serials=$(ras_wait_host "$step") || exit 5
  cut -d' ' -f1 /proc/uptime > "$OUT/t/$step"
  for serial in $serials; do
    m=$(memdev_by_serial "$serial") && echo 1 > "$D/$m/trigger_poison_list"
  done
  sleep 3
  grep -v '^#' "$K/trace" > "$OUT/kernel/$step.txt"
  dmesg | tail -n 12 > "$OUT/kernel/$step.dmesg"
done
echo 0 > "$K/events/cxl/enable"; rmdir "$K"
sleep 1
cut -d' ' -f1 /proc/uptime > "$OUT/t/follow-stop"
kill -TERM "$FPID"; wait "$FPID"; echo "$?" > "$OUT/follow.rc"; sleep 1
ls "$TR/instances/" > "$OUT/instances-after-follow.txt"
{after_steps}
"""
    )
