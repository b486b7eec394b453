"""The recorded Linux 7.x trees (``fixtures/linux-7.x/``, Debian 13 backports' 7.3.4 under QEMU)
against what 6.12 records: where the ABI differs, cxlctl reads both (issue 20 §1).

* ``/proc/vmstat`` gains ``pgscan_proactive``/``pgsteal_proactive`` (memory.reclaim and
  nodeN/reclaim): ``stat`` reports them on 7.x and lists them as not available on 6.12.
* The kernel config lives only at ``/usr/lib/modules/RELEASE/config``: doctor reads it there.
* ``weighted_interleave/`` has ``auto`` and a ``nodeN`` file only for nodes with memory.
* ``cxl_port``/``cxl_core`` are built in; DAMON_STAT's module runs its own kdamond.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

import pytest

from cxlctl.doctor.gather import gather
from cxlctl.doctor.report import run
from cxlctl.hostio.host import Host
from tests.kit import FIXTURES, cli

K7 = os.path.join(FIXTURES, "linux-7.x")
K612 = os.path.join(FIXTURES, "linux-6.12")


def _file(root: str, path: str) -> str:
    with open(os.path.join(root, path.lstrip("/"))) as f:
        return f.read()


def _vmstat(root: str) -> Dict[str, int]:
    return {
        k: int(v) for k, v in (ln.split() for ln in _file(root, "/proc/vmstat").splitlines() if len(ln.split()) == 2)
    }


def _stat(root: str) -> Dict[str, Any]:
    out: Dict[str, Any] = json.loads(cli("--root", root, "stat", "--json", check=True).stdout)
    return out


@pytest.mark.parametrize("tree", ["single-region", "hb2x2-region"])
def test_proactive_reclaim_counters_equal_the_kernels_file(tree: str) -> None:
    root = os.path.join(K7, tree)
    kernel = _vmstat(root)
    rep = _stat(root)
    for name in ("pgscan_proactive", "pgsteal_proactive"):
        assert name in kernel, f"7.x's /proc/vmstat has {name}"
        assert rep["system"]["counters"][name] == kernel[name]
        assert name not in rep["system"]["missing"]
    text = cli("--root", root, "stat", env={"COLUMNS": "80"}, check=True).stdout
    assert (
        f"proactive reclaim: scanned {kernel['pgscan_proactive']}, reclaimed {kernel['pgsteal_proactive']}" in text
    ), text


def test_612_has_no_proactive_reclaim_counters() -> None:
    root = os.path.join(K612, "single-region-telemetry")
    assert "pgsteal_proactive" not in _vmstat(root)
    rep = _stat(root)
    assert {"pgscan_proactive", "pgsteal_proactive"} <= set(rep["system"]["missing"])
    text = cli("--root", root, "stat", env={"COLUMNS": "80"}, check=True).stdout
    assert "proactive reclaim:" not in text


def test_doctor_reads_the_config_where_debian_13_installs_it() -> None:
    root = os.path.join(K7, "single-region")
    rel = _file(root, "/proc/sys/kernel/osrelease").strip()
    assert rel.startswith("7.")
    assert not os.path.exists(os.path.join(root, "boot", f"config-{rel}"))
    c = [x for x in run(gather(Host(root))) if x.id == "kernel.config"][0]
    assert c.result == "ok", c.message
    assert c.evidence[0].source == f"/usr/lib/modules/{rel}/config"


def test_weighted_interleave_auto_and_memory_nodes_only() -> None:
    root = os.path.join(K7, "single-region")
    st = json.loads(cli("--root", root, "status", "--json", check=True).stdout)
    wi = st["weighted_interleave"]
    assert wi["auto"] is True, wi
    mem_nodes = sorted(n["id"] for n in st["nodes"] if n["has_memory"])
    assert sorted(int(k) for k in wi["weights"]) == mem_nodes
    text = cli("--root", root, "status", env={"COLUMNS": "80"}, check=True).stdout
    assert "(auto=true)" in text
