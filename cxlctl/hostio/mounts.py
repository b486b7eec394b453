"""What is mounted where, as ``/proc/self/mountinfo`` says: a tmpfs and its memory policy.

Why: a Kubernetes pod cannot mount its own CXL-bound ``/dev/shm`` (that needs
CAP_SYS_ADMIN); the node's agent mounts one on the host (``cxlctl k8s
kv-pool``) and the pod gets it as a ``hostPath`` volume, a bind mount of the
same super block.  The kernel keeps a tmpfs's ``mpol=`` in the super block
(``shmem_sb_info.mpol``) and gives it to every regular file created on any
mount of it (mm/shmem.c ``__shmem_get_inode``: ``mpol_shared_policy_init(
&info->policy, shmem_get_sbmpol(sbinfo))``), and shows it in the super
block's options (``shmem_show_options`` -> ``shmem_show_mpol``), the last
field of a mountinfo line (Documentation/filesystems/proc.rst, "mountinfo").
So an unprivileged process can read where its ``/dev/shm`` files' pages go.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.namedrecord import NamedTuple
from cxlctl.parse import is_decimal, parse_nodelist


class Mount(NamedTuple):
    mount_point: str
    root: str  # the directory of the file system mounted there (a bind mount's source within it)
    fstype: str
    source: str
    super_options: Tuple[str, ...]

    def option(self, name: str) -> Optional[str]:
        """The value of ``name=`` among the super block's options (None: not given)."""
        for o in self.super_options:
            k, sep, v = o.partition("=")
            if k == name and sep:
                return v
        return None


class TmpfsPolicy(NamedTuple):
    """A tmpfs's ``mpol=`` (the kernel's ``mpol_to_str`` form) and ``size=``."""

    mode: str  # mpol_to_str's mode, spaces as '-': bind | prefer | interleave | weighted-interleave | ...
    nodes: Tuple[int, ...]
    size: Optional[int]  # bytes (None: the default, half of RAM)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo`` (fs/proc_namespace.c ``mangle``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and re.fullmatch(r"[0-7]{3}", field[i + 1 : i + 4]):
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _options(field: str) -> Tuple[str, ...]:
    """The super block's options: split at commas, but an ``mpol=`` node list keeps its own
    (``mpol=bind:0,2-3``: ``%*pbl``); no other option is a bare number or range."""
    out: List[str] = []
    for tok in field.split(","):
        if out and out[-1].startswith("mpol=") and re.fullmatch(r"[0-9]+(-[0-9]+)?", tok):
            out[-1] += "," + tok
        else:
            out.append(tok)
    return tuple(out)


def parse(text: str) -> List[Mount]:
    """Every well-formed line of a mountinfo file (a malformed one is skipped)."""
    out = []
    for line in text.splitlines():
        f = line.split()
        if "-" not in f[6:]:
            continue
        sep = f.index("-", 6)
        if len(f) < sep + 3:
            continue
        # the last field, joined back: mpol_to_str names some modes with a space ("weighted interleave")
        opts = _options(" ".join(f[sep + 3 :])) if len(f) > sep + 3 else ()
        out.append(Mount(_unescape(f[4]), _unescape(f[3]), f[sep + 1], _unescape(f[sep + 2]), opts))
    return out


def mounted_at(host: Host, target: str) -> Optional[Mount]:
    """The mount this process sees at ``target`` (the last one: it covers those before it)."""
    text = host.reader.text(paths.SELF_MOUNTINFO)
    if text is None:
        return None
    found = [m for m in parse(text) if m.mount_point == target]
    return found[-1] if found else None


def tmpfs_policy(m: Mount) -> Optional[TmpfsPolicy]:
    """The memory policy of a tmpfs mount, when it has one over a node list (None otherwise)."""
    if m.fstype != "tmpfs":
        return None
    mpol = m.option("mpol")
    if not mpol:
        return None
    # mm/mempolicy.c mpol_to_str: MODE[=static|=relative][:NODELIST]
    head, _, nodelist = mpol.partition(":")
    mode = head.split("=", 1)[0].replace(" ", "-")
    try:
        nodes = parse_nodelist(nodelist)
    except ValueError:
        return None
    size = m.option("size")
    nbytes = None
    if size and size.endswith("k") and is_decimal(size[:-1]):
        nbytes = int(size[:-1]) << 10  # shmem_show_options prints size=%luk
    return TmpfsPolicy(mode, nodes, nbytes) if nodes else None


def policy_at(host: Host, target: str) -> Optional[TmpfsPolicy]:
    """The memory policy of the tmpfs this process sees at ``target`` (None: no such tmpfs there)."""
    m = mounted_at(host, target)
    return tmpfs_policy(m) if m is not None else None
