"""Record real-kernel fixtures: ``cxlctl record`` trees plus peer-tool output.

Why: unit tests replay these trees (``cxlctl --root FIXTURE ...``) so they test
against what real 6.12 and 6.1 kernels put in sysfs, without booting anything.
Each (kernel, topology) costs one boot: record with no region, create the
widest region the topology allows (``Topology.widest``) with guest-lib.sh,
record again.  Output goes to ``fixtures/linux-<major.minor>/<topology>-<state>/``
with ``peers/`` (cxl list -vvv, daxctl list -iDRM, numactl -H, uname -r)
beside the record.  Kernels that cannot create RAM regions (6.1 has no
``create_ram_region``) get only the no-region state; the error is written to
``fixtures/linux-<major.minor>/RECORDED.txt``.

Run through ``scripts/record-fixtures.sh`` (as root; its default set, ``base``).
"""

from __future__ import annotations

import argparse
import datetime
import re
import shutil
import subprocess
import sys
from typing import List, Optional

from tests.fixture_status import install
from tests.vm.harness import REPO, TOPOLOGIES, HarnessError, Topology, kernel, run_guest

FIXTURES = REPO / "fixtures"

#: peers saved beside every record; the guest writes them, stderr kept only if non-empty
SNAP = r"""
snap() {  # $1 = fixture name: cxlctl record + peer tools
  local d="$OUT/$1" tmp="/tmp/record-fixtures/$1"
  # record onto the guest's own /tmp (tmpfs) and copy once: many small writes
  # through the 9p rwdir under TCG cost minutes
  rm -rf "$tmp"; mkdir -p "${tmp%/*}"
  if ! "$PY" -m cxlctl record --include-process-data "$tmp"; then
    echo "record-fixtures: '$PY -m cxlctl record --include-process-data $tmp' failed" >&2
    return 1
  fi
  cp -a "$tmp" "$d" || return 1
  cxlvm_peers "$d/peers"
}
"""


def guest_script(t: Topology) -> str:
    """One boot's work: snapshot, region, snapshot.  Exit 0 even if the region
    cannot be made (6.1); the host reads ``region-error.txt`` then."""
    region = t.widest
    s = SNAP + f"snap {t.name}-noregion || exit 2\n"
    if region is None:
        return s
    return (
        s
        + f"""
if [ ! -e /sys/bus/cxl/devices/{region.root_decoder}/create_ram_region ]; then
  {{
    echo "# kernel $(uname -r): ls /sys/bus/cxl/devices/{region.root_decoder}/"
    ls /sys/bus/cxl/devices/{region.root_decoder}/
    echo "# cat /sys/bus/cxl/devices/{region.root_decoder}/create_ram_region"
    cat /sys/bus/cxl/devices/{region.root_decoder}/create_ram_region 2>&1
  }} > "$OUT/region-error.txt"
  exit 0
fi
if ! R=$({region.create_command(t)} 2> "$OUT/region-create.log"); then
  cp "$OUT/region-create.log" "$OUT/region-error.txt"
  dmesg | tail -n 20 >> "$OUT/region-error.txt"
  exit 3
fi
snap {t.name}-region || exit 2
cp "$OUT/region-create.log" "$OUT/{t.name}-region/peers/region-create.log"
echo "{region.create_command(t)}  # -> $R" >> "$OUT/{t.name}-region/peers/region-create.log"
"""
    )


def series_of(release: str) -> str:
    """'6.12.117+deb12-amd64' -> '6.12'."""
    m = re.match(r"(\d+\.\d+)", release)
    if not m:
        raise HarnessError(f"cannot parse kernel release {release!r}")
    return m.group(1)


def package_of(release: str) -> str:
    """The Debian packages a release came from (scripts/install-vm-deps.sh): bookworm's
    ``linux-image-*-unsigned``, or Debian 13 backports' split packaging for 7.x."""
    if release.startswith("7."):
        return f"Debian trixie-backports linux-binary-{release}, linux-modules-{release}, linux-base-{release}"
    return f"Debian linux-image-{release}-unsigned"


def tool_version(cmd: List[str]) -> str:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (p.stdout or p.stderr).splitlines()[0].strip()
    except (OSError, IndexError, subprocess.SubprocessError):
        return "unknown"


def check_record_command() -> None:
    """Fail before booting anything if ``cxlctl record`` is not there yet."""
    p = subprocess.run(
        [sys.executable, "-m", "cxlctl", "record", "--help"],
        capture_output=True,
        text=True,
        cwd=str(REPO),
    )
    if p.returncode != 0:
        raise SystemExit(
            "record-fixtures: `python -m cxlctl record --help` failed "
            f"(exit {p.returncode}); the `cxlctl record DEST` command is needed:\n{p.stderr[-2000:]}"
        )


def record_one(series: str, name: str, qemu: str) -> List[str]:
    """Boot ``name`` on kernel ``series`` once; copy its fixtures into the repo.
    Returns summary lines."""
    t = TOPOLOGIES[name]
    k = kernel(series)
    # named by the series asked for: linux-6.12, linux-6.1, and linux-7.x for the newest 7.x
    # (tests/vm/test_vm_doctor.py and the other recorders name theirs the same way)
    dest_root = FIXTURES / f"linux-{series if series == '7.x' else series_of(k.release)}"
    r = run_guest(t, guest_script(t), kernel=k, timeout=900)
    timing = f"boot {r.boot_seconds:.0f} s, wall {r.wall_seconds:.0f} s"
    print(f"[{k.release}] {name}: {timing}", flush=True)
    err = r.outdir / "region-error.txt"
    err_text = err.read_text(errors="replace") if err.exists() else ""
    if r.returncode != 0:
        raise HarnessError(f"{k.release} {name}: guest script exited {r.returncode}\n{r.stderr[-3000:]}\n{err_text}")
    about = [
        f"kernel: {k.release} ({package_of(k.release)})",
        f"qemu: {qemu}",
        f"virtme-ng: {tool_version(['vng', '--version'])}",
        f"peers: ndctl cxl {tool_version(['cxl', 'version'])}, daxctl {tool_version(['daxctl', 'version'])}",
        f"recorded: {datetime.date.today().isoformat()} by scripts/record-fixtures.sh "
        f"--kernel {series} --topology {name}",
        f"topology: {name}: {t.description}",
        f"qemu args: -cpu max,hypervisor=off -M cxl=on -m 2G,maxmem=8G,slots=8 {t.args}",
    ]
    summary = []
    dest_root.mkdir(parents=True, exist_ok=True)
    for state in ("noregion", "region"):
        src = r.outdir / f"{name}-{state}"
        dst = dest_root / f"{name}-{state}"
        if dst.exists():
            shutil.rmtree(dst)
        if not src.is_dir():
            continue
        install(src, dst)
        lines = about + [f"state: {state}"]
        if state == "region" and t.widest is not None:
            w = t.widest
            lines.append(
                f"region: {w.ways}-way RAM region on {w.root_decoder} (cxl-fmw.{w.window}), "
                f"granularity {w.granularity}, devices {', '.join(w.devices)} "
                "(tests/vm/guest-lib.sh create_ram_region; log in region-create.log)"
            )
        if state == "noregion" and err_text:
            lines.append("region: none could be created on this kernel; see region-error.txt")
            (dst / "peers" / "region-error.txt").write_text(err_text)
        (dst / "peers" / "recorded.txt").write_text("\n".join(lines) + "\n")
        summary.append(f"{dst.relative_to(REPO)}: {timing}")
    return summary


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--kernel", action="append", help="kernel series (default: 6.12 and 6.1)")
    ap.add_argument("--topology", action="append", choices=sorted(TOPOLOGIES), help="default: all")
    a = ap.parse_args(argv)
    check_record_command()
    qemu = tool_version(["qemu-system-x86_64", "--version"])
    summary: List[str] = []
    for series in a.kernel or ["6.12", "6.1"]:
        # hmat2 has its own set (scripts/record-fixtures.sh hmat: both regions, the kernel's figures)
        for name in a.topology or [t for t in TOPOLOGIES if t != "hmat2"]:
            summary += record_one(series, name, qemu)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
