"""systemd/cxlctl.service: `systemd-analyze verify` clean, sandbox covers exactly the knobs, install step.

``systemd-analyze`` comes with the systemd package (scripts/install-vm-deps.sh
installs it on CI machines that lack it); these tests fail rather than skip
without it, so a CI machine cannot silently stop checking the unit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import pytest

from cxlctl.config import load, validate
from cxlctl.hostio.host import Host
from cxlctl.tuning.knobs import REGISTRY
from tests.kit import REPO

UNIT = os.path.join(REPO, "systemd", "cxlctl.service")
EXAMPLE = os.path.join(REPO, "systemd", "cxlctl.toml.example")
MAX_EXPOSURE = 3.0  # `systemd-analyze security` score measured at 2.3; fail if hardening regresses


def _directives() -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    with open(UNIT) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", "[")):
                continue
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def _analyze() -> str:
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze is missing: install the systemd package (scripts/install-vm-deps.sh does)"
    return exe


def _installed_unit(tmp_path: Any) -> str:
    """The unit as systemd/install.sh installs it for a root-owned cxlctl (a stand-in at a root-owned
    path, /usr/bin/true: this checkout's may lie where users write, which install.sh refuses)."""
    stage = str(tmp_path / "stage")
    cxl = "/usr/bin/true"
    p = subprocess.run(
        ["bash", os.path.join(REPO, "systemd", "install.sh"), "--no-start"],
        env={**os.environ, "DESTDIR": stage, "CXLCTL": cxl},
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    unit = stage + "/etc/systemd/system/cxlctl.service"
    with open(unit) as f:
        text = f.read()
    assert f"ExecStart={cxl} daemon run" in text
    assert os.path.isfile(stage + "/etc/cxlctl/cxlctl.toml")
    return unit


def test_service_type_watchdog_and_forbidden_directives() -> None:
    d = _directives()
    assert d["Type"] == ["notify"] and d["NotifyAccess"] == ["main"]
    assert d["WatchdogSec"] and int(d["WatchdogSec"][0]) >= 10
    assert d["Restart"] == ["on-failure"] and d["StartLimitBurst"] and d["StartLimitIntervalSec"]
    assert "systemd-udevd.service" in d["After"][0]
    assert d["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    assert d["ExecStart"][0].endswith("cxlctl daemon run")
    # these would make the managed knobs read-only or capabilities useless (reference §B.2)
    assert "ProtectKernelTunables" not in d and "PrivateUsers" not in d and "PrivateNetwork" not in d
    caps = d["CapabilityBoundingSet"][0].split()
    assert "CAP_SYS_ADMIN" in caps, "kernel.numa_balancing checks capable(CAP_SYS_ADMIN)"
    assert set(caps) <= {"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}
    assert d["RuntimeDirectory"] == ["cxlctl"] and d["RuntimeDirectoryPreserve"] == ["yes"]
    assert d["StateDirectory"] == ["cxlctl"] and d["ProtectSystem"] == ["strict"] and d["NoNewPrivileges"] == ["yes"]


def test_writable_paths_are_exactly_the_knobs() -> None:
    d = _directives()
    ro = " ".join(d["ReadOnlyPaths"]).split()
    assert "/proc/sys" in ro and "/sys" in ro
    rw = [p.lstrip("-") for v in d["ReadWritePaths"] for p in v.split()]
    needed = [k.path for k in REGISTRY] + ["/sys/devices/system/memory/memory0/state"]

    def covered(path: str) -> bool:
        return any(path == p or path.startswith(p.rstrip("/") + "/") for p in rw)

    missing = [p for p in needed if not covered(p)]
    assert not missing, f"the unit cannot write {missing}: add them to ReadWritePaths"
    # and nothing beyond the knobs, their directories, the NFD feature directory, the RAS trace
    # instances (docs/ras.md: the daemon's private instance cxlctl-daemon) and what building a
    # hot-added memdev's region writes ([capacity] adopt: the CXL root's tree, the region and dax drivers)
    extra = [p for p in rw if not any(n == p or n.startswith(p + "/") for n in needed)]
    assert extra == [
        "/etc/kubernetes/node-feature-discovery/features.d",
        "/sys/kernel/tracing/instances",
        "/sys/devices/platform/ACPI0017:00",
        "/sys/bus/cxl/drivers/cxl_region",
        "/sys/bus/dax/drivers",
    ], extra


def test_systemd_analyze_verify_is_clean(tmp_path: Any) -> None:
    unit = _installed_unit(tmp_path)
    p = subprocess.run([_analyze(), "verify", "--man=no", unit], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "" and p.stderr.strip() == "", p.stdout + p.stderr


def test_systemd_analyze_security_score(tmp_path: Any) -> None:
    unit = _installed_unit(tmp_path)
    p = subprocess.run([_analyze(), "security", "--offline=yes", "--no-pager", unit], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", p.stdout + p.stderr)
    assert m, p.stdout + p.stderr
    score = float(m.group(1))
    print(f"systemd-analyze security: {score}")
    assert score <= MAX_EXPOSURE, f"exposure {score} > {MAX_EXPOSURE}: hardening regressed\n{p.stdout}"


def test_example_configuration_is_the_defaults(tmp_path: Any) -> None:
    root = str(tmp_path)
    os.makedirs(root + "/etc/cxlctl")
    shutil.copy(EXAMPLE, root + "/etc/cxlctl/cxlctl.toml")
    assert load(Host(root))._replace(source=None) == validate("<defaults>", {})


def test_install_script_refuses_without_cxlctl(tmp_path: Any) -> None:
    p = subprocess.run(
        ["bash", os.path.join(REPO, "systemd", "install.sh"), "--no-start"],
        env={**os.environ, "DESTDIR": str(tmp_path), "CXLCTL": str(tmp_path / "nope")},
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1 and "no cxlctl executable found" in p.stderr
    assert not os.path.exists(tmp_path / "etc")


def _stage_with(tmp_path: Any, name: str, shebang: str, where: str = "") -> subprocess.CompletedProcess[str]:
    """systemd/install.sh staging a cxlctl run by ``shebang``, at ``where`` (default: in tmp_path)."""
    exe = Path(where or str(tmp_path / name))
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f"#!{shebang}\n")
    exe.chmod(0o755)
    stage = tmp_path / f"stage-{name}"
    return subprocess.run(
        ["bash", os.path.join(REPO, "systemd", "install.sh"), "--no-start"],
        env={**os.environ, "DESTDIR": str(stage), "CXLCTL": str(exe)},
        capture_output=True,
        text=True,
    )


def test_install_refuses_code_in_a_home_or_tmp_and_keeps_the_hardening(tmp_path: Any) -> None:
    """Issue 43: ProtectHome/PrivateTmp are never relaxed; a cxlctl (or its Python) under a home
    folder or /tmp is refused instead: users write there, and the daemon runs it as root."""
    with open(os.path.join(REPO, "systemd", "install.sh")) as f:
        script = f.read()
    assert "ProtectHome=read-only" not in script and "PrivateTmp=no" not in script
    p = _stage_with(tmp_path, "in-tmp", "/usr/bin/python3")  # tmp_path is under /tmp
    assert p.returncode == 1 and "lies under a home folder or a temporary directory" in p.stderr, p.stderr
    if os.geteuid() != 0:
        pytest.skip("the rest needs root to put a cxlctl outside /tmp and /home")
    top = tempfile.mkdtemp(prefix="cxlctl-sd-", dir="/var/lib")
    try:
        os.chmod(top, 0o755)
        for name, shebang in (
            ("pyenv", "/root/.pyenv/versions/3.11.7/bin/python3.11"),
            ("pipx", "/home/ops/.local/pipx/venvs/cxlctl/bin/python"),
            ("tmp", "/tmp/ci/.venv/bin/python"),
        ):
            p = _stage_with(tmp_path, name, shebang, where=os.path.join(top, name, "cxlctl"))
            assert p.returncode == 1 and f"{shebang} lies under" in p.stderr and "/opt/cxlctl" in p.stderr, p.stderr
            assert not (tmp_path / f"stage-{name}").exists()
    finally:
        shutil.rmtree(top)


def test_install_refuses_code_another_user_can_change(tmp_path: Any) -> None:
    """A cxlctl outside /home and /tmp, but in a directory others can write: refused, naming it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to make a directory outside /tmp and /home")
    top = tempfile.mkdtemp(prefix="cxlctl-sd-", dir="/var/lib")
    try:
        os.chmod(top, 0o777)
        p = _stage_with(tmp_path, "open", "/usr/bin/python3", where=os.path.join(top, "bin", "cxlctl"))
        assert p.returncode == 1 and f"{top} is writable by others" in p.stderr, p.stderr
        assert not (tmp_path / "stage-open").exists()
        os.chmod(top, 0o755)
        p = _stage_with(tmp_path, "closed", "/usr/bin/python3", where=os.path.join(top, "bin", "cxlctl"))
        assert p.returncode == 0, p.stderr
        with open(tmp_path / "stage-closed/etc/systemd/system/cxlctl.service") as f:
            unit = f.read()
        assert "ProtectHome=yes" in unit and "PrivateTmp=yes" in unit
    finally:
        shutil.rmtree(top)
