"""Pre-flight: what would make the launch fail, or run with memory somewhere else than asked.

Each check gives a status — ``fail`` (nothing is launched), ``warn``, ``note``
or ``ok`` — a message naming the problem and, for fail and warn, the fix.  They
run before anything changes on the host (weights, mounts, policy), from the
same inputs in ``--dry-run`` and for real.

Why each exists (kernel ``Documentation/admin-guide/mm/numa_memory_policy.rst``, set_mempolicy(2)):

* cpuset: ``set_mempolicy`` answers EINVAL for nodes outside ``Mems_allowed``
  (cgroup ``cpuset.mems``), and containers often exclude CPU-less CXL nodes;
* kernel: weighted interleave is 6.9+, preferred-many 5.15+;
* ZONE_MOVABLE: engines pin their KV buffers (``cudaHostRegister`` takes
  long-term pins) and the kernel migrates long-term-pinned pages out of
  ZONE_MOVABLE — back to DRAM — so a movable-only CXL node silently loses the KV;
* memlock: pinning more than ``ulimit -l`` fails without CAP_IPC_LOCK;
* /dev/shm: vLLM's offload region is a /dev/shm file and must fit there whole
  (a KV size the chosen nodes cannot hold is refused earlier, :mod:`.kvplace`);
* ``kernel.numa_balancing`` tiering does not promote pages of a process with
  an explicit policy (no ``MPOL_F_MOF``: ``vma_policy_mof`` in mm/mempolicy.c, checked by
  ``task_numa_work``), while reclaim demotes them whatever the policy
  (``demote_folio_list`` in mm/vmscan.c: "Demotion ignores all cpuset and mempolicy settings");
  a note;
* vLLM's CPU backend puts each worker's KV cache on the node of the worker's
  first CPU and dies at start-up when that node's available memory (its
  ``meminfo``: MemFree + Active(file) + Inactive(file) + SReclaimable, vLLM
  0.32.0 ``get_memory_node_info``) is less than the KV size
  (``CPUWorker.determine_available_memory``).
"""

from __future__ import annotations

import os
import resource
from typing import Dict, List, Literal, Optional, Sequence, Tuple

from cxlctl.capacity import pinnable
from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.proc import cgroup_of, has_cap, status_field
from cxlctl.model import Inventory, Node
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, format_size, is_decimal, parse_nodelist

from .nodesets import NodeSets, cpus_of
from .policy import Policy, kernel_supports

CAP_SYS_ADMIN = 21
CAP_IPC_LOCK = 14


#: a pre-flight check's status (a tag: mypy rejects a compare with a word it never holds)
Status = Literal["ok", "note", "warn", "fail"]


class Check(NamedTuple):
    name: str
    status: Status
    message: str
    fix: str = ""


def self_allowed(host: Host) -> Tuple[Optional[Tuple[int, ...]], Optional[Tuple[int, ...]]]:
    """(Mems_allowed_list, Cpus_allowed_list) of this process (what the engine inherits)."""
    st = host.reader.body(paths.SELF_STATUS)
    out: List[Optional[Tuple[int, ...]]] = []
    for key in ("Mems_allowed_list", "Cpus_allowed_list"):
        v = status_field(st, key)
        try:
            out.append(parse_nodelist(v, limit=1 << 16) if v is not None else None)
        except ValueError:
            out.append(None)
    return out[0], out[1]


def cgroup_path(host: Host) -> Optional[str]:
    """This process' cgroup v2 path (``0::/path``), or None."""
    return cgroup_of(host.reader.body(paths.SELF_CGROUP))


def _cpuset_hint(host: Host, nodes: Sequence[int]) -> str:
    cg = cgroup_path(host)
    want = format_nodelist(nodes)
    if cg is None:
        return f"allow node(s) {want} in this process' cpuset (cgroup cpuset.mems; systemd AllowedMemoryNodes=; docker --cpuset-mems)"
    d = paths.CGROUP_DIR + ("" if cg == "/" else cg)
    eff = (host.reader.body(d + "/cpuset.mems.effective") or "").strip()
    have = f" (cpuset.mems.effective is {eff!r})" if eff else ""
    return (
        f"add node(s) {want} to cgroup {cg}'s cpuset.mems{have}: echo <nodes> > {host.path(d)}/cpuset.mems "
        "(systemd: AllowedMemoryNodes=; docker: --cpuset-mems)"
    )


def _node_memory(policy: Policy, by_id: Dict[int, Node]) -> List[Check]:
    """Every node the policy uses has memory online."""
    out: List[Check] = []
    for nid in policy.nodes:
        n = by_id.get(nid)
        if n is None:
            out.append(Check("node", "fail", f"node {nid} does not exist", "see cxlctl status for the nodes"))
        elif not n.has_memory or not (n.mem_total or 0):
            out.append(
                Check(
                    "node-memory",
                    "fail",
                    f"node {nid} has no memory online",
                    "online it first (cxlctl status shows how), or leave it out of --mem-nodes",
                )
            )
        elif n.memory_blocks and not any(b.state == "online" for b in n.memory_blocks):
            out.append(
                Check(
                    "node-memory",
                    "fail",
                    f"node {nid}: every memory block is offline",
                    "online its memory blocks (daxctl online-memory)",
                )
            )
    return out


def _cpuset(host: Host, inv: Inventory, policy: Policy) -> List[Check]:
    """The kernel refuses a policy over nodes outside this process' cpuset (EINVAL)."""
    out: List[Check] = []
    mems, cpus = self_allowed(host)
    if mems is None:
        out.append(
            Check("cpuset", "note", "cannot read Mems_allowed of this process (/proc/self/status); cpuset not checked")
        )
    else:
        outside = [n for n in policy.nodes if n not in mems]
        if outside:
            out.append(
                Check(
                    "cpuset-mems",
                    "fail",
                    f"node(s) {format_nodelist(outside)} are outside this process' cpuset (Mems_allowed_list {format_nodelist(mems) or 'empty'}): "
                    "the kernel would refuse the policy (EINVAL)",
                    _cpuset_hint(host, outside),
                )
            )
        else:
            out.append(
                Check(
                    "cpuset-mems",
                    "ok",
                    f"node(s) {format_nodelist(policy.nodes) or '-'} are in Mems_allowed_list {format_nodelist(mems)}",
                )
            )
    if cpus is not None and policy.cpu_nodes:
        none = [nid for nid in policy.cpu_nodes if not set(cpus_of(inv, [nid])) & set(cpus)]
        if none:
            out.append(
                Check(
                    "cpuset-cpus",
                    "fail",
                    f"no CPU of node(s) {format_nodelist(none)} is in this process' Cpus_allowed_list",
                    "give --cpu-nodes inside the cpuset, or widen the cgroup's cpuset.cpus",
                )
            )
    return out


def _kernel_policy(inv: Inventory, policy: Policy) -> List[Check]:
    """The running kernel has the policy mode."""
    out: List[Check] = []
    why = kernel_supports(policy.mode, inv.kernel, inv.weighted_interleave.supported)
    if why:
        alt = "--policy interleave (equal shares), preferred-many or bind"
        out.append(Check("kernel-policy", "fail", why, f"use {alt}, or a newer kernel"))
    if policy.mode == "weighted-interleave" and len(policy.nodes) < 2:
        out.append(
            Check(
                "policy", "note", f"weighted interleave over one node ({format_nodelist(policy.nodes)}) is a plain bind"
            )
        )
    return out


def _pinned_kv(
    inv: Inventory, ns: NodeSets, by_id: Dict[int, Node], pins: bool, kv_bytes: Optional[int], engine: str
) -> List[Check]:
    """Pinned KV buffers cannot live on ZONE_MOVABLE CXL memory (capacity/pinnable.py), nor beyond ulimit -l."""
    out: List[Check] = []
    if pins:
        movable = sorted(nid for nid, z in pinnable.zones(inv, ns.cxl).items() if z.lendable)
        if movable:
            devs = [d for nid in movable for d in by_id[nid].dax_devices] or ["daxX.Y"]
            out.append(
                Check(
                    "zone-movable",
                    "warn",
                    f"CXL node(s) {format_nodelist(movable)} are onlined ZONE_MOVABLE, but {engine} pins its KV buffers: the kernel "
                    "migrates long-term-pinned pages out of ZONE_MOVABLE (back to DRAM), or the pin fails",
                    "online the CXL memory as ZONE_NORMAL: "
                    + "; ".join(f"cxlctl dax reconfigure {d} --mode system-ram --zone normal" for d in devs)
                    + " (daxctl reconfigure-device --mode=system-ram --no-movable)",
                )
            )
        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        if kv_bytes and soft != resource.RLIM_INFINITY and soft < kv_bytes and not has_cap(CAP_IPC_LOCK):
            out.append(
                Check(
                    "memlock",
                    "warn",
                    f"ulimit -l is {format_size(soft)}, less than the {format_size(kv_bytes)} KV cache the engine pins",
                    "raise it: ulimit -l unlimited (systemd: LimitMEMLOCK=infinity; docker: --ulimit memlock=-1)",
                )
            )
    return out


def _dev_shm(
    host: Host,
    by_id: Dict[int, Node],
    kv_bytes: Optional[int],
    shm_bytes: Optional[int],
    kv_tmpfs: Optional[Tuple[int, Tuple[int, ...], str]],
) -> List[Check]:
    """The engine's /dev/shm (private tmpfs of --kv-tmpfs, or the host's) holds the KV offload."""
    out: List[Check] = []
    if kv_tmpfs is not None:
        size, tnodes, mpol = kv_tmpfs
        if host.live and not has_cap(CAP_SYS_ADMIN):
            out.append(
                Check(
                    "kv-tmpfs",
                    "fail",
                    "--kv-tmpfs mounts a tmpfs in a private mount namespace: needs CAP_SYS_ADMIN",
                    "run as root, or leave out --kv-tmpfs",
                )
            )
        out.append(
            Check(
                "kv-tmpfs",
                "note",
                f"/dev/shm of the engine: tmpfs of {format_size(size)}, mpol={mpol}:{format_nodelist(tnodes)}; other "
                "/dev/shm IPC of the engine moves there too",
            )
        )
        out += _tmpfs_context(host, size, tnodes, mpol)
    elif shm_bytes:
        shm = host.path(paths.DEV_SHM)  # the one stat'ed: named as such in the messages
        try:
            st = os.statvfs(shm)
            avail: Optional[int] = st.f_bavail * st.f_frsize
        except OSError:
            avail = None
        if avail is None:
            out.append(Check("dev-shm", "note", f"cannot stat {shm}; its size is not checked"))
        elif avail < shm_bytes:
            out.append(
                Check(
                    "dev-shm",
                    "fail",
                    f"{shm} has {format_size(avail)} free, less than the {format_size(shm_bytes)} KV offload vLLM allocates there",
                    "run the launch as root (cxlctl then mounts a private /dev/shm on CXL), or grow it: "
                    "mount -o remount,size=<N>G /dev/shm "
                    "(docker: --shm-size or --ipc=host)",
                )
            )
        else:
            out.append(
                Check("dev-shm", "ok", f"{shm} has {format_size(avail)} free for the {format_size(shm_bytes)} offload")
            )
        out += _mounted_shm_context(host, shm_bytes)
    return out


def _mounted_shm_context(host: Host, shm_bytes: int) -> List[Check]:
    """A /dev/shm that already has an ``mpol=`` (in a pod, the node's KV pool: docs/kubernetes.md) meets
    the same kernel rules as cxlctl's own tmpfs: the creating task's cpuset, its memory cgroup, SIGBUS."""
    from cxlctl.hostio import mounts

    tp = mounts.policy_at(host, paths.DEV_SHM)
    return _tmpfs_context(host, shm_bytes, tp.nodes, tp.mode) if tp is not None else []


def _tmpfs_context(host: Host, size: int, tnodes: Sequence[int], mpol: str) -> List[Check]:
    """What the kernel does with the CXL-bound /dev/shm beyond its ``mpol=`` (docs/launch.md, "The tmpfs"):

    * the cpuset: each file's policy is the mount's contextualized to the creating task
      (``mpol_shared_policy_init()`` -> ``mpol_set_nodemask()``, mm/mempolicy.c: the nodes ANDed with
      ``cpuset_current_mems_allowed``); no node left and the file gets no policy at all, silently (it
      follows the faulting task's own policy), some left and the bind narrows to them;
    * the memory cgroup: a tmpfs page is charged to the faulting task's cgroup (mm/shmem.c
      ``shmem_alloc_and_add_folio()``: ``mem_cgroup_charge()``), so ``memory.max`` bounds the offload too;
    * full: past the mount's ``size=`` a fault gets SIGBUS (``shmem_get_folio_gfp()``'s -ENOSPC becomes
      VM_FAULT_SIGBUS in ``shmem_fault()``); a full ``bind`` node never falls back: the allocation fails
      and the OOM killer runs, constrained to the bind's nodes (``constrained_alloc()``, mm/oom_kill.c).
    """
    out: List[Check] = []
    mems, _ = self_allowed(host)
    if mems is not None:
        outside = [n for n in tnodes if n not in mems]
        if outside and len(outside) == len(tnodes):
            out.append(
                Check(
                    "kv-tmpfs-cpuset",
                    "fail",
                    f"the /dev/shm offload's node(s) {format_nodelist(tnodes)} are outside this process' cpuset "
                    f"(Mems_allowed_list {format_nodelist(mems) or 'empty'}): mpol_shared_policy_init() "
                    "contextualizes the mount's mpol= to the creating task's cpuset (mpol_set_nodemask()), finds no "
                    "node, and silently gives the file no policy: the offload would follow the engine's own policy",
                    _cpuset_hint(host, outside),
                )
            )
        elif outside:
            out.append(
                Check(
                    "kv-tmpfs-cpuset",
                    "warn",
                    f"node(s) {format_nodelist(outside)} of the /dev/shm offload are outside this process' cpuset "
                    f"(Mems_allowed_list {format_nodelist(mems)}): mpol_set_nodemask() narrows the file's {mpol} to "
                    f"node(s) {format_nodelist([n for n in tnodes if n in mems])}",
                    _cpuset_hint(host, outside),
                )
            )
    cg = cgroup_path(host)
    if cg is not None:
        raw = (host.reader.body(paths.cgroup_file(cg, "memory.max")) or "").strip()
        where = f"cgroup {cg}"
        if is_decimal(raw) and int(raw) < size:
            out.append(
                Check(
                    "kv-tmpfs-memcg",
                    "warn",
                    f"the /dev/shm offload is charged to the faulting task's memory cgroup (shmem_alloc_and_add_folio(): "
                    f"mem_cgroup_charge()), and {where}'s memory.max is {format_size(int(raw))}, less than the "
                    f"{format_size(size)} tmpfs: the cgroup reclaims, swaps or OOM-kills the engine before the offload is full",
                    f"raise memory.max of {where} above the offload plus the engine's own memory "
                    "(systemd: MemoryMax=; docker: --memory), or lower --kv-size",
                )
            )
        elif raw:
            out.append(
                Check(
                    "kv-tmpfs-memcg",
                    "note",
                    f"the /dev/shm offload is charged to the engine's memory cgroup ({where}, memory.max {raw}), "
                    "on top of its own memory (shmem_alloc_and_add_folio(): mem_cgroup_charge())",
                )
            )
    out.append(
        Check(
            "kv-tmpfs-full",
            "note",
            f"when the offload's /dev/shm fills: past size={format_size(size)} a write fault gets SIGBUS "
            "(shmem_fault(): -ENOSPC); "
            + (
                f"node(s) {format_nodelist(tnodes)} full under mpol=bind: no fallback, the allocation fails and the "
                "OOM killer runs, limited to those nodes (constrained_alloc())"
                if mpol == "bind"
                else f"node(s) {format_nodelist(tnodes)} full under mpol={mpol}: pages fall back to the nearest node with room"
            ),
        )
    )
    return out


#: the node meminfo fields vLLM's CPU worker counts as available (vllm/utils/cpu_resource_utils.py, 0.32.0)
VLLM_AVAILABLE_FIELDS = ("MemFree", "Active(file)", "Inactive(file)", "SReclaimable")


def node_available(host: Host, node: int) -> Optional[int]:
    """Bytes vLLM's CPU worker counts as available on ``node`` (:data:`VLLM_AVAILABLE_FIELDS`), None unreadable."""
    text = host.reader.body(paths.node_dir(node) + "/meminfo")
    got: Dict[str, int] = {}
    for line in (text or "").splitlines():
        w = line.split()  # "Node 0 MemFree: 1234 kB"
        if len(w) >= 4 and w[2].rstrip(":") in VLLM_AVAILABLE_FIELDS and is_decimal(w[3]):
            got[w[2].rstrip(":")] = int(w[3]) * 1024
    return sum(got.values()) if len(got) == len(VLLM_AVAILABLE_FIELDS) else None


def _cpu_backend_kv(host: Host, inv: Inventory, policy: Policy, per_worker: Optional[int]) -> List[Check]:
    """vLLM CPU backend: the first worker's KV cache must fit on the node of its first CPU."""
    if not per_worker or not policy.cpus:
        return []
    cpu = policy.cpus[0]
    node = next((n.id for n in inv.nodes if cpu in n.cpus), None)
    if node is None:
        return []
    avail = node_available(host, node)
    if avail is None:
        return [Check("kv-node", "note", f"node {node}'s meminfo is unreadable: cannot tell whether the KV cache fits")]
    if avail < per_worker:
        return [
            Check(
                "kv-node",
                "fail",
                f"vLLM's CPU worker puts its {format_size(per_worker)} KV cache on node {node} (its first CPU, {cpu}), "
                f'which has {format_size(avail)} available: vLLM dies at start-up ("Available memory on node {node} '
                '... is less than requested memory for kv")',
                "lower --kv-size, free memory on that node, or bind other CPUs (--cpu-nodes)",
            )
        ]
    return [
        Check(
            "kv-node",
            "ok",
            f"the worker's {format_size(per_worker)} KV cache fits node {node} (its first CPU, {cpu}): "
            f"{format_size(avail)} available",
        )
    ]


def _numa_balancing(host: Host, policy: Policy) -> List[Check]:
    """NUMA-balancing tiering leaves processes with an explicit policy alone: say so."""
    out: List[Check] = []
    nb = (host.reader.body(paths.NUMA_BALANCING) or "").strip()
    if is_decimal(nb) and int(nb) & 2 and policy.mode != "local":
        out.append(
            Check(
                "numa-balancing",
                "note",
                f"kernel.numa_balancing={nb} (tiering): the kernel does not promote this engine's pages (its {policy.mode} "
                "policy has no MPOL_F_MOF: vma_policy_mof, task_numa_work), but reclaim still demotes its DRAM pages to "
                "the next tier under memory pressure whatever the policy (demote_folio_list, next_demotion_node)",
            )
        )
    return out


def run(
    host: Host,
    inv: Inventory,
    policy: Policy,
    ns: NodeSets,
    *,
    pins: bool,
    kv_bytes: Optional[int],
    shm_bytes: Optional[int],
    kv_tmpfs: Optional[Tuple[int, Tuple[int, ...], str]],
    engine: str,
    cpu_kv: Optional[int] = None,
) -> List[Check]:
    """Every pre-flight check of a launch, in the order they are shown; changes nothing.

    ``cpu_kv``: the per-worker KV bytes of vLLM's CPU backend, whose KV cache is on the worker's
    CPU node (checked there instead of against the CXL nodes)."""
    by_id = {n.id: n for n in inv.nodes}
    return (
        _node_memory(policy, by_id)
        + _cpuset(host, inv, policy)
        + _kernel_policy(inv, policy)
        + _pinned_kv(inv, ns, by_id, pins, kv_bytes, engine)
        + _dev_shm(host, by_id, kv_bytes, shm_bytes, kv_tmpfs)
        + _cpu_backend_kv(host, inv, policy, cpu_kv)
        + _numa_balancing(host, policy)
    )


def failures(checks: Sequence[Check]) -> List[Check]:
    return [c for c in checks if c.status == "fail"]
