"""Who can change what root runs: the one check, before root runs, loads or trusts a file.

Root must act only on what root owns.  A file is as safe as the least safe directory
above it: whoever can write ``/home/alice`` can rename ``/home/alice/cxlctl`` and put
another tree in its place, whatever the owner of the files inside.  So the rule is the one
sudo applies to ``secure_path`` and OpenSSH to ``authorized_keys`` (``StrictModes``),
taken to every component:

* every component of the path as given *and* of its real path (links resolved), from ``/``
  down to the file, is owned by root (uid 0);
* none is writable by group or others -- except a directory with the sticky bit
  (``/tmp``): there only an entry's owner may rename or remove it, and the next component
  must then be root's own, which the same rule checks.

Used by the install (``scripts/install.sh`` through ``cxlctl.hostio.trust``'s command line),
the daemon's start, the probe's helper, profile loading and ``record``.  Nothing is imported
at module level beyond ``os`` and ``stat``: the daemon checks itself before anything else.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import List, Optional


def _components(path: str) -> List[str]:
    """``/``, ``/a``, ``/a/b`` ... for an absolute, normalised path."""
    out = ["/"]
    cur = ""
    for part in path.strip("/").split("/"):
        if not part:
            continue
        cur = f"{cur}/{part}"
        out.append(cur)
    return out


def untrusted(path: str, *, owner: int = 0) -> List[str]:
    """Why ``path`` is not safe for root to run or trust; an empty list when it is.

    Each reason names the component and what is wrong with it ("/home/alice is owned by
    uid 1000", "/opt/x is writable by others"), in order from ``/`` down.  ``owner`` is the
    uid every component must belong to (root; tests pass their own uid to exercise the mode
    rule unprivileged).  A path that does not exist is one reason, not an exception.
    """
    reasons: List[str] = []
    given = os.path.normpath(os.path.abspath(path))
    real = os.path.realpath(given)
    seen = set()
    for comp in _components(given) + _components(real):
        if comp in seen:
            continue
        seen.add(comp)
        why = _component_reason(comp, owner)
        if why:
            reasons.append(why)
    return reasons


def _component_reason(comp: str, owner: int) -> Optional[str]:
    try:
        st = os.lstat(comp)
    except OSError as e:
        return f"{comp} cannot be examined: {e.strerror or e}"
    why = stat_problem(st, owner=owner)
    return f"{comp} {why}" if why else None


def stat_problem(st: os.stat_result, *, owner: int, group: int = 0, sticky: bool = True) -> Optional[str]:
    """The one per-file rule: why a file (``lstat``'s answer) is not safe to trust, completing a sentence
    that starts with its name ("is owned by uid 1000, not root"); None when it is.

    It must be ``owner``'s and writable by no one else: not by others, and by its group only when the
    group is ``group``.  A directory with the sticky bit (``/tmp``) may be writable by all when ``sticky``
    (only an entry's owner may rename it; the entry is checked in turn).  A link's own mode means
    nothing (its owner and its directory are what count)."""
    if st.st_uid != owner:
        return f"is owned by uid {st.st_uid}, not {'root' if owner == 0 else f'uid {owner}'}"
    if stat.S_ISLNK(st.st_mode):
        return None
    sticky_dir = sticky and stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_ISVTX)
    if st.st_mode & stat.S_IWOTH and not sticky_dir:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):04o})"
    if st.st_mode & stat.S_IWGRP and not sticky_dir and st.st_gid != group:
        return f"is writable by group {st.st_gid} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def require_trusted(path: str, what: str, *, owner: int = 0, hint: str = "") -> None:
    """Raise a :class:`~cxlctl.errors.CxlctlError` (exit 1) naming every reason ``path``
    (described as ``what``: "the daemon's code", "the probe's helper") is not safe for root."""
    reasons = untrusted(path, owner=owner)
    if reasons:
        from cxlctl.errors import CxlctlError

        raise CxlctlError(
            f"refusing {what} at {path}: another user can change it ({'; '.join(reasons)})",
            hint=hint or "install it under a root-owned directory that only root can write (scripts/install.sh)",
        )


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m cxlctl.hostio.trust PATH...``: exit 1 naming each reason (the install's check)."""
    args = sys.argv[1:] if argv is None else argv
    bad = 0
    for p in args:
        for why in untrusted(p):
            print(f"{p}: {why}", file=sys.stderr)
            bad = 1
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
