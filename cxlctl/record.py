"""``cxlctl record DEST``: copy exactly what the inventory reads into a tree.

The recorder runs one scan with access logging on, then re-creates every touched
path under DEST — directories, files (with the very bytes the scan parsed) and
symlinks (kept relative, as the kernel makes them) — and writes a manifest plus
the ``status --json`` of that same scan.  Because the copy holds the bytes the
scan saw, ``cxlctl --root DEST status --json`` reproduces that document exactly.

Used both to make test fixtures in the QEMU VM and as a bug-report attachment.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional, Sequence, Set

from .hostio import paths
from .hostio.host import Host
from .hostio.reader import Reader
from .model import Node

MANIFEST = paths.RECORD_MANIFEST.lstrip("/")
STATUS = "cxlctl-status.json"


class RecordError(Exception):
    pass


def _copy_path(src: Host, dest: str, path: str, data: Optional[bytes], seen: Set[str], depth: int = 0) -> None:
    """Re-create ``path`` (absolute-looking, under the root) in ``dest``, links included.

    Walks the path one component at a time, like realpath(3): a component that is a
    symlink is re-created as the same (relative) link and the walk continues at its
    target, so ``/sys/bus/cxl/devices/mem0/serial`` brings the link and the real
    device directory with it.  ``data`` is what the scan read at ``path`` (None for
    paths that were only listed, link-read or checked for existence).
    """
    if depth > 40:
        return  # link loop; nothing sane to copy
    parts = [p for p in path.split("/") if p]
    cur = ""
    for i, part in enumerate(parts):
        cand = f"{cur}/{part}"
        here = src.path(cand)
        dst = dest + cand
        last = i == len(parts) - 1
        if os.path.islink(here):
            target = os.readlink(here)
            if os.path.isabs(target):  # keep the copy self-contained: make it relative
                target = os.path.relpath(target, os.path.dirname(cand) or "/")
            if not os.path.lexists(dst):
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                os.symlink(target, dst)
            resolved = os.path.normpath(os.path.join(os.path.dirname(cand) or "/", target))
            rest = "/".join(parts[i + 1 :])
            _copy_path(src, dest, resolved + ("/" + rest if rest else ""), data, seen, depth + 1)
            return
        if not os.path.lexists(here):
            return
        if os.path.isdir(here):
            os.makedirs(dst, exist_ok=True)
        elif last and data is not None:
            seen.add(cand)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with open(dst, "wb") as f:
                f.write(data)
        cur = cand


#: processes whose numa_maps a record keeps (the largest by RSS), and the time allowed for them
RECORD_TOP_PROCESSES = 8
RECORD_PROCESS_BUDGET_S = 2.0


def _telemetry(reader: Reader, nodes: Sequence[Node]) -> None:
    """Read what ``cxlctl stat`` reads, through the logging reader, so the record holds it too:
    node vmstat/meminfo/numastat, /proc/vmstat, the cgroups' memory.numa_stat and memory.stat,
    and the largest processes' numa_maps, statm, comm and cgroup (no environ, no cmdline); and
    what ``tune reclaim --node`` reads of each DRAM node (the vm sysctls of the node-reclaim gate)."""
    from .telemetry.sample import kinds_of, list_cgroups, read_sample
    from .tuning.reclaim import node_gate

    read_sample(
        reader,
        kinds_of(nodes),
        cgroups=list_cgroups(reader),
        top=RECORD_TOP_PROCESSES,
        budget_s=RECORD_PROCESS_BUDGET_S,
    )
    for n in nodes:
        if n.kind != "cxl":
            node_gate(reader, n.id)


def _doctor_reads(host: Host, reader: Reader, inv: Any) -> Optional[Dict[str, Any]]:
    """Run ``cxlctl doctor``'s reads with the recording reader, so a record replays doctor too
    (kernel config, modules, command line, iomem, ACPI table names, udev rules that matter);
    returns the tools' answers to save beside the tree (asked live on ``/``, else those the
    tree was recorded with; None when it has none)."""
    from .doctor.gather import gather

    facts = gather(host, reader=reader, inv=inv)
    return facts.probes  # a record of a record keeps the answers saved with it


def _keep_names(src: Host, dest: str, log: Set[str], seen: Set[str]) -> None:
    """Files whose *names* were used but not their content (the ACPI tables doctor lists:
    root-only binaries it never parses) are re-created empty, so a replay lists them too."""
    from .hostio import paths

    prefix = paths.ACPI_TABLES + "/"
    for path in sorted(log):
        if path.startswith(prefix) and "/" not in path[len(prefix) :] and path not in seen:
            if os.path.isfile(src.path(path)) and not os.path.lexists(dest + path):
                os.makedirs(os.path.dirname(dest + path), exist_ok=True)
                open(dest + path, "wb").close()
                seen.add(path)


def record(host: Host, dest: str, *, force: bool = False) -> Dict[str, Any]:
    """Scan ``host`` and write the record to ``dest``; returns the manifest."""
    from . import __version__
    from .inventory import scan
    from .status_json import to_dict

    if not dest.strip():
        raise RecordError("DEST is empty; name the directory to create, e.g. cxlctl record ./host-record")
    if os.path.lexists(dest) and not os.path.isdir(dest):  # --force writes into a directory, never over a file
        raise RecordError(f"{dest} exists and is not a directory; choose a new directory")
    if os.path.exists(dest) and os.listdir(dest) and not force:
        raise RecordError(f"{dest} exists and is not empty; choose a new directory or pass --force")
    reader = host.new_reader(log=True)
    inv = scan(host, reader)
    # DAMON's kdamonds (cxlctl.damon): not part of the inventory, but tuning reads them
    from .damon.sysfs import read_damon

    read_damon(reader)
    tools = _doctor_reads(host, reader, inv)
    # a reader of its own: files both read (node meminfo) keep the bytes the scan parsed, so the
    # record's status document replays exactly
    tel = host.new_reader(log=True)
    _telemetry(tel, inv.nodes)
    from .k8s.nfd import tiering_engine

    tiering_engine(host, reader)  # the NFD tiering label's inputs (a running kdamond) go into the record too
    os.makedirs(dest, exist_ok=True)
    seen: Set[str] = set()
    assert reader.log is not None and tel.log is not None
    for path in sorted(reader.log | tel.log):
        data = reader.captured(path)
        _copy_path(host, os.path.abspath(dest), path, tel.captured(path) if data is None else data, seen)
    _keep_names(host, os.path.abspath(dest), reader.log, seen)
    if tools is not None:
        from .doctor import probes

        with open(os.path.join(dest, probes.PROBES_FILE), "w") as f:
            json.dump(probes.to_json(tools), f, indent=2)
            f.write("\n")
    import platform  # only `record` needs uname

    manifest: Dict[str, Any] = {
        "format": 1,
        "cxlctl_version": __version__,
        "kernel": inv.kernel,
        "uname": " ".join(platform.uname()),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "as_root": os.geteuid() == 0,
        "source_root": host.root,
        "files": len(seen),
        "paths_touched": len(reader.log | tel.log),
    }
    with open(os.path.join(dest, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    with open(os.path.join(dest, STATUS), "w") as f:
        json.dump(to_dict(inv), f, indent=2)
        f.write("\n")
    return manifest


def as_json(manifest: Dict[str, Any], dest: str) -> Dict[str, Any]:
    """``cxlctl record --json``: where the record went and its manifest (the files it wrote are named)."""
    return {
        "dest": os.path.abspath(dest),
        "files": {"manifest": MANIFEST, "status": STATUS},
        "manifest": manifest,
    }
