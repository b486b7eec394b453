"""What keeps a CXL node's memory from going offline: hugetlb pages in use, pinned pages, the kernel's word.

Read when an offline fails or is interrupted (:mod:`.release`), and for the
report's ``hugetlb`` blocker (:func:`hugetlb_blockers`).  The kernel's rules:

* ``do_migrate_range()`` (mm/memory_hotplug.c) isolates each hugetlb page of
  the block and ``migrate_pages()`` needs a target on another node:
  ``alloc_hugetlb_folio_nodemask()`` (mm/hugetlb.c) takes a free page of the
  pool there, else ``alloc_migrate_hugetlb_folio()`` a fresh one from the buddy
  allocator, which it never does for gigantic (1 GiB) pages.  A page that found
  no target is put back and ``offline_pages()`` tries again, until a signal.
  Free huge pages are no obstacle: ``dissolve_free_hugetlb_folios()`` frees them.
* a page with an extra reference (a short-term pin: O_DIRECT in flight,
  vmsplice, a driver's ``pin_user_pages()`` without FOLL_LONGTERM) fails
  ``migrate_pages()`` the same way; ``VmPin`` in ``/proc/PID/status``
  (``mm->pinned_vm``) is what a process shows of such pins, a hint, not proof.
* ``do_migrate_range()`` logs each page it could not migrate:
  ``migrating pfn … failed ret:…`` and ``dump_page(page, "migration failure")``
  (rate-limited); ``dmesg`` shows them where the kernel log is readable.
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Reader
from cxlctl.parse import format_nodelist, format_size, is_decimal

from .report import Blocker

#: the lines of the kernel log that name a page ``do_migrate_range()`` could not move
DMESG_NEEDLES = ("migration failure", "migrating pfn", "failed to isolate pfn", "isolation failed")
#: huge pages of this size or more are gigantic: the kernel never allocates a migration target for them
GIGANTIC_KB = 1 << 20


class Hugetlb(NamedTuple):
    node: int
    size_kb: int
    total: int
    free: int

    @property
    def in_use(self) -> int:
        return max(0, self.total - self.free)


def hugetlb(r: Reader, node: int) -> List[Hugetlb]:
    """The node's hugetlb pools (``nodeN/hugepages/hugepages-<size>kB``), each with its free count."""
    base = paths.node_file(node, paths.NODE_HUGEPAGES)
    out = []
    for name in r.listdir(base, lambda x: x.startswith("hugepages-") and x.endswith("kB")):
        size = name[len("hugepages-") : -len("kB")]
        total = (r.text(f"{base}/{name}/nr_hugepages") or "").strip()
        free = (r.text(f"{base}/{name}/free_hugepages") or "").strip()
        if is_decimal(size) and is_decimal(total) and is_decimal(free):
            out.append(Hugetlb(node, int(size), int(total), int(free)))
    return out


def _pool_line(h: Hugetlb) -> str:
    kind = (
        "gigantic, never migrated by offline_pages()"
        if h.size_kb >= GIGANTIC_KB
        else "each needs a free huge page elsewhere"
    )
    return f"{h.in_use} of {h.total} huge page(s) of {format_size(h.size_kb * 1024)} in use on node {h.node} ({kind})"


def hugetlb_blockers(r: Reader, nodes: Sequence[int]) -> List[Blocker]:
    """The report's ``hugetlb`` blocker: in-use hugetlb pages on a node the release would empty."""
    out = []
    for n in sorted(set(nodes)):
        used = [h for h in hugetlb(r, n) if h.in_use]
        if not used:
            continue
        out.append(
            Blocker(
                "hugetlb",
                f"node:{format_nodelist([n])}",
                "; ".join(_pool_line(h) for h in used) + ": offline_pages() retries them until it is interrupted",
                "stop what maps them (the pool's free pages are no obstacle), or lower the node's pool: "
                f"echo 0 > /sys/devices/system/node/node{n}/hugepages/hugepages-<size>kB/nr_hugepages",
            )
        )
    return out


#: how many of the processes with pages on the nodes a hint names (the most pages first)
HOLDERS_NAMED = 4


def holders(host: Host, nodes: Sequence[int]) -> Tuple[List[str], List[str]]:
    """(processes with pages on ``nodes`` and pinned memory (``VmPin``), the other processes with pages
    there): a hint at what holds the offline.  An extra page reference (vmsplice, O_DIRECT in flight)
    shows in no counter of the process; only its pages on the node point at it."""
    from cxlctl.hostio.proc import status_field

    from .procs import read_procs

    pins: List[Tuple[int, str]] = []
    others: List[Tuple[int, str]] = []
    want = set(nodes)
    where = f"on node {format_nodelist(sorted(want))}"
    for p in read_procs(host.reread(), look_for_fds=False):
        on = sum(b for n, b in p.on_node.items() if n in want)
        if not on:
            continue
        status = host.reread().body(paths.proc_pid(p.pid, "status"))
        pin = (status_field(status, "VmPin") or "").split()
        if pin and is_decimal(pin[0]) and int(pin[0]):
            pins.append(
                (
                    on,
                    f"PID {p.pid} ({p.name}) has {format_size(on)} {where} and VmPin {format_size(int(pin[0]) * 1024)}",
                )
            )
        else:
            others.append((on, f"PID {p.pid} ({p.name}) {format_size(on)}"))
    return [t for _, t in sorted(pins, reverse=True)], [t for _, t in sorted(others, reverse=True)]


def kernel_log(host: Host, limit: int = 6) -> List[str]:
    """The kernel log's lines about pages that did not migrate (the live host only; [] when unreadable)."""
    if not host.live:
        return []
    from cxlctl.hostio import tools

    try:
        res = tools.run(["dmesg"], timeout=5.0, max_output=8 << 20, check=False)
    except tools.ToolError:
        return []
    if res.returncode != 0:
        return []
    lines = [ln.strip() for ln in res.output.splitlines() if any(k in ln for k in DMESG_NEEDLES)]
    return lines[-limit:]


def explain(host: Host, nodes: Sequence[int]) -> List[str]:
    """Everything the host says about why memory on ``nodes`` does not go offline, one item each."""
    out = []
    r = host.reread()
    for n in sorted(set(nodes)):
        out += [_pool_line(h) for h in hugetlb(r, n) if h.in_use]
    pins, others = holders(host, nodes)
    if pins:
        out.append("pinned memory (short-term pins block migration): " + "; ".join(pins[:HOLDERS_NAMED]))
    if others:
        out.append(
            f"processes with pages on node {format_nodelist(sorted(set(nodes)))} (a page one of them holds by an "
            "extra reference, e.g. vmsplice or O_DIRECT in flight, cannot migrate): "
            + "; ".join(others[:HOLDERS_NAMED])
            + (f" and {len(others) - HOLDERS_NAMED} more" if len(others) > HOLDERS_NAMED else "")
        )
    log = kernel_log(host)
    if log:
        out.append("kernel log: " + " | ".join(log))
    return out
