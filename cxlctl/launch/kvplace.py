"""Where a launch's KV offload lands: the mechanism that places it, and the bytes each node takes.

A process-wide memory policy cannot put the KV offload on CXL and keep the engine's own memory
DRAM-first: weighted interleave spreads every allocation by the weights (3:1 puts 75 % of the
offload on DRAM).  So ``--kv-size`` picks, per engine, what places the offload by itself:

* **tmpfs** -- vLLM 0.28+ keeps its offload in ``/dev/shm/vllm_offload_<engine>.mmap`` files
  that the workers pre-fault (0.34.0 ``vllm/v1/kv_offload/cpu/shared_offload_region.py``,
  ``MADV_POPULATE_WRITE``), and a ``/dev/shm`` file's pages follow the tmpfs mount's ``mpol=``
  whoever faults them (``shmem_get_pgoff_policy`` over the superblock's policy, kernel
  ``mm/shmem.c``).  cxlctl mounts a private ``/dev/shm`` with ``mpol=bind:<CXL nodes>`` for the
  engine (needs CAP_SYS_ADMIN).  ``exec`` gets the same ``/dev/shm``: a program that keeps its
  offload in ``/dev/shm`` files has it on CXL;
* **shm-mount** -- the ``/dev/shm`` the process already has is a tmpfs with an ``mpol=`` (in a
  Kubernetes pod: the node's KV pool, a host tmpfs bound to its pinnable CXL nodes that the pod
  mounts, ``cxlctl k8s kv-pool``): its files' pages follow that policy with no mount by cxlctl
  and no privilege (the super block's policy, mm/shmem.c ``__shmem_get_inode``), so it is used
  as it is;
* **devdax** -- LMCache's server and Mooncake map a devdax device (``--devdax``): device memory,
  on no NUMA node;
* **engine** -- vLLM's CPU backend binds each worker's memory (KV cache included) to its CPU's node;
* **policy** -- nothing places the offload apart from the engine (SGLang's host cache, LMCache's
  CPU cache and vLLM before 0.28 are anonymous memory; not root): it follows the process policy,
  and the plan says so with the fix.

Expected bytes per node, as the kernel fills them: ``bind`` takes the nodes in the faulting CPU's
zonelist order (nearest first, ``build_zonelists``), each up to its free memory, and never
leaves them; ``interleave`` and weighted interleave split by the weights, a full node's share
falling back to the nearest node with room (``alloc_pages_mpol`` passes no nodemask for them);
``preferred`` fills its node, then falls back the same way.  A share that falls back to another
node of the policy's set stays where the plan says (it is reported per node, ``over_share``); a
size the chosen nodes cannot hold is refused unless ``--force``, which lets it spill (the tmpfs is then ``mpol=interleave``, which
may fall back) and shows the spill per node.

A long-term pinned offload (vLLM on a GPU: ``cudaHostRegister``; ``exec --pinned``) is then moved
as mm/gup.c ``migrate_longterm_unpinnable_folios()`` moves it: what sits in ZONE_MOVABLE goes to a
kernel zone, the node's own first, then the next on its zonelist (capacity/pinnable.py ``after_pin``);
``expected`` is where it ends, and an offload the pin moves off CXL is refused unless
``--allow-unpinnable`` (:func:`_pin`).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from cxlctl.capacity import pinnable
from cxlctl.errors import UsageError
from cxlctl.hostio.mounts import TmpfsPolicy
from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import format_nodelist, format_size

from .nodesets import NodeSets, distance, nearest_cxl
from .policy import Policy


class KvPlacement(NamedTuple):
    mechanism: str  # tmpfs | shm-mount | devdax | engine | policy
    decided_by: str  # what decides where the offload lands, in words
    nodes: Tuple[int, ...]  # the nodes meant to hold it
    expected: Dict[int, int]  # node -> bytes the offload is expected to take
    spill: Dict[int, int]  # node -> bytes beyond what the meant nodes hold (--force)
    on_cxl: bool  # every expected byte is on a CXL node
    #: where no mechanism places it on CXL: why, and the fix
    why_not: Optional[str] = None
    fix: Optional[str] = None
    #: the tmpfs mount's memory policy (tmpfs only): bind, or prefer/interleave with --force
    tmpfs_mpol: Optional[str] = None
    #: bytes no node has free memory for (--force only): the kernel reclaims, swaps or fails the engine
    unplaced: int = 0
    #: the engine takes a long-term pin on the offload (cudaHostRegister, --pinned): ``expected`` is then
    #: where the pin leaves it (capacity/pinnable.py), ``before_pin`` where the faults put it
    pinned: bool = False
    before_pin: Dict[int, int] = {}
    #: bytes the pin migrates off each node (ZONE_MOVABLE memory: folio_is_longterm_pinnable())
    pin_moved: Dict[int, int] = {}
    #: node of the policy's set -> bytes it takes beyond its weight share, because another node of
    #: the set is full (weighted interleave falls back within the set): a placement, not a spill
    over_share: Dict[int, int] = {}


def _order(inv: Inventory, nodes: Sequence[int], near: Sequence[int]) -> List[int]:
    """``nodes`` nearest first from ``near`` (the CPU nodes), ties by id: a zonelist's order."""
    if not near:
        return sorted(nodes)
    return sorted(nodes, key=lambda n: (min(distance(inv, c, n) for c in near), n))


def _free(inv: Inventory) -> Dict[int, int]:
    return {n.id: n.mem_free or 0 for n in inv.nodes if n.has_memory}


def _fill(
    inv: Inventory, size: int, shares: Dict[int, int], free: Dict[int, int], fallback: bool
) -> Tuple[Dict[int, int], Dict[int, int], int, Dict[int, int]]:
    """(expected, spill, unplaced, over_share): each node takes its share up to its free memory; the
    rest falls back to the nearest node with room when ``fallback``, else stays unplaced.  Bytes a
    node of the set takes beyond its share are ``over_share``; only those on a node outside the
    set are ``spill``."""
    got = {n: min(s, free.get(n, 0)) for n, s in shares.items()}
    rest = size - sum(got.values())
    spill: Dict[int, int] = {}
    over: Dict[int, int] = {}
    if rest > 0 and fallback:
        room = {n: f - got.get(n, 0) for n, f in free.items()}
        for n in _order(inv, [n for n in room if room[n] > 0], [s for s in shares if shares[s]]):
            take = min(rest, room[n])
            if take <= 0:
                continue
            got[n] = got.get(n, 0) + take
            into = over if n in shares else spill
            into[n] = into.get(n, 0) + take
            rest -= take
            if rest == 0:
                break
    return {n: b for n, b in sorted(got.items()) if b}, spill, max(rest, 0), over


def _shares(inv: Inventory, policy: Policy, size: int, free: Dict[int, int]) -> Tuple[Dict[int, int], bool]:
    """(node -> bytes the policy gives it, whether a full node falls back): module docstring."""
    nodes = list(policy.nodes)
    if policy.mode == "local" or not nodes:
        nodes = list(policy.cpu_nodes[:1])
    if policy.mode in ("interleave", "weighted-interleave") and len(nodes) > 1:
        w = dict(policy.weights) if policy.mode == "weighted-interleave" else {}
        if not all(w.get(n, 0) > 0 for n in nodes):
            cur = inv.weighted_interleave.weights if policy.mode == "weighted-interleave" else {}
            w = {n: cur.get(n, 1) or 1 for n in nodes}
        total = sum(w[n] for n in nodes)
        shares = {n: size * w[n] // total for n in nodes}
        shares[nodes[0]] += size - sum(shares.values())
        return shares, True
    # bind, preferred-many, preferred, local: nearest first, each node up to its free memory
    order = _order(inv, nodes, policy.cpu_nodes)
    shares, rest = {}, size
    for n in order:
        take = min(rest, free.get(n, 0)) if n != order[-1] else rest
        shares[n] = take
        rest -= take
    return shares, policy.mode != "bind"


def expected(
    inv: Inventory, policy: Policy, size: int, cxl: Sequence[int]
) -> Tuple[Dict[int, int], Dict[int, int], int, Dict[int, int]]:
    """(expected bytes per node, spill per node outside the policy's nodes, bytes no node can take,
    bytes per node of the set beyond its share) of ``size`` under ``policy``."""
    free = _free(inv)
    shares, fallback = _shares(inv, policy, size, free)
    return _fill(inv, size, shares, free, fallback)


class Choice(NamedTuple):
    """What the request and the host allow: the caller's inputs to :func:`decide`."""

    shm_offload: bool  # the engine keeps its offload in /dev/shm files (vLLM 0.28+ native, exec)
    tmpfs: Optional[bool]  # --kv-tmpfs (True), --no-kv-tmpfs (False), neither (None: auto)
    can_mount: bool  # CAP_SYS_ADMIN (a private mount namespace)
    force: bool
    why_anon: str  # the engine's offload is anonymous memory: why and the fix, when not shm_offload
    fix_anon: str
    pinned: bool = False  # the engine long-term pins its /dev/shm offload (vLLM on a GPU, exec --pinned)
    allow_unpinnable: bool = False  # --allow-unpinnable: launch although the pin moves it off CXL
    #: the /dev/shm this process has, when it is a tmpfs with a policy: (mode, nodes, size or None)
    shm_mount: Optional[TmpfsPolicy] = None


def decide(inv: Inventory, ns: NodeSets, policy: Policy, size: int, c: Choice) -> KvPlacement:
    """The mechanism and the bytes per node of a ``size`` KV offload (module docstring); a size the
    chosen nodes cannot hold is a UsageError unless ``force``."""
    cxl = offload_nodes(inv, ns, c.pinned)
    want_tmpfs = c.shm_offload and (c.tmpfs is True or (c.tmpfs is None and c.can_mount))
    if c.tmpfs is True and not c.shm_offload:
        raise UsageError(
            "--kv-tmpfs: this engine's KV offload is not a /dev/shm file, so a CXL-bound /dev/shm does not hold it",
            hint="drop --kv-tmpfs; " + c.fix_anon,
        )
    if c.shm_offload and c.tmpfs is None and c.shm_mount is not None:
        kp = _shm_mount(inv, ns, size, c.shm_mount, c.force)
        return _pin(inv, kp, c) if c.pinned else kp
    if want_tmpfs and cxl:
        kp = _tmpfs(inv, ns, size, tuple(cxl), c.force)
        return _pin(inv, kp, c) if c.pinned else kp
    if c.tmpfs is True:
        raise UsageError("--kv-tmpfs needs a CXL memory node", hint="online CXL memory first (cxlctl status)")
    if not cxl:
        why, fix = "no CXL node is online", "online CXL memory (cxlctl region create --online), then launch again"
    elif c.shm_offload and c.tmpfs is False:
        why = "--no-kv-tmpfs: the /dev/shm offload file follows the faulting worker's memory policy"
        fix = "leave out --no-kv-tmpfs (cxlctl then binds the engine's /dev/shm to the CXL nodes)"
    elif c.shm_offload:
        why = (
            "not root: cxlctl cannot mount the CXL-bound /dev/shm (a private mount namespace needs "
            "CAP_SYS_ADMIN), so the offload file follows the faulting worker's memory policy"
        )
        fix = "run the launch as root (sudo cxlctl launch ...: the engine still runs as you)"
    else:
        why, fix = c.why_anon, c.fix_anon
    got, spill, unplaced, over = expected(inv, policy, size, cxl)
    _refuse(size, got, spill, unplaced, policy.nodes, c.force, f"the {policy.mode} policy")
    on_cxl = bool(got) and all(n in cxl for n in got)
    return KvPlacement(
        "policy",
        f"the engine's {policy.mode} policy over node(s) {format_nodelist(policy.nodes) or '-'}",
        tuple(policy.nodes),
        got,
        spill,
        on_cxl,
        None if on_cxl else why,
        None if on_cxl else fix,
        unplaced=unplaced,
        over_share=over,
    )


def offload_nodes(inv: Inventory, ns: NodeSets, pinned: bool) -> Tuple[int, ...]:
    """The CXL nodes the offload's /dev/shm binds to: the CXL nodes of the launch (``--mem-nodes``), else the
    nearest ones.  A long-term pinned offload takes the CXL nodes with kernel-zone memory (the host's pinnable
    share, capacity/pinnable.py) among the launch's (or, without CXL ones there, among all), so the pin has
    nothing to move and the lendable (movable) nodes stay free to give back; none: as unpinned (refused)."""
    cxl = ns.cxl or nearest_cxl(inv, ns.cpu_nodes)
    if not pinned:
        return tuple(cxl)
    base = ns.cxl or tuple(n.id for n in inv.nodes if n.kind == "cxl" and n.has_memory)
    pin = pinnable.pinnable_nodes(inv, base)
    return tuple(n for n in base if n in pin) if pin else tuple(cxl)


def _tmpfs(inv: Inventory, ns: NodeSets, size: int, cxl: Tuple[int, ...], force: bool) -> KvPlacement:
    """The CXL-bound /dev/shm: bind (nearest CXL node first), or interleave with --force (may spill)."""
    mode = "bind"
    pol = Policy("bind", cxl, ns.cpu_nodes, (), ())
    got, spill, unplaced, over = expected(inv, pol, size, cxl)
    if unplaced and force:  # let it spill: prefer (one node) or interleave, which fall back when full
        mode = "prefer" if len(cxl) == 1 else "interleave"
        pol = Policy("interleave", cxl, ns.cpu_nodes, (), ())
        got, spill, unplaced, over = expected(inv, pol, size, cxl)
    _refuse(size, got, spill, unplaced, cxl, force, "the CXL-bound /dev/shm (mpol=bind)", spillable=True)
    return KvPlacement(
        "tmpfs",
        f"a private /dev/shm tmpfs with mpol={mode}:{format_nodelist(cxl)}: the offload file's pages follow "
        "the mount's policy whoever faults them",
        cxl,
        got,
        spill,
        not spill and not unplaced,
        tmpfs_mpol=mode,
        unplaced=unplaced,
        over_share=over,
    )


#: mm/mempolicy.c mpol_to_str's mode names (spaces as '-') -> the plan's policy modes
_MPOL_MODES = {
    "bind": "bind",
    "prefer": "preferred",
    "prefer-(many)": "preferred-many",
    "interleave": "interleave",
    "weighted-interleave": "weighted-interleave",
    "local": "local",
}


def _shm_mount(inv: Inventory, ns: NodeSets, size: int, mnt: TmpfsPolicy, force: bool) -> KvPlacement:
    """The /dev/shm mounted for this process (the node's KV pool in a pod): its files' pages take the
    mount's policy, whoever faults them; a size beyond the tmpfs's ``size=`` is refused (the fault past
    it gets SIGBUS: shmem_alloc_and_add_folio's ENOSPC), unless --force."""
    mode, nodes, limit = mnt.mode, mnt.nodes, mnt.size
    pol = Policy(_MPOL_MODES.get(mode, "bind"), nodes, ns.cpu_nodes, (), ())
    if limit is not None and size > limit and not force:
        raise UsageError(
            f"a {format_size(size)} KV offload (--kv-size) does not fit the {format_size(limit)} /dev/shm tmpfs "
            f"(mpol={mode}:{format_nodelist(nodes)}) this process has: the fault past its size gets SIGBUS",
            hint="lower --kv-size, or ask the pod for a larger share of the node's KV pool",
        )
    got, spill, unplaced, over = expected(inv, pol, size, nodes)
    _refuse(size, got, spill, unplaced, nodes, force, f"the /dev/shm tmpfs (mpol={mode})", spillable=True)
    cxl = {n.id for n in inv.nodes if n.kind == "cxl"}
    on_cxl = bool(got) and not unplaced and all(n in cxl for n in got)
    where = format_nodelist(nodes)
    return KvPlacement(
        "shm-mount",
        f"the /dev/shm this process has: a tmpfs with mpol={mode}:{where} (in a pod: the node's KV pool, "
        "cxlctl k8s kv-pool); the offload file's pages follow it whoever faults them, nothing is mounted",
        nodes,
        got,
        spill,
        on_cxl,
        None if on_cxl else f"the /dev/shm tmpfs is bound to node(s) {where}, not all of them CXL",
        None if on_cxl else "mount the node's KV pool (cxlctl k8s kv-pool) at /dev/shm instead",
        tmpfs_mpol=mode,
        unplaced=unplaced,
        over_share=over,
    )


def _pin(inv: Inventory, kp: KvPlacement, c: Choice) -> KvPlacement:
    """Where a long-term pin leaves the tmpfs offload (capacity/pinnable.py: mm/gup.c migrates what sits in
    ZONE_MOVABLE to a kernel zone, the source node's first, then the next on its zonelist); refused (exit 2) when
    it moves any of it off CXL, unless --allow-unpinnable."""
    after, moved, lost = pinnable.after_pin(inv, kp.expected, distance)
    # on CXL: any CXL node (the pin may move a page to another CXL node's kernel zone: its zonelist)
    cxl = set(kp.nodes) | {n.id for n in inv.nodes if n.kind == "cxl"}
    mine = sorted(kp.nodes)
    off = {n: b for n, b in after.items() if n not in cxl}
    # what the pin itself moves off the CXL nodes (a --force spill was off them before)
    pin_off = sum(off.values()) - sum(b for n, b in kp.expected.items() if n not in cxl) + lost
    on_cxl = kp.on_cxl and pin_off <= 0
    why = fix = None
    if pin_off > 0:
        z = pinnable.zones(inv, mine)
        split = ", ".join(
            f"node {n}: {format_size(v.pinnable)} kernel zone (pinnable), {format_size(v.lendable)} ZONE_MOVABLE"
            for n, v in sorted(z.items())
        )
        why = (
            f"the engine long-term pins its offload (FOLL_LONGTERM) and node(s) {format_nodelist(mine)} "
            f"lack the pinnable memory for it ({split}): mm/gup.c migrate_longterm_unpinnable_folios() moves "
            f"every ZONE_MOVABLE page to a kernel zone, {per_node(off) or 'nowhere'}"
            + (f", {format_size(lost)} with no kernel-zone room (the pin fails with ENOMEM)" if lost else "")
        )
        fix = pinnable.NORMAL_FIX
        if not c.allow_unpinnable:
            raise UsageError(
                f"a {format_size(sum(kp.expected.values()))} KV offload would not stay on CXL: {why}",
                hint=fix + "; or add --allow-unpinnable to launch anyway (the dry run shows where it ends)",
            )
    return kp._replace(
        expected=after,
        on_cxl=on_cxl,
        why_not=why,
        fix=fix,
        pinned=True,
        before_pin=kp.expected,
        pin_moved=moved,
    )


def _refuse(
    size: int,
    got: Dict[int, int],
    spill: Dict[int, int],
    unplaced: int,
    nodes: Sequence[int],
    force: bool,
    what: str,
    spillable: bool = False,
) -> None:
    """A KV size the chosen nodes cannot hold: exit 2 naming their free memory, unless --force (the
    plan then shows the spill per node, and what fits on no node)."""
    if force:
        return
    if unplaced:
        raise UsageError(
            f"a {format_size(size)} KV offload (--kv-size): {what} keeps it on node(s) {format_nodelist(nodes)}, which have "
            f"{format_size(size - unplaced)} free; {format_size(unplaced)} would not fit",
            hint="lower --kv-size (or --kv-size auto), or free memory on those nodes"
            + (", or add --force to let the rest spill to other nodes (the dry run shows where)" if spillable else ""),
        )
    if spill and not force:
        held = size - sum(spill.values())
        raise UsageError(
            f"a {format_size(size)} KV offload (--kv-size): node(s) {format_nodelist(nodes)} hold {format_size(held)} of it "
            f"(their free memory); {format_size(sum(spill.values()))} would spill to node(s) "
            f"{format_nodelist(sorted(spill))}",
            hint="lower --kv-size (or --kv-size auto), or add --force to let it spill (the dry run shows where)",
        )


def per_node(b: Dict[int, int]) -> str:
    """``node 0 1.50 GiB, node 2 64 GiB``: bytes per node in the plan's words."""
    return ", ".join(f"node {n} {format_size(v)}" for n, v in sorted(b.items()))


def fixed(kind: str, decided_by: str, expected_: Dict[int, int], cxl: Sequence[int], why: Optional[str]) -> KvPlacement:
    """A placement cxlctl does not choose (devdax, the engine's own binding)."""
    on_cxl = bool(expected_) and all(n in cxl for n in expected_)
    return KvPlacement(
        kind,
        decided_by,
        tuple(sorted(expected_)),
        expected_,
        {},
        on_cxl,
        None if on_cxl or kind == "devdax" else why,
        None,
    )
