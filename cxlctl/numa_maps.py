"""``/proc/PID/numa_maps``: the one module that parses it.

Two readings of the same file, for two questions:

* :func:`parse_numa_maps` -- how many pages a process has on each node
  (:class:`NumaMaps`: totals, anonymous pages, ``/dev/shm`` files): ``stat``,
  ``top``, ``record`` and the RAS impact report ask it, for many processes per
  refresh, so the usual file is summed by regular expressions running in C;
* :func:`parse_mappings` -- each mapping with its memory policy
  (:class:`Mapping`): ``policy show`` compares what ``launch`` asked for with
  what the kernel did.

Numbers are ASCII digits only (``\\d`` would take ``١``); odd fields are skipped,
never raised on.  ``re`` is imported on first use: commands that never parse
numa_maps do not pay for it at start-up.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, NamedTuple, Optional, Tuple

from cxlctl.parse import decimal_suffix, is_decimal, parse_nodelist


class NumaMaps(NamedTuple):
    """A process' pages per node from ``/proc/PID/numa_maps``.

    ``pages`` counts what numa_maps prints (``N1=512``), in units of each
    mapping's ``kernelpagesize_kB``; ``bytes`` weighs them by that size.
    ``shm`` holds the pages per node of each mapped ``/dev/shm`` file (an
    engine's KV offload file is one).
    """

    pages: Dict[int, int]
    bytes: Dict[int, int]
    shm: Dict[str, Dict[int, int]]
    #: pages per node of anonymous mappings (no ``file=``: heap, stack, anon): what a policy placed
    anon: Dict[int, int] = {}


SHM_PREFIX = "/dev/shm/"
#: /dev/shm names of engine KV offload files (vLLM's vllm_offload_<engine>.mmap[.N], SGLang HiCache, LMCache, ...)
KV_NAME_HINTS = ("offload", "kv", "hicache", "lmcache", "mooncake")


def is_kv_file(path: str) -> bool:
    """A ``/dev/shm`` file an engine keeps its KV offload in (by name: :data:`KV_NAME_HINTS`); vLLM
    0.34.0 unlinks it once every worker mapped it, so numa_maps shows it ``\\040(deleted)``."""
    name = path.rsplit("/", 1)[-1].lower()
    return any(h in name for h in KV_NAME_HINTS)


#: one ``N<node>=<pages>`` field (ASCII digits, node < 10^9, pages < 10^19: what the per-line parser accepts)
_N_FIELD = r" N([0-9]{1,9})=([0-9]{1,19})(?=[ \n]|\Z)"
_FAST: Optional[Tuple[Any, Any, Any]] = None


def _fast_patterns() -> Tuple[Any, Any, Any]:
    """Compiled on first use: ``re`` stays out of the start-up of commands that never parse numa_maps."""
    global _FAST
    if _FAST is None:
        import re

        _FAST = (
            re.compile(_N_FIELD),
            re.compile(r" file=[^\n]*"),  # a file mapping's fields from file= on (no backtracking)
            re.compile(r" file=(" + SHM_PREFIX + r"[^ \n]*)([^\n]*)"),
        )
    return _FAST


def parse_numa_maps(text: str) -> NumaMaps:
    """Sum the ``N<node>=<pages>`` fields of every mapping (pure; odd fields are skipped).

    The usual file -- every mapping of 4 kB pages, as a process without huge
    pages has -- is summed by three regular-expression passes over the whole
    text (all ``N`` fields; those of ``file=`` lines, the rest being anonymous;
    those of ``/dev/shm`` files), which run in C: a third of a line-by-line loop's time.
    Anything else (a huge-page mapping, an odd page size) takes
    :func:`parse_numa_maps_lines`, which weighs each mapping by its page size.
    """
    n4 = text.count("kernelpagesize_kB=4\n") + text.endswith("kernelpagesize_kB=4")
    if text.count("kernelpagesize_kB=") != n4 or "\r" in text or "\t" in text:
        return parse_numa_maps_lines(text)
    fields, file_lines, shm_lines = _fast_patterns()
    pages: Dict[int, int] = {}
    for nid, val in fields.findall(text):
        node = int(nid)
        pages[node] = pages.get(node, 0) + int(val)
    anon = dict(pages)  # all pages, less those of file mappings
    for nid, val in fields.findall("\n".join(file_lines.findall(text))):
        node = int(nid)
        anon[node] -= int(val)
    anon = {k: v for k, v in anon.items() if v}  # the kernel prints no N<node>=0
    shm: Dict[str, Dict[int, int]] = {}
    for file, rest in shm_lines.findall(text):
        per = fields.findall(rest)
        if per:
            f_pages = shm.setdefault(file, {})
            for nid, val in per:
                node = int(nid)
                f_pages[node] = f_pages.get(node, 0) + int(val)
    return NumaMaps(pages, {k: v * 4096 for k, v in pages.items()}, shm, anon)  # kernelpagesize_kB=4 only


def parse_numa_maps_lines(text: str) -> NumaMaps:
    """:func:`parse_numa_maps`, line by line: any page size, any layout of fields.

    A busy engine has thousands of mappings and ``top`` parses twenty such files,
    so each line is looked at from its first `` N`` field on (the kernel prints
    the per-node counts and ``kernelpagesize_kB`` last, after ``file=``/``anon=``
    and the other counts): a line without one (a mapping with no page present,
    most of a large process') costs one ``find``.  The address and policy fields
    are never taken for counts.
    """
    pages: Dict[int, int] = {}
    nbytes: Dict[int, int] = {}
    shm: Dict[str, Dict[int, int]] = {}
    anon: Dict[int, int] = {}
    for line in text.splitlines():
        i = line.find(" N", line.find(" ") + 1)  # not at the policy field (the second)
        if i < 0:
            continue
        page_kb = 4
        per: List[Tuple[int, int]] = []
        for f in line[i + 1 :].split():
            if f[0] == "N":
                key, sep, val = f.partition("=")
                nid = key[1:]
                if (
                    sep
                    and nid.isdigit()
                    and nid.isascii()
                    and len(nid) < 10
                    and val.isdigit()
                    and val.isascii()
                    and len(val) < 20
                ):
                    per.append((int(nid), int(val)))
            elif f.startswith("kernelpagesize_kB="):
                val = f[18:]
                if is_decimal(val) and len(val) < 20 and 0 < int(val) <= 1 << 30:
                    page_kb = int(val)
        if not per:
            continue
        j = line.rfind(" file=", 0, i)
        file = None if j < 0 else (line[j + 6 : i].split(None, 1) or [""])[0]
        size = page_kb * 1024
        is_shm = file is not None and file.startswith(SHM_PREFIX)
        for node, n in per:
            pages[node] = pages.get(node, 0) + n
            nbytes[node] = nbytes.get(node, 0) + n * size
            if file is None:
                anon[node] = anon.get(node, 0) + n
            if is_shm:
                assert file is not None
                f_pages = shm.setdefault(file, {})
                f_pages[node] = f_pages.get(node, 0) + n
    return NumaMaps(pages, nbytes, shm, anon)


# -- each mapping and its policy (``policy show``) ---------------------------------------------

#: numa_maps' policy words -> cxlctl's mode names
NUMA_MAPS_MODES = {
    "default": "default",
    "local": "local",
    "prefer (many)": "preferred-many",
    "weighted interleave": "weighted-interleave",
    "interleave": "interleave",
    "prefer": "preferred",
    "bind": "bind",
}
_POLICY: Optional[Any] = None


def _policy_pattern() -> Any:
    global _POLICY
    if _POLICY is None:
        import re

        _POLICY = re.compile(
            r"^(default|local|prefer \(many\)|weighted interleave|interleave|prefer|bind)(=[a-z|]+)?(?::([0-9,\-]+))?(?=\s|$)"
        )
    return _POLICY


#: what a mapping holds (a tag: mypy rejects a compare with a word it never holds)
MapKind = Literal["anon", "heap", "stack", "file", "huge", "other"]
#: the numa_maps words that name a kind by themselves
_NAMED_KINDS: Dict[str, MapKind] = {"heap": "heap", "stack": "stack", "huge": "huge"}


class Mapping(NamedTuple):
    """One line of numa_maps: a mapping, its policy and its pages per node."""

    address: str
    policy: str  # as numa_maps prints it
    mode: str  # our name for it
    nodes: Tuple[int, ...]
    kind: MapKind
    file: Optional[str]
    pages: Dict[int, int]
    page_kb: int


def parse_policy(text: str) -> Optional[Tuple[str, Tuple[int, ...], str]]:
    """``weighted interleave:0-1`` → ("weighted-interleave", (0, 1), "") — mode, nodes, flags."""
    m = _policy_pattern().match(text)
    if not m:
        return None
    nodes = parse_nodelist(m.group(3)) if m.group(3) else ()
    return NUMA_MAPS_MODES[m.group(1)], nodes, (m.group(2) or "")[1:]


def _node_field(f: str) -> Optional[Tuple[int, int]]:
    """``N1=512`` → (1, 512); None for anything else (non-ASCII digits, a count beyond 64 bits)."""
    key, sep, val = f.partition("=")
    node = decimal_suffix(key, "N") if sep else None
    if node is None or len(key) > 10 or not is_decimal(val) or len(val) >= 20:
        return None
    return node, int(val)


def parse_mappings(text: str) -> List[Mapping]:
    """Every mapping with a policy numa_maps names, in file order."""
    out = []
    pattern = _policy_pattern()
    for line in text.splitlines():
        addr, _, rest = line.strip().partition(" ")
        if not addr or not rest:
            continue
        m = pattern.match(rest)
        if m is None:
            continue
        pol = parse_policy(rest)
        assert pol is not None
        fields = rest[m.end() :].split()
        pages: Dict[int, int] = {}
        kind: MapKind = "other"
        file: Optional[str] = None
        page_kb = 4
        for f in fields:
            nf = _node_field(f) if f[:1] == "N" else None
            if nf is not None:
                pages[nf[0]] = pages.get(nf[0], 0) + nf[1]
            elif f.startswith("file="):
                kind, file = "file", f[5:]
            elif f in _NAMED_KINDS:
                kind = _NAMED_KINDS[f]
            elif f.startswith("anon=") and kind == "other":
                kind = "anon"
            elif f.startswith("kernelpagesize_kB="):
                val = f[18:]
                if is_decimal(val) and len(val) < 20 and 0 < int(val) <= 1 << 30:
                    page_kb = int(val)
        if file is None and kind == "other" and pages:
            kind = "anon"
        out.append(Mapping(addr, m.group(0), pol[0], pol[1], kind, file, pages, page_kb))
    return out
