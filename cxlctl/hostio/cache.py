"""cxlctl's cache directory (the probe's compiled helper, the engines' flag lists), and whether
what is in it may be used.

Why one module: both caches hold something root acts on -- a program root runs, a list of
flags root passes to an engine -- and their names are computable by anyone.  Issue 43 found
both taken from ``$CXLCTL_CACHE_DIR``, ``$XDG_CACHE_HOME`` or ``~/.cache``, which ``sudo -E``
or a ``HOME`` kept by sudo hand to the invoking user.  So:

* root ignores ``$XDG_CACHE_HOME`` and ``$HOME`` and uses :data:`~.paths.ROOT_CACHE_DIR`;
  ``$CXLCTL_CACHE_DIR`` only when :func:`~.trust.untrusted` finds nothing wrong with it (the
  test suites and the VM guests isolate their runs with it; a user's directory never passes);
* a directory is used only when it passes the check for its user (root: the one trust check,
  every component root's and closed to others; a user: their own, not writable by others),
  and is writable; otherwise :func:`fresh_private` gives a new one, and the caller says why
  (a read-only cache once made the probe fail with the linker's message);
* a cached file is used only when it is its user's and not writable by others
  (:func:`file_problem`).
"""

from __future__ import annotations

import os
import stat
from typing import Mapping, Optional

from . import paths
from .trust import stat_problem, untrusted


def cache_dir(env: Mapping[str, str]) -> str:
    """The cache directory for this user: see the module's rules (``env``: the caller's environment)."""
    if os.geteuid() == 0:
        given = env.get("CXLCTL_CACHE_DIR")
        if given and os.path.isabs(given):
            near = given  # not made yet: its nearest existing directory decides (it is made 0700 there)
            while not os.path.lexists(near) and os.path.dirname(near) != near:
                near = os.path.dirname(near)
            if os.path.isdir(near) and not untrusted(near):
                return given
        return paths.ROOT_CACHE_DIR
    if env.get("CXLCTL_CACHE_DIR"):
        return env["CXLCTL_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cxlctl")


def dir_problem(d: str) -> Optional[str]:
    """Why ``d`` cannot hold this user's cache (made 0700 when missing); None when it can.

    The answer completes a sentence that starts with the directory's name ("is not writable:
    read-only file system"), so a caller names the directory and the reason together."""
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
    except OSError as e:
        return f"cannot be created ({e.strerror or e})"
    uid = os.geteuid()
    if uid == 0:
        reasons = untrusted(d)
        if reasons:
            return f"can be changed by another user ({'; '.join(reasons)})"
    else:
        why = file_problem(d)
        if why:
            return why
    try:
        ro = bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        ro = False
    if ro:
        return "is not writable (read-only file system)"
    if not os.access(d, os.W_OK | os.X_OK):
        return "is not writable (permission denied)"
    return None


def file_problem(path: str) -> Optional[str]:
    """Why this user must not use ``path`` from its cache (not its own, or writable by others); None when it may.

    :func:`~.trust.stat_problem`, the trust check's rule for one file, with the user as the owner; group
    write is allowed for the user's own group (a user-private group with umask 002); no link, and no
    sticky directory writable by all (a cache is the user's alone)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be examined ({e.strerror or e})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    return stat_problem(st, owner=os.geteuid(), group=os.getegid(), sticky=False)


def fresh_private() -> str:
    """A new directory only this process' user can use, removed when cxlctl exits.

    Made in ``/tmp`` itself when root (a ``$TMPDIR`` kept by ``sudo -E`` may be a user's
    directory, where the user could rename it away), else where ``$TMPDIR`` says."""
    import atexit
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="cxlctl-cache-", dir=paths.ROOT_TMP if os.geteuid() == 0 else None)
    atexit.register(shutil.rmtree, d, True)
    return d


def sha256_of(path: str) -> str:
    """The SHA-256 of a file's bytes, hex (the probe's helper is recorded and checked by it)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
