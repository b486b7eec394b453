"""The daemon's first act as root: refuse to run code another user can change (issue 43).

systemd starts ``cxlctl daemon run`` as root at every boot.  If the code it runs -- the
interpreter, the ``cxlctl`` package, the command's script, a directory on ``sys.path`` -- lies
where another user can write (a checkout in a home folder, a venv under ``/tmp``), or under a
directory they can rename, that user gets root at the next start.  ``scripts/install.sh`` run
as root installs into a root-owned prefix; this check is what still holds when the unit was
pointed somewhere else.  Only ``os``, ``sys`` and :mod:`cxlctl.hostio.trust` are imported:
the check runs before anything else of the daemon is loaded.
"""

from __future__ import annotations

import os
import sys
from typing import List

from cxlctl.hostio.trust import require_trusted


def code_paths() -> List[str]:
    """What a root daemon executes and imports from: the interpreter, the package, the script
    it was started as, and every existing ``sys.path`` directory (dependencies load from there)."""
    import cxlctl

    out = [sys.executable, os.path.dirname(os.path.abspath(cxlctl.__file__))]
    if sys.argv and sys.argv[0] and os.path.isfile(sys.argv[0]):
        out.append(os.path.abspath(sys.argv[0]))
    for p in sys.path:
        d = os.path.abspath(p or os.curdir)
        if os.path.isdir(d) and d not in out:
            out.append(d)
    return out


def require_own_code_trusted() -> None:
    """As root: :class:`~cxlctl.errors.CxlctlError` (exit 1) naming the first path of
    :func:`code_paths` another user can change.  Any other user runs with their own rights:
    nothing to check."""
    if os.geteuid() != 0:
        return
    for p in code_paths():
        require_trusted(
            p,
            "the daemon's code",
            hint="install cxlctl as root (sudo bash scripts/install.sh: into /opt/cxlctl) and point the unit's "
            "ExecStart at it (sudo systemd/install.sh)",
        )
