"""What every guest-side driver (tests/vm/*_driver.py) does the same way, in one place.

The drivers run *inside* a VM, started by a test's guest script as ``"$PY" "$REPO/tests/vm/X.py"``;
the harness's prelude puts ``$REPO`` on ``PYTHONPATH`` so they import this module as
``tests.vm.guest``.  Their results go to ``$OUT`` (the host reads them with
``harness.out_text``/``out_json``), in one convention: a cxlctl step called LABEL leaves
``LABEL.json`` (its stdout), ``LABEL.err`` and ``LABEL.rc``, and the driver's own log is
``driver.log``.

cxlctl runs *in this process* (``capture``/``cx``, through ``cxlctl.__main__.main``, the console
script's own entry point): a cold ``python -m cxlctl`` costs tens of
seconds under TCG, a call of ``cxlctl.cli.run`` a fraction of one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

from tests.kit import run_inprocess

#: the guest's results directory (the harness exports it to every guest script)
OUT = os.environ.get("OUT", ".")
_T0 = time.monotonic()


def elapsed() -> float:
    """Seconds since this driver started (3 decimals), for logs and measured timings."""
    return round(time.monotonic() - _T0, 3)


def log(msg: str) -> None:
    """A line in ``$OUT/driver.log``, stamped with the seconds since the driver started."""
    with open(os.path.join(OUT, "driver.log"), "a") as f:
        f.write(f"{elapsed():9.3f} {msg}\n")


def capture(args: List[str], env: Optional[Dict[str, str]] = None) -> Tuple[int, str, str]:
    """``cxlctl ARGS`` in this process: (exit code, stdout, stderr); ``env`` is set around the call only."""
    from cxlctl.__main__ import main  # the console script's entry point: its fast path and typer's

    return run_inprocess(main, list(args), env or {})


def cx(label: str, *args: str) -> int:
    """``cxlctl ARGS`` in this process, its streams and exit code left as LABEL.json/.err/.rc in $OUT."""
    rc, out, err = capture(list(args))
    for ext, text in (("json", out), ("err", err), ("rc", f"{rc}\n")):
        with open(os.path.join(OUT, f"{label}.{ext}"), "w") as f:
            f.write(text)
    log(f"cxlctl {' '.join(args)} -> {rc}")
    return rc


def sh(cmd: str) -> str:
    """A bash command; its stdout, stripped (the exit code and stderr go to the log)."""
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
    log(f"$ {cmd} -> {p.returncode} {p.stderr.strip()[:200]}")
    return p.stdout.strip()


def get(path: str) -> str:
    """A (kernel) file's text, stripped; ``ERR <reason>`` when it cannot be read, so a record shows why."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError as e:
        return f"ERR {e.strerror}"


def put(path: str, text: str) -> None:
    """Write ``text`` and a newline to a (kernel) file."""
    with open(path, "w") as f:
        f.write(text + "\n")


def save(name: str, doc: Any) -> None:
    """A JSON document in $OUT."""
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)


DAMON_STAT = "/sys/module/damon_stat/parameters/enabled"


def stop_damon_stat() -> bool:
    """Debian's 7.x starts DAMON_STAT at boot, and the kernel starts no other kdamond beside it
    (EBUSY): record what cxlctl's plan says about it (``$OUT/damon-stat-plan.json``), then stop it
    as the plan says to.  True if it ran (the caller starts it again at the end)."""
    if get(DAMON_STAT) != "Y":
        return False
    cx("damon-stat-plan", "tune", "plan", "inference-damon", "--json")
    put(DAMON_STAT, "N")
    log(f"DAMON_STAT stopped: enabled={get(DAMON_STAT)}")
    return True


GUEST_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guest-lib.sh")


def lib(cmd: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cmd`` run by bash with guest-lib.sh's functions (``create_ram_region``, ``cxlvm_peers``),
    ``args`` as ``$1``...; output captured.  The drivers' one way into the guest library."""
    return subprocess.run(["bash", "-c", f'. "{GUEST_LIB}"; {cmd}', "lib", *args], capture_output=True, text=True)


def peers(dest: str) -> None:
    """The peer tools' output into ``dest`` (a recorded tree's ``peers/``) through guest-lib.sh's
    ``cxlvm_peers``, the one spelling of it every recorder uses."""
    p = lib('cxlvm_peers "$1"', dest)
    if p.returncode != 0:
        raise SystemExit(f"cxlvm_peers {dest} failed ({p.returncode}): {p.stderr[-500:]}")
