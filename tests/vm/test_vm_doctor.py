"""``cxlctl doctor`` on real kernels: a clean 6.12 host, then deliberate faults, each found with its fix; 6.1.

Two boots of the ``single`` topology (tests/vm/doctor_guest_driver.py does the
guest's work in one interpreter).  The guest gets the kernel package's own
config at ``/boot/config-$(uname -r)`` (a tmpfs: the guest's /boot is the
host's, read-only), as an installed Debian kernel has it.

With ``CXLCTL_RECORD_FIXTURES=1`` (set by ``scripts/record-fixtures.sh doctor``) the records the driver made are copied to
``fixtures/linux-<series>/single-*-doctor/`` (how those fixtures were made).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from tests.fixture_status import install
from tests.vm.harness import REPO, GuestResult, kernel, out_text, run_guest

pytestmark = pytest.mark.vm

SCRIPT = r"""
cfg={config}
[ -f "$cfg" ] || {{ echo "no kernel config at $cfg" >&2; exit 9; }}
mount -t tmpfs -o size=8m doctor-boot /boot && cp "$cfg" "/boot/config-$(uname -r)" || exit 9
"$PY" "$REPO/tests/vm/doctor_guest_driver.py" {scenario} "$OUT"
"""

#: Debian 13's 7.x packaging installs the config at /usr/lib/modules/VER/config (install-vm-deps.sh
#: puts it there on the host, whose root the guest sees) and nothing in /boot: no mount
SCRIPT_7X = r"""
[ -f "/usr/lib/modules/$(uname -r)/config" ] || {{ echo "no /usr/lib/modules/$(uname -r)/config" >&2; exit 9; }}
[ ! -e "/boot/config-$(uname -r)" ] || {{ echo "/boot/config-$(uname -r) exists" >&2; exit 9; }}
"$PY" "$REPO/tests/vm/doctor_guest_driver.py" {scenario} "$OUT"
"""


def guest_script(series: str, work: Path) -> str:
    """The guest side of one series' scenario; ``work`` is the boot's work folder (the guest's
    --rwdir), where the kernel package's config is handed over."""
    cfg = kernel(series).vmlinuz.parent / "config"
    assert cfg.is_file(), f"{cfg} missing: run scripts/install-vm-deps.sh"
    # the guest sees the host's /var/cache through virtme-ng's overlays only partly: hand the
    # config over in the work folder (the guest's --rwdir), which it sees at the same path
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cfg, work / "kconfig")
    script = SCRIPT_7X if series == "7.x" else SCRIPT
    return recording() + script.format(config=work / "kconfig", scenario=series)


def recording() -> str:
    """The guest's part of ``CXLCTL_RECORD_FIXTURES=1``: the driver records its trees only then (a record
    and its peers cost ~10 s of guest CPU under TCG each, and a test run checks none of them)."""
    return "export CXLCTL_RECORD_FIXTURES=1\n" if os.environ.get("CXLCTL_RECORD_FIXTURES") else ""


def boot(series: str) -> Dict[str, Dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix=f"cxlvm-doctor-{series}-"))
    res = run_guest("single", guest_script(series, work), kernel=series, timeout=1500, workdir=work)
    sys.stderr.write(f"[doctor/{series}] boot {res.boot_seconds:.0f} s, wall {res.wall_seconds:.0f} s\n")
    return results(res, series)


def results(res: GuestResult, series: str) -> Dict[str, Dict[str, Any]]:
    """Each doctor run of a scenario's guest run, by its label (and with CXLCTL_RECORD_FIXTURES=1,
    its records installed as fixtures)."""
    assert res.returncode == 0, res.stderr[-4000:]
    assert (res.outdir / "done").exists(), res.stderr[-4000:]
    if os.environ.get("CXLCTL_RECORD_FIXTURES"):
        for d in sorted((res.outdir / "fixtures").iterdir()):
            dest = REPO / "fixtures" / f"linux-{series}" / d.name
            install(d, dest)
    out: Dict[str, Dict[str, Any]] = {}
    for p in res.outdir.glob("*.json"):
        out[p.stem] = json.loads(p.read_text())
        out[p.stem]["human"] = out_text(res.outdir, f"{p.stem}.txt")
    return out


@pytest.fixture(scope="module")
def v612() -> Dict[str, Dict[str, Any]]:
    return boot("6.12")


@pytest.fixture(scope="module")
def v7x() -> Dict[str, Dict[str, Any]]:
    return boot("7.x")


def checks(step: Dict[str, Any]) -> List[Dict[str, Any]]:
    doc = step["doc"]
    assert doc is not None, step["stderr"]
    return list(doc["checks"])


def by_id(step: Dict[str, Any], cid: str) -> Dict[str, Any]:
    found = [c for c in checks(step) if c["id"] == cid]
    assert found, f"no check {cid}: {[c['id'] for c in checks(step)]}"
    return found[0]


def failures(step: Dict[str, Any]) -> List[str]:
    return [f"{c['id']}: {c['message']}" for c in checks(step) if c["result"] == "fail"]


def test_clean_host_has_no_failures(v612: Dict[str, Dict[str, Any]]) -> None:
    clean = v612["clean"]
    assert failures(clean) == [], clean["human"]
    assert clean["rc"] == 0
    # what it read is real: the kernel config, the modules, the firmware tables, iomem as root
    assert by_id(clean, "kernel.config")["result"] == "ok"
    assert any(e["source"].startswith("/boot/config-6.12") for e in by_id(clean, "kernel.config")["evidence"])
    mods = by_id(clean, "kernel.modules")["message"]
    for m in (
        "cxl_acpi (loaded)",
        "cxl_pci (loaded)",
        "cxl_mem (loaded)",
        "cxl_port (built-in)",
        "dax_cxl (loaded)",
        "kmem (loaded)",
    ):
        assert m in mods, mods
    assert by_id(clean, "firmware.cedt")["result"] == "ok"
    assert by_id(clean, "firmware.cxl-windows")["result"] == "ok"
    assert by_id(clean, "devices.dax.dax0.0")["result"] == "ok"
    assert by_id(clean, "kernel.version")["message"].startswith("Linux 6.12")
    # the service: not booted with systemd here, and doctor says it cannot check rather than guessing
    assert by_id(clean, "services.daemon")["result"] == "cannot-check"
    # the human view at 80 columns
    assert all(len(line) <= 80 for line in clean["human"].splitlines()), clean["human"]
    assert "nothing fails" in clean["human"]
    vllm = v612["clean-vllm"]
    assert by_id(vllm, "inference.flags")["result"] == "note"
    assert any(c["id"] == "inference.thp" for c in checks(vllm))
    # before the region: the memdev's capacity is unused, with the command that would use it
    un = by_id(v612["noregion"], "devices.memdevs-unused")
    assert un["result"] == "warn" and "cxlctl region create --memdevs mem0 --decoder decoder0.0" in un["fix"]


def test_region_left_unonlined(v612: Dict[str, Dict[str, Any]]) -> None:
    st = v612["unonlined"]
    c = by_id(st, "devices.dax.dax0.0")
    assert c["result"] == "fail" and "region0 is not onlined" in c["message"], c
    assert c["fix"].startswith("cxlctl dax reconfigure dax0.0 --mode system-ram --zone normal")
    assert st["rc"] == 1
    # the fix, applied, clears it
    assert failures(v612["unonlined-fixed"]) == []


def test_dax_in_devdax(v612: Dict[str, Dict[str, Any]]) -> None:
    c = by_id(v612["devdax"], "devices.dax.dax0.0")
    assert c["result"] == "warn" and "devdax mode" in c["message"], c
    assert "cxlctl dax reconfigure dax0.0 --mode system-ram" in c["fix"]
    assert c["evidence"][0] == {"source": "/sys/bus/dax/devices/dax0.0/driver", "value": "device_dax"}


def test_module_unloaded(v612: Dict[str, Dict[str, Any]]) -> None:
    st = v612["module-unloaded"]
    c = by_id(st, "kernel.modules.kmem")
    assert c["result"] == "fail" and c["fix"] == "modprobe kmem", (c, st["shell"])
    assert "CONFIG_DEV_DAX_KMEM=m" in c["evidence"][0]["value"]
    assert st["rc"] == 1


def test_auto_online_offline(v612: Dict[str, Dict[str, Any]]) -> None:
    st = v612["auto-offline"]
    a = by_id(st, "devices.auto-online")
    assert a["result"] == "warn" and a["evidence"][0]["value"] == "offline", a
    assert "echo online > /sys/devices/system/memory/auto_online_blocks" in a["fix"]
    d = by_id(st, "devices.dax.dax0.0")
    assert d["result"] == "fail" and "auto_online_blocks=offline left them so" in d["message"], (d, st["shell"])


def test_onlined_movable(v612: Dict[str, Dict[str, Any]]) -> None:
    st = v612["movable"]
    c = by_id(st, "devices.dax.dax0.0.zone")
    assert c["result"] == "warn" and "ZONE_MOVABLE" in c["message"], (c, st["shell"])
    assert c["fix"].startswith("cxlctl dax reconfigure dax0.0 --mode system-ram --zone normal")
    after = v612["movable-fixed"]
    assert failures(after) == []
    assert not [x for x in checks(after) if x["id"] == "devices.dax.dax0.0.zone"]


def check_linux61(v61: Dict[str, Dict[str, Any]]) -> None:
    """6.1 (test_vm_linux61's shared boot): no RAM regions, said once, with the kernel that has them."""
    st = v61["linux61"]
    c = by_id(st, "kernel.ram-regions")
    assert c["result"] == "fail", c
    assert "no RAM regions on this kernel" in c["message"] and "Linux 6.3 or newer" in c["message"]
    assert "6.3" in c["fix"]
    assert st["rc"] == 1
    # 6.1 has no dax_cxl: not reported as a missing module or config option
    assert not [x for x in checks(st) if x["id"] in ("kernel.modules.dax_cxl", "kernel.config.DEV_DAX_CXL")]


def test_linux7_config_under_usr_lib_modules(v7x: Dict[str, Dict[str, Any]]) -> None:
    """Debian 13's 7.x: doctor finds the config where linux-base installs it (it said
    "cannot check: no kernel config found" before), and the clean host has no failures."""
    clean = v7x["clean"]
    assert failures(clean) == [], clean["human"]
    cfg = by_id(clean, "kernel.config")
    assert cfg["result"] == "ok", cfg
    assert cfg["evidence"][0]["source"].startswith("/usr/lib/modules/7.") and cfg["evidence"][0]["source"].endswith(
        "/config"
    )
    assert by_id(clean, "kernel.version")["message"].startswith("Linux 7.")
    mods = by_id(clean, "kernel.modules")["message"]
    for m in ("cxl_acpi (loaded)", "cxl_pci (loaded)", "cxl_mem (loaded)", "cxl_port (built-in)", "dax_cxl (loaded)"):
        assert m in mods, mods
    assert by_id(clean, "devices.dax.dax0.0")["result"] == "ok"
    assert all(len(line) <= 80 for line in clean["human"].splitlines()), clean["human"]
    un = by_id(v7x["noregion"], "devices.memdevs-unused")
    assert un["result"] == "warn" and "cxlctl region create" in un["fix"]
