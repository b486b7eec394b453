"""``cxlctl record DEST``: copy exactly what the inventory reads into a tree.

The recorder runs one scan with access logging on, then re-creates every touched
path under DEST — directories, files (with the very bytes the scan parsed) and
symlinks (kept relative, as the kernel makes them) — and writes a manifest plus
the ``status --json`` of that same scan.  Because the copy holds the bytes the
scan saw, ``cxlctl --root DEST status --json`` reproduces that document exactly.

Used both to make test fixtures in the QEMU VM and as a bug-report attachment.

A record is made to be handed to someone else, and often by root, so (issue 43):

* DEST is made private (0700) by the user recording; an existing DEST must be an empty
  directory of that user's own (``--force``: non-empty), and the path to it may not pass
  through a symbolic link.  Every write below it goes through a directory handle proven
  inside DEST (the write fence, :func:`~cxlctl.hostio.write.dir_fenced`) and ``O_NOFOLLOW``,
  so a link planted in DEST (``DEST/proc`` -> ``/etc``) is refused, never written through.
* By default it holds no process data and no kernel addresses: no ``/proc/PID`` (names,
  cgroups, ``numa_maps`` with file paths), no cgroup below the root, only the kernel
  command-line options cxlctl checks, and ``/proc/modules`` and ``/proc/iomem`` with their
  addresses zeroed (as the kernel shows them to other users).  ``--include-process-data``
  keeps all of it (the fixture recorders need it: ``cxlctl stat``'s and doctor's replays).
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any, Dict, Optional, Sequence, Set

from .hostio import paths
from .hostio.host import Host
from .hostio.reader import Fence, Reader
from .hostio.write import OutsideRoot, dir_fenced
from .model import Node

MANIFEST = paths.RECORD_MANIFEST.lstrip("/")
STATUS = "cxlctl-status.json"


class RecordError(Exception):
    pass


class _Dest:
    """DEST as the only place a record writes: every directory is opened through the fence
    (a link leading out of DEST is :class:`~cxlctl.hostio.write.OutsideRoot`, exit 2), and
    every file and link is created relative to that handle, never through a link."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path).rstrip("/") or "/"
        self.fence = Fence(self.path)

    def _dir(self, rel_dir: str) -> int:
        try:
            return dir_fenced(self.fence, self.path + rel_dir.rstrip("/"), create=True)
        except OutsideRoot as e:
            raise RecordError(
                f"{e.link} is a link leading out of {self.path} (to {e.target}); nothing was written through it: "
                "record into a new directory"
            ) from None

    def lexists(self, rel: str) -> bool:
        return os.path.lexists(self.path + rel)

    def makedirs(self, rel: str) -> None:
        os.close(self._dir(rel))

    def write(self, rel: str, data: bytes) -> None:
        d, _, base = rel.rpartition("/")
        dfd = self._dir(d)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(base, flags, 0o644, dir_fd=dfd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        finally:
            os.close(dfd)

    def symlink(self, rel: str, target: str) -> None:
        d, _, base = rel.rpartition("/")
        dfd = self._dir(d)
        try:
            os.symlink(target, base, dir_fd=dfd)
        finally:
            os.close(dfd)


def _open_dest(dest: str, force: bool) -> _Dest:
    """Make (or check) DEST: a directory of this user's own, mode 0700, not reached through a link.

    Why each rule: a record run by root holds root-only files; in a directory another user
    owns (or one whose path a link decides) that user could read them, or swap a directory
    for a link and have root write elsewhere.
    """
    if not dest.strip():
        raise RecordError("DEST is empty; name the directory to create, e.g. cxlctl record ./host-record")
    full = os.path.abspath(dest)
    parent = os.path.dirname(full)
    if os.path.realpath(parent) != parent:
        raise RecordError(
            f"{dest}: the path to it passes through a symbolic link ({parent} is really {os.path.realpath(parent)}); "
            "name the real directory"
        )
    if os.path.islink(full):
        raise RecordError(f"{dest} is a symbolic link; choose a new directory")
    if os.path.lexists(full) and not os.path.isdir(full):  # --force writes into a directory, never over a file
        raise RecordError(f"{dest} exists and is not a directory; choose a new directory")
    try:
        os.mkdir(full, 0o700)
        made = True
    except FileExistsError:
        made = False
    if not made:
        st = os.lstat(full)
        if st.st_uid != os.geteuid():
            raise RecordError(
                f"{dest} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}); choose a new directory"
            )
        if os.listdir(full) and not force:
            raise RecordError(f"{dest} exists and is not empty; choose a new directory or pass --force")
    fd = os.open(full, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchmod(fd, 0o700)  # an existing DEST (empty, or --force) may be 0755: made private too
    finally:
        os.close(fd)
    return _Dest(full)


def _copy_path(src: Host, dest: _Dest, path: str, data: Optional[bytes], seen: Set[str], depth: int = 0) -> None:
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
        last = i == len(parts) - 1
        if os.path.islink(here):
            target = os.readlink(here)
            if os.path.isabs(target):  # keep the copy self-contained: make it relative
                target = os.path.relpath(target, os.path.dirname(cand) or "/")
            if not dest.lexists(cand):
                dest.symlink(cand, target)
            resolved = os.path.normpath(os.path.join(os.path.dirname(cand) or "/", target))
            rest = "/".join(parts[i + 1 :])
            _copy_path(src, dest, resolved + ("/" + rest if rest else ""), data, seen, depth + 1)
            return
        if not os.path.lexists(here):
            return
        if os.path.isdir(here):
            dest.makedirs(cand)
        elif last and data is not None:
            seen.add(cand)
            dest.write(cand, data)
        cur = cand


#: /proc/PID, /proc/self, /proc/thread-self: one process's data (names, cgroups, numa_maps)
_PROCESS = re.compile(r"^/proc/(?:[0-9]+|self|thread-self)(?:/|$)")
_HEX_RANGE = re.compile(r"^(\s*)([0-9a-fA-F]+)-([0-9a-fA-F]+)", re.M)
_HEX_ADDR = re.compile(r"0x[0-9a-fA-F]+")


def private(path: str) -> bool:
    """Is ``path`` left out of a record without ``--include-process-data``?  A process's
    files, and a cgroup's below the root (their names are the host's services and containers)."""
    if _PROCESS.match(path):
        return True
    cg = paths.CGROUP_DIR + "/"
    return path.startswith(cg) and "/" in path[len(cg) :]


def scrub(path: str, data: bytes) -> bytes:
    """What a record keeps of ``path``'s bytes without ``--include-process-data``: the kernel
    command line reduced to the options doctor judges, and the kernel's addresses in
    ``/proc/modules`` and ``/proc/iomem`` zeroed (as the kernel shows both to other users:
    doctor then says its iomem check needs root).  Other files are kept as read."""
    if path == paths.PROC_CMDLINE:
        from .doctor.kernel import judged

        kept = [t for t in data.decode("utf-8", "replace").split() if judged(t)]
        return (" ".join(kept) + "\n").encode()
    if path == paths.PROC_MODULES:
        return _HEX_ADDR.sub(lambda m: "0x" + "0" * (len(m.group(0)) - 2), data.decode("utf-8", "replace")).encode()
    if path == paths.PROC_IOMEM:
        text = data.decode("utf-8", "replace")
        return _HEX_RANGE.sub(lambda m: m.group(1) + "0" * len(m.group(2)) + "-" + "0" * len(m.group(3)), text).encode()
    return data


#: processes whose numa_maps a record keeps (the largest by RSS), and the time allowed for them
RECORD_TOP_PROCESSES = 8
RECORD_PROCESS_BUDGET_S = 2.0


def _telemetry(reader: Reader, nodes: Sequence[Node], processes: bool) -> None:
    """Read what ``cxlctl stat`` reads, through the logging reader, so the record holds it too:
    node vmstat/meminfo/numastat, /proc/vmstat, the cgroups' memory.numa_stat and memory.stat,
    and the largest processes' numa_maps, statm, comm and cgroup (no environ, no cmdline); and
    what ``tune reclaim --node`` reads of each DRAM node (the vm sysctls of the node-reclaim gate).
    Without ``processes`` (``--include-process-data``) no cgroup or process is even read."""
    from .telemetry.sample import kinds_of, list_cgroups, read_sample
    from .tuning.reclaim import node_gate

    read_sample(
        reader,
        kinds_of(nodes),
        cgroups=list_cgroups(reader) if processes else (),
        top=RECORD_TOP_PROCESSES if processes else 0,
        budget_s=RECORD_PROCESS_BUDGET_S if processes else None,
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


def _keep_names(src: Host, dest: _Dest, log: Set[str], seen: Set[str]) -> None:
    """Files whose *names* were used but not their content (the ACPI tables doctor lists:
    root-only binaries it never parses) are re-created empty, so a replay lists them too."""
    from .hostio import paths

    prefix = paths.ACPI_TABLES + "/"
    for path in sorted(log):
        if path.startswith(prefix) and "/" not in path[len(prefix) :] and path not in seen:
            if os.path.isfile(src.path(path)) and not dest.lexists(path):
                dest.write(path, b"")
                seen.add(path)


def record(host: Host, dest: str, *, force: bool = False, include_process_data: bool = False) -> Dict[str, Any]:
    """Scan ``host`` and write the record to ``dest``; returns the manifest.

    ``include_process_data``: keep processes, cgroups, the whole kernel command line and the
    kernel's addresses (see the module's docstring); off, they are neither copied nor read.
    """
    from . import __version__
    from .inventory import scan
    from .status_json import to_dict

    out = _open_dest(dest, force)
    reader = host.new_reader(log=True)
    inv = scan(host, reader)
    # DAMON's kdamonds (cxlctl.damon): not part of the inventory, but tuning reads them
    from .damon.sysfs import read_damon

    read_damon(reader)
    tools = _doctor_reads(host, reader, inv)
    from .probe.measure import read_inputs

    read_inputs(reader, inv)  # the probe's buffer sizing (CPU caches) and THP mode
    # a reader of its own: files both read (node meminfo) keep the bytes the scan parsed, so the
    # record's status document replays exactly
    tel = host.new_reader(log=True)
    _telemetry(tel, inv.nodes, include_process_data)
    from .k8s.nfd import tiering_engine

    tiering_engine(host, reader)  # the NFD tiering label's inputs (a running kdamond) go into the record too
    seen: Set[str] = set()
    assert reader.log is not None and tel.log is not None
    for path in sorted(reader.log | tel.log):
        if not include_process_data and private(path):
            continue
        data = reader.captured(path)
        if data is None:
            data = tel.captured(path)
        if data is not None and not include_process_data:
            data = scrub(path, data)
        _copy_path(host, out, path, data, seen)
    _keep_names(host, out, reader.log, seen)
    if tools is not None:
        from .doctor import probes

        out.write("/" + probes.PROBES_FILE, _json(probes.to_json(tools)))
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
        "process_data": include_process_data,
    }
    out.write("/" + MANIFEST, _json(manifest))
    out.write("/" + STATUS, _json(to_dict(inv)))
    return manifest


def _json(doc: Any) -> bytes:
    return (json.dumps(doc, indent=2) + "\n").encode()


def as_json(manifest: Dict[str, Any], dest: str) -> Dict[str, Any]:
    """``cxlctl record --json``: where the record went and its manifest (the files it wrote are named)."""
    return {
        "dest": os.path.abspath(dest),
        "files": {"manifest": MANIFEST, "status": STATUS},
        "manifest": manifest,
    }
