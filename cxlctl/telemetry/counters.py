"""Which tiering counters cxlctl reports, and pure parsers of the files that hold them.

The kernel's own counter names are kept as they are (``pgdemote_direct``), so
what ``cxlctl stat --json`` prints can be compared with ``/proc/vmstat`` by eye
or by script.  Each source has a list of *wanted* names: a wanted counter the
file lacks is reported as missing (older kernels: 6.1 has no
``pgdemote_khugepaged``), and any other counter with a tiering prefix that a
newer kernel adds is kept too, so nothing new is hidden.

Parsers are strict about numbers (ASCII digits only, see :mod:`cxlctl.parse`)
and tolerant about lines: a line that does not parse is skipped, never fatal.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Tuple

from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import U64_MAX, decimal_suffix, is_decimal

#: promotion and demotion between tiers (pages, cumulative): counted per node, system-wide and per cgroup
PROMOTE_DEMOTE: Tuple[str, ...] = (
    "pgpromote_success",
    "pgpromote_candidate",
    # promotions that skipped the rate limit because the DRAM node had free space (added in 2025): they
    # count in pgpromote_success but not in pgpromote_candidate, so without this one the
    # candidates/successes ratio under-counts how much the rate limit holds back
    "pgpromote_candidate_nrl",
    "pgdemote_kswapd",
    "pgdemote_direct",
    "pgdemote_khugepaged",
    "pgdemote_proactive",
)

#: counters of ``/sys/devices/system/node/nodeN/vmstat`` (pages, cumulative since boot)
NODE_COUNTERS: Tuple[str, ...] = PROMOTE_DEMOTE + (
    "numa_hit",
    "numa_miss",
    "numa_foreign",
    "numa_interleave",
    "numa_local",
    "numa_other",
)

#: counters of ``/proc/vmstat`` (events and pages, cumulative since boot)
SYSTEM_COUNTERS: Tuple[str, ...] = (
    "numa_hint_faults",
    "numa_hint_faults_local",
    "numa_pages_migrated",
    "numa_pte_updates",
    "pgmigrate_success",
    "pgmigrate_fail",
    # reclaim asked for through memory.reclaim / nodeN/reclaim (6.16+): pages scanned and reclaimed
    # (demoted or freed) on request, apart from kswapd's and direct reclaim's
    "pgscan_proactive",
    "pgsteal_proactive",
) + PROMOTE_DEMOTE

#: counters of a cgroup's ``memory.stat`` (pages, cumulative; the size lines are bytes); memcg counts no candidates
CGROUP_COUNTERS: Tuple[str, ...] = tuple(n for n in PROMOTE_DEMOTE if not n.startswith("pgpromote_candidate"))

#: ``memory.stat`` sizes (bytes, current) shown beside the counters
CGROUP_SIZES: Tuple[str, ...] = ("anon", "file", "shmem")

#: other counters kept when a kernel has them: names a newer kernel may add
TIERING_PREFIXES: Tuple[str, ...] = ("pgpromote_", "pgdemote_", "numa_")

#: the demotion counters (their sum is "demoted")
DEMOTE_COUNTERS: Tuple[str, ...] = tuple(n for n in PROMOTE_DEMOTE if n.startswith("pgdemote_"))

#: files of ``/sys/devices/system/node/nodeN/memory_failure/`` (pages, cumulative since boot): what
#: memory_failure() did with the poisoned pages of the node (hard-offlined, or why not)
MEMORY_FAILURE: Tuple[str, ...] = ("total", "ignored", "failed", "delayed", "recovered")

#: ``memory.numa_stat`` types that add up to a cgroup's memory on a node (shmem is part of file)
NUMA_STAT_RESIDENT: Tuple[str, ...] = ("anon", "file")


class Counters(NamedTuple):
    """Counters of one source: wanted names (and any other tiering counter present) → value.

    ``values[name]`` is None for a wanted counter the kernel did not report;
    ``missing`` lists those names ("not available on this kernel").
    ``readable`` is False when the whole file could not be read (then every
    wanted counter is missing, for that reason rather than the kernel's).
    """

    values: Dict[str, Optional[int]]
    missing: Tuple[str, ...]
    readable: bool = True

    def get(self, name: str) -> Optional[int]:
        return self.values.get(name)


_WHOLE: Optional[Tuple[Any, Any]] = None


def _whole_file_patterns() -> Tuple[Any, Any]:
    """Whole-file shapes of ``name value`` and ``memory.numa_stat`` files as the kernel writes them
    (names of ASCII word characters, one space, values of at most 19 digits: below 2^64)."""
    global _WHOLE
    if _WHOLE is None:
        import re

        _WHOLE = (
            re.compile(r"(?:[A-Za-z0-9_]+ [0-9]{1,19}\n)*"),
            re.compile(r"(?:[A-Za-z0-9_]+(?: N[0-9]{1,9}=[0-9]{1,19})+\n)*"),
        )
    return _WHOLE


def parse_keyvals(text: str) -> Dict[str, int]:
    """``name value`` lines (``vmstat``, ``numastat``, ``memory.stat``) → {name: value}.

    Values are unsigned 64-bit decimals; other lines are skipped.  A file in the
    kernel's own layout is recognised by one regular expression (C speed) and
    then split at once; any other goes line by line.  A report reads a few
    thousand such lines (``/proc/vmstat``, every node's and cgroup's files).
    """
    whole = text if text.endswith("\n") else text + "\n"
    if _whole_file_patterns()[0].fullmatch(whole):
        f = whole.split()
        return dict(zip(f[0::2], map(int, f[1::2])))
    out: Dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2 or not is_decimal(parts[1]):
            continue
        v = int(parts[1])
        if v <= U64_MAX:
            out[parts[0]] = v
    return out


def pick(
    found: Optional[Dict[str, int]], wanted: Iterable[str], prefixes: Tuple[str, ...] = TIERING_PREFIXES
) -> Counters:
    """The wanted counters from a parsed file (None: unreadable), plus other tiering counters present."""
    wanted = tuple(wanted)
    if found is None:
        return Counters({n: None for n in wanted}, wanted, readable=False)
    values: Dict[str, Optional[int]] = {n: found.get(n) for n in wanted}
    for name in sorted(found):
        if name not in values and name.startswith(prefixes):
            values[name] = found[name]
    return Counters(values, tuple(n for n in wanted if values[n] is None))


_PICKERS: Dict[Tuple[Tuple[str, ...], Tuple[str, ...]], Any] = {}


def pick_text(text: Optional[str], wanted: Iterable[str], prefixes: Tuple[str, ...] = TIERING_PREFIXES) -> Counters:
    """The wanted counters of a ``name value`` file (None: unreadable), as :func:`pick` of
    :func:`parse_keyvals` gives them for a file in the kernel's layout.

    ``/proc/vmstat`` has some 190 lines and a report keeps about 20: one regular
    expression finds the kept lines (a line is taken only as the kernel writes it:
    name, one space, at most 19 digits, newline) and only their numbers are
    converted -- a sixth of the time of parsing every line.
    """
    wanted = tuple(wanted)
    if text is None:
        return pick(None, wanted, prefixes)
    rx = _PICKERS.get((wanted, prefixes))
    if rx is None:
        import re

        names = [re.escape(p) + "[A-Za-z0-9_]*" for p in prefixes] + [re.escape(w) for w in wanted]
        rx = _PICKERS[(wanted, prefixes)] = re.compile(r"\n(" + "|".join(names) + r") ([0-9]{1,19})(?=\n)")
    return pick({k: int(v) for k, v in rx.findall("\n" + text + "\n")}, wanted, prefixes)


def parse_numa_stat(text: str) -> Dict[str, Dict[int, int]]:
    """A cgroup's ``memory.numa_stat`` (``anon N0=4096 N1=0``) → {type: {node: bytes}}.

    A line with one odd field is dropped.  The kernel's own layout is recognised
    by one regular expression and split at once (``top`` and ``stat`` parse 64
    cgroups' files per report); any other file goes line by line.
    """
    whole = text if text.endswith("\n") else text + "\n"
    if _whole_file_patterns()[1].fullmatch(whole):
        fast: Dict[str, Dict[int, int]] = {}
        for line in whole.replace(" N", " ").replace("=", " ").splitlines():
            fs = line.split(" ")
            fast[fs[0]] = dict(zip(map(int, fs[1::2]), map(int, fs[2::2])))
        return fast
    out: Dict[str, Dict[int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or "=" in parts[0]:  # cgroup v1's layout (anon=374 N0=...): not a type name
            continue
        per: Dict[int, int] = {}
        for f in parts[1:]:
            key, sep, val = f.partition("=")
            node = decimal_suffix(key, "N")
            if not sep or node is None or not is_decimal(val) or int(val) > U64_MAX:
                per = {}
                break
            per[node] = int(val)
        if per:
            out[parts[0]] = per
    return out


def resident_per_node(numa_stat: Dict[str, Dict[int, int]]) -> Dict[int, int]:
    """Bytes a cgroup holds on each node: anon + file (page cache, shmem and tmpfs included)."""
    out: Dict[int, int] = {}
    for kind in NUMA_STAT_RESIDENT:
        for node, v in numa_stat.get(kind, {}).items():
            out[node] = out.get(node, 0) + v
    return out
