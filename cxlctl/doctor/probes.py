"""The tools doctor asks (``cxl``, ``daxctl``, ``numactl``, ``systemctl``), behind one function.

Why one injectable function: tool versions and the service state come only
from running the tools, which unit tests cannot do on recorded trees.  So
:func:`collect` takes a ``runner`` (default :func:`run_tool`), tests pass a
fake, and ``cxlctl record`` saves the answers beside the tree
(:data:`PROBES_FILE`) so that ``doctor --root RECORD`` replays them instead of
asking the tools of the machine it runs on.
"""

from __future__ import annotations

import json
from typing import Callable, Dict, Optional, Sequence, Tuple

from cxlctl.hostio import tools
from cxlctl.hostio.host import Host

from .model import Probe

#: the file ``cxlctl record`` writes the tools' answers to, at the top of the record
PROBES_FILE = "cxlctl-probes.json"
UNIT = "cxlctl.service"
SHOW_PROPS = "LoadState,ActiveState,SubState,MainPID,Result,UnitFileState"

DMESG = ("dmesg",)
LOCALALLOC = ("numactl", "--localalloc", "true")

#: every command doctor runs, in the order it runs them
COMMANDS: Tuple[Tuple[str, ...], ...] = (
    ("cxl", "version"),
    ("daxctl", "version"),
    ("numactl", "--version"),
    ("numactl", "--help"),
    # set_mempolicy(MPOL_LOCAL) and exec: whether this process may set a memory policy at all (a
    # container's seccomp profile answers EPERM without CAP_SYS_NICE; sglang issue 27368)
    LOCALALLOC,
    ("systemctl", "--version"),
    ("systemctl", "show", UNIT, "-p", SHOW_PROPS),
    # the kernel log, for dax_hmem's Soft-Reserved hand-off lines (root where dmesg_restrict is 1)
    DMESG,
)

Runner = Callable[[Sequence[str]], Optional[Tuple[int, str]]]
MAX_OUT = 64 << 10
#: the kernel log is read whole (a large host's boot log passes 64 KiB before dax_hmem loads) and
#: only its CXL/hmem lines are kept (:func:`collect`), so a record holds no unrelated log text
DMESG_MAX_OUT = 8 << 20
DMESG_KEEP = ("hmem", "cxl", "CXL")
#: seconds each command may take (docs/doctor.md)
TIMEOUT = 10.0


def key(argv: Sequence[str]) -> str:
    return " ".join(argv)


def run_tool(argv: Sequence[str]) -> Optional[Tuple[int, str]]:
    """(exit status, stdout+stderr) of ``argv``; None when the program is not installed.

    A thin adapter of :func:`cxlctl.hostio.tools.run` to the recorded-answer
    shape: a timeout is status 124 and a refused start 126 (as coreutils'
    ``timeout`` and the shell report them), with the runner's message as text."""
    cap = DMESG_MAX_OUT if tuple(argv) == DMESG else MAX_OUT
    try:
        res = tools.run(argv, timeout=TIMEOUT, max_output=cap, check=False)
    except tools.ToolError as e:
        if e.kind == "missing":
            return None
        return (124 if e.kind == "timeout" else 126, str(e))
    return (res.returncode, res.output[:cap])


def collect(runner: Runner = run_tool) -> Dict[str, Probe]:
    """Ask every tool of :data:`COMMANDS` once."""
    out: Dict[str, Probe] = {}
    for argv in COMMANDS:
        got = runner(argv)
        if got is not None and tuple(argv) == DMESG:
            got = (got[0], "".join(ln for ln in got[1].splitlines(True) if any(k in ln for k in DMESG_KEEP)))
        out[key(argv)] = Probe(None, "") if got is None else Probe(got[0], got[1])
    return out


def to_json(probes: Dict[str, Probe]) -> Dict[str, object]:
    return {"format": 1, "probes": {k: {"rc": p.rc, "out": p.out} for k, p in probes.items()}}


def load_recorded(host: Host) -> Optional[Dict[str, Probe]]:
    """The answers a record saved (None when ``host``'s tree holds none or they do not parse)."""
    text = host.reader.body("/" + PROBES_FILE)
    if text is None:
        return None
    try:
        doc = json.loads(text)
        raw = doc["probes"]
        out: Dict[str, Probe] = {}
        for k, v in raw.items():
            rc = v.get("rc")
            out[str(k)] = Probe(rc if isinstance(rc, int) and not isinstance(rc, bool) else None, str(v.get("out", "")))
        return out
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
