"""Doctor on what 6.13-7.3 changed (issue 20 section 3), and DAMON tiering beside DAMON_STAT.

Each case starts from a tree recorded in a real 6.12 guest and adds the one file (or config
line, or log line) a newer kernel has, in the form that kernel writes it:
``/sys/module/damon_stat/parameters/{enabled,kdamond_pid}`` (Y / a pid), ``# CONFIG_X is not
set``, ``weighted_interleave/auto`` with nodeN files for memory nodes only, dax_hmem's
dev_dbg hand-off lines, ``regionZ/extended_linear_cache_size``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cxlctl.doctor import probes
from cxlctl.doctor.gather import gather
from cxlctl.doctor.model import Check
from cxlctl.doctor.report import exit_code, run
from cxlctl.hostio.host import Host
from cxlctl.tuning import engine
from tests.kit import FIXTURES, cli, copy_fixture

R612 = os.path.join(FIXTURES, "linux-6.12", "single-region-doctor")
IDLE = os.path.join(FIXTURES, "linux-6.12", "single-region-damon-idle")


def _write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    with open(path, "w") as f:
        f.write(text)


def _damon_stat(root: str) -> None:
    _write(root, "sys/module/damon_stat/parameters/enabled", "Y\n")
    _write(root, "sys/module/damon_stat/parameters/kdamond_pid", "412\n")


def _checks(root: str, answers: Optional[Dict[str, Tuple[int, str]]] = None) -> List[Check]:
    if answers is None:
        return run(gather(Host(root)))

    def runner(argv: Sequence[str]) -> Optional[Tuple[int, str]]:
        return (answers or {}).get(probes.key(argv))

    return run(gather(Host(root), runner=runner))


def _one(checks: Sequence[Check], cid: str) -> Check:
    found = [c for c in checks if c.id == cid]
    assert len(found) == 1, (cid, [c.id for c in checks])
    return found[0]


def test_damon_stat_is_explained_not_failed(tmp_path: Any) -> None:
    root = copy_fixture(R612, tmp_path / "t")
    assert not [c for c in _checks(root) if c.id.startswith("kernel.damon.")]  # 6.12: no module
    _damon_stat(root)
    c = _one(_checks(root), "kernel.damon.damon_stat")
    assert c.result == "note" and "pid 412" in c.message and "migrates nothing" in c.message
    # what a 7.3.4 guest showed: the kernel starts no other kdamond beside it (EBUSY)
    assert "no other kdamond starts (EBUSY)" in c.message
    assert "echo N > " in c.fix and "damon_stat.enabled=N" in c.fix
    assert c.evidence[1].value == "412"


def test_damon_tiering_is_refused_beside_damon_stat_with_the_fix(tmp_path: Any, monkeypatch: Any) -> None:
    """The kernel starts a DAMON module's kdamond exclusively (state=on of a sysfs kdamond got EBUSY
    in the 7.3.4 guest while DAMON_STAT ran): the plan refuses up front, naming the file that stops it."""
    from tests.test_tune_damon import _tree

    root = _tree("linux-6.12/single-region-damon-idle", tmp_path, monkeypatch)
    _damon_stat(root)
    p = engine.prepare(Host(root), "inference-damon").plan
    (why,) = p.refusals
    assert "damon_stat (kdamond pid 412)" in why and "(EBUSY)" in why
    assert "echo N > /sys/module/damon_stat/parameters/enabled" in why
    r = cli("--root", root, "tune", "apply", "inference-damon", env={"COLUMNS": "200"})
    assert r.returncode == 2 and "refused; nothing was changed" in r.stderr and "Traceback" not in r.stderr
    _write(root, "sys/module/damon_stat/parameters/enabled", "N\n")
    _write(root, "sys/module/damon_stat/parameters/kdamond_pid", "-1\n")
    assert not engine.prepare(Host(root), "inference-damon").plan.refusals


def test_ras_features_not_built_is_a_note_never_a_failure(tmp_path: Any) -> None:
    root = copy_fixture(R612, tmp_path / "t")
    c = _one(_checks(root), "kernel.ras-features")
    assert c.result == "note" and "this kernel predates EDAC_SCRUB" in c.message  # 6.12 has no such symbols
    (cfg,) = [n for n in os.listdir(os.path.join(root, "boot")) if n.startswith("config-")]
    path = os.path.join(root, "boot", cfg)
    with open(path) as f:
        text = f.read()
    os.unlink(path)
    with open(path, "w") as f:  # Debian 7.3's lines
        f.write(
            text
            + "# CONFIG_EDAC_SCRUB is not set\n# CONFIG_EDAC_ECS is not set\n# CONFIG_EDAC_MEM_REPAIR is not set\n"
            + "# CONFIG_CXL_FEATURES is not set\n# CONFIG_FWCTL is not set\n"
        )
    checks = _checks(root)
    c = _one(checks, "kernel.ras-features")
    assert c.result == "note" and "not built into this kernel: EDAC_SCRUB" in c.message
    assert "failed" not in c.message and "CONFIG_FWCTL" in c.fix
    assert [e.value for e in c.evidence][0] == "# CONFIG_EDAC_SCRUB is not set"
    assert not [x for x in checks if x.result == "fail" and "EDAC" in x.id]
    assert exit_code([c]) == 0


def test_weighted_interleave_nodes_only_for_memory_nodes(tmp_path: Any) -> None:
    root = copy_fixture(R612, tmp_path / "t")
    wi = "sys/kernel/mm/mempolicy/weighted_interleave"
    assert not [c for c in _checks(root) if c.id == "kernel.weighted-interleave.nodes"]  # 6.12: no auto, no rule
    _write(root, f"{wi}/auto", "false\n")  # a 6.16+ directory
    c = _one(_checks(root), "kernel.weighted-interleave.nodes")
    assert c.result == "ok" and "nodes with memory only" in c.message
    os.unlink(os.path.join(root, wi, "node1"))  # node1 (CXL, with memory) lost its file
    c = _one(_checks(root), "kernel.weighted-interleave.nodes")
    assert c.result == "warn" and c.message.startswith("node(s) 1 have memory but no weighted_interleave/nodeN")


LOG_CLAIMED = "[    5.1] hmem hmem.0: CXL claims resource, dropping: [mem 0x1050000000-0x106fffffff flags 0x200]\n"
LOG_UNCLAIMED = (
    "[    2.0] hmem hmem.0: await CXL initial probe: [mem 0x1050000000-0x106fffffff flags 0x200]\n"
    "[    5.1] hmem hmem.0: CXL did not claim resource, registering: [mem 0x1050000000-0x106fffffff flags 0x200]\n"
)


def test_hmem_handoff_from_the_kernel_log(tmp_path: Any) -> None:
    c = _one(_checks(R612, {"dmesg": (0, "[ 0.0] Linux version\n" + LOG_CLAIMED)}), "firmware.hmem-handoff")
    assert c.result == "ok" and "[mem 0x1050000000-0x106fffffff flags 0x200]" in c.message
    c = _one(_checks(R612, {"dmesg": (0, LOG_UNCLAIMED)}), "firmware.hmem-handoff")
    assert c.result == "warn" and "without a CXL region" in c.message
    assert not [x for x in _checks(R612, {"dmesg": (0, "[ 0.0] Linux version\n")}) if x.id == "firmware.hmem-handoff"]


def test_dmesg_probe_keeps_only_cxl_and_hmem_lines() -> None:
    got = probes.collect(
        lambda argv: (0, "[ 0.0] secret unrelated line\n" + LOG_CLAIMED) if argv == ("dmesg",) else None
    )
    assert got["dmesg"].out == LOG_CLAIMED
    saved: Any = probes.to_json(got)["probes"]
    assert saved["dmesg"]["out"] == LOG_CLAIMED  # what a record saves


def test_extended_linear_cache_is_noted(tmp_path: Any) -> None:
    root = copy_fixture(R612, tmp_path / "t")
    assert not [c for c in _checks(root) if c.id.endswith(".linear-cache")]
    _write(root, "sys/bus/cxl/devices/region0/extended_linear_cache_size", "268435456\n")
    c = _one(_checks(root), "devices.region.region0.linear-cache")
    assert c.result == "note" and "256 MiB" in c.message.replace("256.0 MiB", "256 MiB")
    rep = json.loads(cli("--root", root, "doctor", "--json").stdout)
    assert any(x["id"] == "devices.region.region0.linear-cache" for x in rep["checks"])
