"""The node's KV pool: a host tmpfs bound to the node's pinnable CXL memory, for unprivileged pods.

Why: ``cxlctl launch`` puts an engine's ``/dev/shm`` KV offload on CXL by mounting a private
tmpfs with ``mpol=bind:<CXL nodes>``, which needs CAP_SYS_ADMIN; an unprivileged pod has none, so
its offload followed the worker's policy (most of it on DRAM).  The node's agent (the DaemonSet's
``kv-pool`` init container, the one privileged part) mounts that tmpfs once on the host, at
``/run/cxlctl/kv``; a pod mounts it as a ``hostPath`` volume at ``/dev/shm`` (one subdirectory per
pod, ``subPathExpr: $(POD_UID)``), with no privilege.  The kernel keeps a tmpfs's policy in its
super block and gives it to every regular file created on any mount of it (mm/shmem.c
``__shmem_get_inode`` -> ``mpol_shared_policy_init(&info->policy, shmem_get_sbmpol(sbinfo))``), so
the pod's offload file is bound to the CXL nodes whoever faults it (``shmem_alloc_folio`` ->
``shmem_get_pgoff_policy``).

Which nodes: the CXL nodes with memory in a kernel zone (capacity/pinnable.py): vLLM on a GPU
long-term pins its offload (``cudaHostRegister``), and mm/gup.c
``migrate_longterm_unpinnable_folios`` moves every ZONE_MOVABLE page of it to a kernel zone, the
tmpfs policy unconsulted.  ZONE_MOVABLE CXL memory stays lendable and is never in the pool.

What the scheduler sees: the pool's size in MiB as the extended resource :data:`RESOURCE`, a
capacity (not a free figure: it changes only when the pool does), which the scheduler subtracts
pod requests from, so two pods cannot both take a node's last GiB.  The agent writes it into
NFD's feature directory as a feature, not a label (``# +no-label``); the NodeFeatureRule of
deploy/kubernetes/cxlctl-nodefeaturerule.yaml turns it into node capacity (nfd-master
``filterExtendedResource``: ``@local.feature.<name>``; ``createExtendedResourcePatches``).

Undo: ``cxlctl k8s kv-pool --remove`` (the feature file first, so nothing new is scheduled, then
``umount`` of the host's mount; pods that still have their directory bind-mounted keep the super block
alive until they end).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any, Dict, List, Literal, Optional, Tuple

from cxlctl.capacity import pinnable
from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio import mounts, paths
from cxlctl.hostio.host import Host
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, format_size

#: the extended resource pods request (MiB of the node's KV pool); a domain-qualified name outside
#: kubernetes.io, which Kubernetes reserves (a ``*.kubernetes.io/`` name is not an extended resource)
RESOURCE = "cxlctl.io/kv-mib"
#: the feature NFD's local source reads (features.d/cxlctl-kv), and the NodeFeatureRule's reference
FEATURE = "cxlctl-kv-mib"
FEATURE_FILE = "cxlctl-kv"
FEATURE_REF = "@local.feature." + FEATURE
#: the kubelet's directory of the pods it runs (its --root-dir): a per-pod subdirectory of the pool
#: whose pod is not there any more is removed
KUBELET_PODS = "/var/lib/kubelet/pods"
MIB = 1 << 20
MS_REMOUNT = 32


#: what :func:`apply` does to the pool's mount point
PoolAction = Literal["mount", "remount", "none"]


class Pool(NamedTuple):
    directory: str  # host path of the tmpfs
    nodes: Tuple[int, ...]  # the pinnable CXL nodes it is bound to
    size: int  # bytes (whole MiB): the tmpfs size= and the extended resource
    options: str  # the mount options
    zones: Dict[int, pinnable.NodeZones]  # every CXL node's pinnable / lendable split
    free: int  # pinnable CXL memory free now (an upper bound: capacity/pinnable.py)
    current: Optional[mounts.TmpfsPolicy]  # what is mounted at ``directory`` now
    action: PoolAction
    notes: Tuple[str, ...] = ()


def plan(host: Host, inv: Inventory, size: Optional[int], directory: str = paths.KV_POOL_DIR) -> Pool:
    """The pool for this node (reads only): its nodes, size and mount options; exit 2 when the node
    has no pinnable CXL memory or ``size`` exceeds what is free of it."""
    from cxlctl.launch.policy import tmpfs_options

    if not directory.startswith("/") or directory.rstrip("/") in ("", "/dev/shm"):
        raise UsageError(f"--dir {directory!r}: give an absolute host directory of its own", hint="e.g. /run/cxlctl/kv")
    directory = directory.rstrip("/")
    zones = pinnable.cxl_zones(inv)
    if not zones:
        raise UsageError("no CXL memory node online: there is no CXL memory for a KV pool", hint=pinnable.NORMAL_FIX)
    nodes = tuple(sorted(n for n, z in zones.items() if z.known and z.pinnable > 0))
    if not nodes:
        split = ", ".join(f"node {n}: {format_size(z.lendable)} ZONE_MOVABLE" for n, z in sorted(zones.items()))
        raise UsageError(
            f"no CXL memory in a kernel zone ({split}): a long-term pinned offload would be moved off CXL "
            "(mm/gup.c migrate_longterm_unpinnable_folios), so the pool has no node",
            hint=pinnable.NORMAL_FIX,
        )
    cur = _current(host, directory)
    by_id = {n.id: n for n in inv.nodes}
    # what a pool already mounted holds is its own room: an agent restart must not shrink it
    free = sum(pinnable.pinnable_free(inv, by_id[n]) for n in nodes) + (_held(directory) if cur and host.live else 0)
    want = (free if size is None else size) // MIB * MIB
    if want <= 0 or want > free:
        raise UsageError(
            f"--size {format_size(size)}: the pinnable CXL memory of node(s) {format_nodelist(nodes)} has "
            f"{format_size(free)} free",
            hint="give a smaller --size (or leave it out: the free pinnable CXL memory)",
        )
    opts = tmpfs_options(want, nodes, "bind")
    action: PoolAction = "mount" if cur is None else "none" if (cur.nodes, cur.size) == (nodes, want) else "remount"
    notes = []
    if len(nodes) < len(zones):
        lend = sorted(set(zones) - set(nodes))
        notes.append(f"node(s) {format_nodelist(lend)} are all ZONE_MOVABLE: lendable, kept out of the pool")
    return Pool(directory, nodes, want, opts, zones, free, cur, action, tuple(notes))


def _current(host: Host, directory: str) -> Optional[mounts.TmpfsPolicy]:
    """The pool mounted at ``directory`` now (None: none).  A bind of a directory there (root not
    "/": the agent container's hostPath of it) is mounted over; a whole file system there that is
    not a CXL-bound tmpfs is someone else's: refused."""
    m = mounts.mounted_at(host, directory)
    if m is None:
        return None
    cur = mounts.tmpfs_policy(m)
    if m.root == "/" and (cur is None or cur.mode != "bind"):
        raise UsageError(
            f"{directory} is already a mount ({m.fstype}, {','.join(m.super_options)}) that is not a CXL-bound tmpfs",
            hint="unmount it, or give --dir another directory",
        )
    return cur if cur is not None and cur.mode == "bind" else None


def _held(directory: str) -> int:
    """Bytes the mounted pool holds now (statvfs; 0 when it cannot be read, as for a recorded tree)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return 0
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def feature_file(pool: Optional[Pool]) -> str:
    """NFD's feature file: the pool's MiB as a feature, not a label (the rule makes it a resource)."""
    head = "# Written by `cxlctl k8s kv-pool` (docs/kubernetes.md): the node's CXL KV pool. Do not edit.\n"
    if pool is None:
        return head
    return head + f"# +no-label\n{FEATURE}={pool.size // MIB}\n"


def _libc_call(fn: str, *args: Any) -> int:
    from cxlctl.launch.policy import _libc

    libc = _libc()
    rc: int = getattr(libc, fn)(*args)
    return 0 if rc == 0 else ctypes.get_errno()


def apply(host: Host, pool: Pool, nfd_dir: str = paths.NFD_DIR, kubelet_pods: str = KUBELET_PODS) -> List[str]:
    """Mount (or resize) the pool, write the feature file, remove the directories of pods gone; the
    steps done, in words.  Live host only: a recorded tree has nothing to mount."""
    from cxlctl.hostio.atomic import atomic_write
    from cxlctl.hostio.trust import require_trusted

    if not host.live:
        raise UsageError("a KV pool is mounted on the live host only", hint="add --dry-run to see the plan for a tree")
    done = []
    if pool.action != "none":
        os.makedirs(pool.directory, mode=0o755, exist_ok=True)
        # mount(2) follows links: every component of the mount point root's own, writable by root only
        require_trusted(
            pool.directory,
            "the KV pool's mount point",
            hint="give --dir a directory that only root can change (the default /run/cxlctl/kv)",
        )
        flags = MS_REMOUNT if pool.action == "remount" else 0
        flags |= 2 | 4 | 8  # nosuid, nodev, noexec: as the runtime's own /dev/shm
        err = _libc_call(
            "mount", b"cxlctl-kv", pool.directory.encode(), b"tmpfs", ctypes.c_ulong(flags), pool.options.encode()
        )
        if err:
            raise CxlctlError(
                f"mounting tmpfs ({pool.options}) on {pool.directory} failed: {os.strerror(err)}",
                hint="the agent needs CAP_SYS_ADMIN in the host's mount namespace (the DaemonSet's kv-pool "
                "container: privileged, mountPropagation Bidirectional)",
            )
        done.append(f"{pool.action}ed tmpfs {pool.options} on {pool.directory}")
    atomic_write(host.root, os.path.join(nfd_dir, FEATURE_FILE), feature_file(pool), mode=0o644, sync_dir=False)
    done.append(f"wrote {os.path.join(nfd_dir, FEATURE_FILE)}: {FEATURE}={pool.size // MIB}")
    done += collect(pool.directory, kubelet_pods)
    return done


def collect(directory: str, kubelet_pods: str = KUBELET_PODS) -> List[str]:
    """Remove the pool's per-pod directories (named by pod UID, ``subPathExpr: $(POD_UID)``) whose pod
    the kubelet no longer has: their files would hold CXL memory (charged to the ended pod's memory
    cgroup) until removed.  Nothing is removed when the kubelet's pod directory cannot be read or is
    empty (the agent's own pod is always there: an empty one is the wrong directory), and only
    directories named like a pod UID are."""
    import re
    import shutil

    try:
        live = set(os.listdir(kubelet_pods))
        entries = os.listdir(directory)
    except OSError:
        return []
    if not live:
        return []
    out = []
    for name in entries:
        p = os.path.join(directory, name)
        if not re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", name):
            continue
        if name not in live and os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
            out.append(f"removed {p} (pod {name} is gone)")
    return out


def remove(
    host: Host, directory: str = paths.KV_POOL_DIR, nfd_dir: str = paths.NFD_DIR, dry_run: bool = False
) -> List[str]:
    """Undo :func:`apply`: the feature file first (no new pod is scheduled on the pool), then the mount;
    ``dry_run`` says what it would do."""
    if not host.live and not dry_run:
        raise UsageError("a KV pool is removed on the live host only", hint="run it on the node (the agent)")
    done = []
    f = os.path.join(nfd_dir, FEATURE_FILE)
    would = "would " if dry_run else ""
    if host.reader.exists(f):
        if not dry_run:
            os.unlink(f)
        done.append(f"{would}remove {f}")
    mounted = mounts.policy_at(host, directory) is not None
    if mounted and dry_run:
        done.append(f"would unmount {directory}")
    elif mounted:
        err = _libc_call("umount2", directory.encode(), ctypes.c_int(0))
        if err:
            raise CxlctlError(
                f"unmounting {directory} failed: {os.strerror(err)}",
                hint="a process on the host has a file open there: stop it (the resource is withdrawn already), "
                "then run this again",
            )
        done.append(f"unmount {directory}")
    return done


def to_json(pool: Pool, done: Optional[List[str]] = None) -> Dict[str, Any]:
    return {
        "directory": pool.directory,
        "nodes": list(pool.nodes),
        "size": pool.size,
        "options": pool.options,
        "mpol": f"bind:{format_nodelist(pool.nodes)}",
        "pinnable_free": pool.free,
        "zones": {
            str(n): {"pinnable": z.pinnable, "lendable": z.lendable, "in_pool": n in pool.nodes}
            for n, z in sorted(pool.zones.items())
        },
        "action": pool.action,
        "resource": {"name": RESOURCE, "quantity": pool.size // MIB, "feature": FEATURE, "ref": FEATURE_REF},
        "feature_file": feature_file(pool),
        "done": done or [],
        "notes": list(pool.notes),
    }


def render(pool: Pool, done: Optional[List[str]] = None) -> str:
    """The plan (and the steps done) at 80 columns."""
    from cxlctl.term import fold_lines

    out = fold_lines(
        f"KV pool {pool.directory}: {format_size(pool.size)} tmpfs bound to pinnable CXL node(s) "
        f"{format_nodelist(pool.nodes)} ({format_size(pool.free)} free there)",
        78,
    )
    items = [
        f"{pool.action}: mount -t tmpfs -o {pool.options} cxlctl-kv {pool.directory}",
        f"scheduler: {RESOURCE}={pool.size // MIB} (NFD feature {FEATURE} in features.d/{FEATURE_FILE})",
        *pool.notes,
        *(done or []),
    ]
    for it in items:
        w = fold_lines(it, 74)
        out += ["  " + w[0]] + ["    " + x for x in w[1:]]
    return "\n".join(out) + "\n"
