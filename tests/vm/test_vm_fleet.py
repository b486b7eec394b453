"""Fleet pieces on real 6.12 and 7.x kernels (one boot each, topology switch2): devdax KV backends and the DaemonSet's command.

In the guest:

1. ``cxlctl region create --ways 1 --online devdax`` (a character device,
   ``/dev/daxN.0``) and a second 1-way region onlined as system RAM (a CXL NUMA
   node, so the node also has tiered memory to label); ``cxlctl record`` of
   that state is kept in $OUT (tests/vm/record_fleet.py records the same state
   as the fixture ``linux-6.12/switch2-devdax``).
2. ``cxlctl launch lmcache --devdax auto -- server …`` with a fake ``lmcache``
   (a shell script answering ``server --help`` with a devdax-capable help text,
   then exec'ing a small C program) that parses ``--l1-devdax-path`` and
   ``--l1-size-gb`` as LMCache does (``int(size_gb * 2**30)`` bytes), maps that
   much of the device ``MAP_SHARED``, writes and reads back a byte per 2 MiB
   page, and reports; the whole device is mapped (no ``--kv-size``).
3. ``cxlctl launch exec --devdax dax… --mooncake --kv-size 64M`` of the same
   program in Mooncake mode: it maps ``MC_CXL_DEV_SIZE`` bytes of
   ``MC_CXL_DEV_PATH`` (Mooncake's version comes from a fake
   ``mooncake-transfer-engine`` distribution the guest's python3 sees).
4. The DaemonSet's container command from deploy/kubernetes/cxlctl-daemonset.yaml,
   with ``--once``, on the ConfigMap's cxlctl.toml placed where the pod mounts it
   (``/etc/cxlctl/cxlctl.toml``): it must apply the ConfigMap's profile, write
   the NFD feature file (with the new labels and an expiry), and leave the
   devdax device alone.

The host checks what the guest left in $OUT and prints the figures.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

from tests.kit import REPO
from tests.launch_support import HELP_LMCACHE
from tests.vm.harness import build_c, kernels_for, out_json, out_text, run_guest

pytestmark = pytest.mark.vm

DDMAP_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
/* ddmap lmcache REPORT ARGS... : map --l1-size-gb GiB of --l1-devdax-path (as LMCache's server would)
   ddmap env REPORT            : map MC_CXL_DEV_SIZE bytes of MC_CXL_DEV_PATH (as Mooncake's CXL transport)
   Writes one byte per 2 MiB page, reads them back, reports key=value lines to REPORT. */
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *path = NULL;
    size_t size = 0;
    FILE *r = fopen(argv[2], "w");
    if (!r) { perror(argv[2]); return 1; }
    fprintf(r, "pid=%d\n", (int)getpid());
    for (int i = 0; i < argc; i++) fprintf(r, "argv=%s\n", argv[i]);
    if (strcmp(argv[1], "lmcache") == 0) {
        for (int i = 3; i + 1 < argc; i++) {
            if (strcmp(argv[i], "--l1-devdax-path") == 0) path = argv[i + 1];
            if (strcmp(argv[i], "--l1-size-gb") == 0) size = (size_t)(strtod(argv[i + 1], NULL) * 1073741824.0);
        }
    } else {
        path = getenv("MC_CXL_DEV_PATH");
        const char *s = getenv("MC_CXL_DEV_SIZE");
        if (s) size = (size_t)strtoull(s, NULL, 10);
    }
    fprintf(r, "path=%s\nsize=%zu\n", path ? path : "", size);
    if (!path || !size) { fprintf(r, "error=no path or size\n"); fclose(r); return 1; }
    int fd = open(path, O_RDWR);
    if (fd < 0) { fprintf(r, "error=open: %s\n", strerror(errno)); fclose(r); return 1; }
    struct stat st;
    fstat(fd, &st);
    fprintf(r, "chardev=%d\n", S_ISCHR(st.st_mode) ? 1 : 0);
    unsigned char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { fprintf(r, "error=mmap: %s\n", strerror(errno)); fclose(r); return 1; }
    size_t pages = 0, bad = 0, step = 2u << 20;
    for (size_t off = 0; off < size; off += step, pages++) p[off] = (unsigned char)(0xA5 ^ (off >> 21));
    p[size - 1] = 0x5A;
    for (size_t off = 0; off < size; off += step) if (p[off] != (unsigned char)(0xA5 ^ (off >> 21))) bad++;
    if (p[size - 1] != 0x5A) bad++;
    fprintf(r, "mapped=1\npages=%zu\nbad=%zu\n", pages, bad);
    munmap(p, size);
    close(fd);
    fclose(r);
    return bad ? 1 : 0;
}
"""

FAKE_LMCACHE_SH = r"""#!/bin/bash
# fake LMCache: answers `server --help` like a build with the devdax L1, then maps the device
if [ "$1" = server ] && [[ "$*" == *--help* ]]; then cat "@HELP@"; exit 0; fi
exec "@DDMAP@" lmcache "$OUT/lmcache.report" "$@"
"""

GUEST = r"""
cx() {  # $1 = label, rest = cxlctl arguments: stdout, stderr, rc in $OUT
  local label=$1; shift
  "$CXLCTL" "$@" > "$OUT/$label.out" 2> "$OUT/$label.err"
  echo $? > "$OUT/$label.rc"
}

# 1. a devdax region and a system-ram region, one memdev each
cx create-devdax region create --ways 1 --online devdax --json
cx create-ram region create --ways 1 --online system-ram --json
udevadm settle --timeout=30 || true
ls -l /dev/dax* > "$OUT/dev-dax.txt" 2>&1
cx status status --json
# record onto the guest's tmpfs and copy once (many small writes through the 9p rwdir are slow under TCG)
cx record record --include-process-data /tmp/fleet-record && cp -a /tmp/fleet-record "$OUT/record"
DAX=$("$PY" -c 'import json,sys; print([d["chardev"] for d in json.load(open(sys.argv[1]))["dax_devices"] if d["mode"]=="devdax"][0])' "$OUT/status.out")
echo "$DAX" > "$OUT/devdax-name"

# 2. LMCache's server with its L1 on the device (the whole device)
cx lmcache-dry launch lmcache --allow-root --devdax auto --engine-cmd "$FAKELM" --dry-run --json -- server --eviction-policy LRU
"$PY" -m cxlctl launch lmcache --allow-root --devdax auto --engine-cmd "$FAKELM" -- server --eviction-policy LRU \
  > "$OUT/lmcache.out" 2> "$OUT/lmcache.err" &
pid=$!
echo $pid > "$OUT/lmcache.launch-pid"
wait $pid; echo $? > "$OUT/lmcache.rc"

# 3. Mooncake's CXL transport: 64 MiB of the device, through a plain program
export PYTHONPATH="$FAKEPY"
cx mooncake-dry launch exec --allow-root --devdax "$DAX" --mooncake --kv-size 64M --dry-run --json -- "$DDMAP" env "$OUT/mooncake.report"
"$PY" -m cxlctl launch exec --allow-root --devdax "$DAX" --mooncake --kv-size 64M -- "$DDMAP" env "$OUT/mooncake.report" \
  > "$OUT/mooncake.out" 2> "$OUT/mooncake.err" &
pid=$!
echo $pid > "$OUT/mooncake.launch-pid"
wait $pid; echo $? > "$OUT/mooncake.rc"
unset PYTHONPATH

# 4. the DaemonSet's container command on the ConfigMap's file, once
mkdir -p /etc/cxlctl/tls /etc/kubernetes/node-feature-discovery/features.d
cp "$TOOLS/cxlctl.toml" /etc/cxlctl/cxlctl.toml
# the ConfigMap's web.yml and, where the pod has the Secret cxlctl-daemon-tls, a certificate made by the test
cp "$TOOLS/web.yml" /etc/cxlctl/web.yml
cp "$TOOLS/tls.crt" "$TOOLS/tls.key" /etc/cxlctl/tls/
cx daemon-config daemon config --config /etc/cxlctl/cxlctl.toml --json
cx daemon "${DAEMON_ARGS[@]}"
cp /etc/kubernetes/node-feature-discovery/features.d/cxlctl "$OUT/nfd.txt" 2>/dev/null
# the kernel's own weighted-interleave mode file (6.16+; none before: the mode is manual)
cat /sys/kernel/mm/mempolicy/weighted_interleave/auto > "$OUT/wi-auto.txt" 2>/dev/null || true
cx tune-status tune status --json
cx status-after status --json
cx revert tune revert --json
exit 0
"""


def _report(out: Path, name: str) -> Dict[str, Any]:
    rep: Dict[str, Any] = {"argv": []}
    for line in out_text(out, name).splitlines():
        k, _, v = line.partition("=")
        if k == "argv":
            rep["argv"].append(v)
        else:
            rep[k] = v
    return rep


def _manifest(kind: str) -> Dict[str, Any]:
    with open(Path(REPO) / "deploy" / "kubernetes" / "cxlctl-daemonset.yaml") as f:
        docs: List[Dict[str, Any]] = [d for d in yaml.safe_load_all(f) if d]
    return next(d for d in docs if d["kind"] == kind)


# the devdax backends and the DaemonSet command are userspace over files both kernels write alike:
# one kernel in CI (kernels_for; CXLCTL_VM_KERNELS=all runs both)
@pytest.mark.parametrize("series", kernels_for("6.12", "7.x", ci=["6.12"]))
def test_fleet_devdax_backends_and_daemonset_command(series: str, tmp_path: Path) -> None:
    work = tmp_path / "vm"
    tools = work / "tools"
    build_c(tools, "ddmap", DDMAP_C)
    (tools / "lmcache-help.txt").write_text(HELP_LMCACHE)
    fake = tools / "lmcache"
    fake.write_text(
        FAKE_LMCACHE_SH.replace("@HELP@", str(tools / "lmcache-help.txt")).replace("@DDMAP@", str(tools / "ddmap"))
    )
    fake.chmod(0o755)
    dist = tools / "py" / "mooncake_transfer_engine-0.3.12.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mooncake-transfer-engine\nVersion: 0.3.12\n")
    # the DaemonSet's ConfigMap file and container command, from the manifest itself
    (tools / "cxlctl.toml").write_text(_manifest("ConfigMap")["data"]["cxlctl.toml"])
    (tools / "web.yml").write_text(_manifest("ConfigMap")["data"]["web.yml"])
    subprocess.run(  # the daemon's TLS certificate for 127.0.0.1 (the pod's Secret cxlctl-daemon-tls)
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(tools / "tls.key"), "-out", str(tools / "tls.crt")],
        check=True,
        capture_output=True,
    )
    cmd = _manifest("DaemonSet")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["cxlctl", "daemon", "run"]
    daemon_args = ["daemon", "run", "--once", *cmd[3:]]
    script = (
        f"export TOOLS={tools} DDMAP={tools / 'ddmap'} FAKELM={fake} FAKEPY={tools / 'py'} "
        f"CXLCTL_CACHE_DIR={work / 'cache'}\n"
        f"DAEMON_ARGS=({' '.join(daemon_args)})\n" + GUEST
    )
    res = run_guest("switch2", script, kernel=series, workdir=work, timeout=900).check()
    report = [f"guest {res.kernel.release}, boot {res.boot_seconds} s, wall {res.wall_seconds} s"]
    report += check(res.outdir)
    print("\n".join(report))
    (tmp_path / "measured.txt").write_text("\n".join(report) + "\n")


def check(out: Path) -> List[str]:
    """The host's checks of what the guest left in ``out`` (usable on a kept run's $OUT)."""
    report: List[str] = []

    # -- 1. the regions
    assert out_text(out, "create-devdax.rc").strip() == "0", out_text(out, "create-devdax.err", missing_ok=True)
    assert out_text(out, "create-ram.rc").strip() == "0", out_text(out, "create-ram.err", missing_ok=True)
    dax = out_text(out, "devdax-name").strip()
    status = out_json(out, "status.out")
    dev = next(d for d in status["dax_devices"] if d["chardev"] == dax)
    assert dev["mode"] == "devdax" and dev["size"] == 256 << 20
    assert f"/dev/{dax}" in out_text(out, "dev-dax.txt")
    cxl_nodes = [n["id"] for n in status["nodes"] if n["kind"] == "cxl"]
    assert len(cxl_nodes) == 1, "the system-ram region is a CXL NUMA node"
    report.append(f"{dax}: devdax, {dev['size'] >> 20} MiB, align {dev['align']}; CXL node {cxl_nodes[0]}")

    # -- 2. LMCache: the whole device, right flags, mapped by the engine that replaced cxlctl
    dry = out_json(out, "lmcache-dry.out")
    assert dry["devdax"]["device"] == dax and dry["devdax"]["size"] == 256 << 20
    assert [c["status"] for c in dry["checks"] if c["name"] == "devdax"] == ["ok"], dry["checks"]
    assert out_text(out, "lmcache.rc").strip() == "0", out_text(out, "lmcache.err", missing_ok=True)
    lm = _report(out, "lmcache.report")
    assert lm["pid"] == out_text(out, "lmcache.launch-pid").strip(), "exec: the engine has cxlctl's PID"
    argv = lm["argv"]
    assert argv[argv.index("--l1-devdax-path") + 1] == f"/dev/{dax}"
    assert argv[argv.index("--l1-size-gb") + 1] == "0.25"
    assert "--no-l1-use-lazy" in argv and argv[argv.index("--shm-name") + 1] == ""
    assert (lm["path"], int(lm["size"]), lm["chardev"], lm["mapped"], lm["bad"]) == (
        f"/dev/{dax}",
        256 << 20,
        "1",
        "1",
        "0",
    )
    report.append(f"LMCache fake: mapped {int(lm['size']) >> 20} MiB of /dev/{dax}, {lm['pages']} 2 MiB pages verified")

    # -- 3. Mooncake: 64 MiB through MC_CXL_DEV_PATH / MC_CXL_DEV_SIZE
    dry = out_json(out, "mooncake-dry.out")
    assert dry["env"]["MC_CXL_DEV_PATH"] == f"/dev/{dax}" and dry["env"]["MC_CXL_DEV_SIZE"] == str(64 << 20)
    assert dry["devdax"]["mooncake_version"] == "0.3.12"
    assert out_text(out, "mooncake.rc").strip() == "0", out_text(out, "mooncake.err", missing_ok=True)
    mc = _report(out, "mooncake.report")
    assert mc["pid"] == out_text(out, "mooncake.launch-pid").strip()
    assert (mc["path"], int(mc["size"]), mc["chardev"], mc["mapped"], mc["bad"]) == (
        f"/dev/{dax}",
        64 << 20,
        "1",
        "1",
        "0",
    )
    report.append(
        f"Mooncake fake: mapped {int(mc['size']) >> 20} MiB via MC_CXL_DEV_PATH, {mc['pages']} pages verified"
    )

    # -- 4. the DaemonSet's command on the ConfigMap's file
    assert out_text(out, "daemon-config.rc").strip() == "0", out_text(out, "daemon-config.err", missing_ok=True)
    assert out_text(out, "daemon.rc").strip() == "0", out_text(out, "daemon.err", missing_ok=True)
    tune = out_json(out, "tune-status.out")
    assert tune["active_profile"] == "inference-bandwidth", tune
    nfd = out_text(out, "nfd.txt")
    assert re.search(r"^# \+expiry-time=\S+Z$", nfd, re.M), nfd
    labels = dict(line.split("=", 1) for line in nfd.splitlines() if line and not line.startswith("#"))
    ns = "feature.node.kubernetes.io/"
    assert labels[ns + "cxl.present"] == "true" and labels[ns + "cxl.profile"] == "inference-bandwidth"
    tier = [k for k in labels if re.fullmatch(re.escape(ns) + r"cxl\.tier-rank-1\.online-mib", k)]
    assert tier and int(labels[tier[0]]) > 0, labels
    # inference-bandwidth writes no weights without bandwidth figures, so 7.x's auto mode (true at boot)
    # stays on; 6.12 has no auto mode
    mode = "auto" if out_text(out, "wi-auto.txt").strip() == "true" else "manual"
    assert labels[ns + "cxl.weighted-interleave.mode"] == mode, (labels, out_text(out, "wi-auto.txt"))
    assert labels[ns + "cxl.tiering"] in ("none", "numa-balancing"), labels
    after = out_json(out, "status-after.out")
    assert next(d for d in after["dax_devices"] if d["chardev"] == dax)["mode"] == "devdax", "the daemon left it alone"
    report.append(
        "daemon --once on the ConfigMap: profile "
        + tune["active_profile"]
        + ", NFD: "
        + ", ".join(f"{k[len(ns) :]}={v}" for k, v in sorted(labels.items()) if "tier" in k or "tiering" in k)
        + (f", health={labels[ns + 'cxl.health']}" if ns + "cxl.health" in labels else ", no health label (no data)")
    )
    return report
