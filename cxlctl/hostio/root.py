"""The ``--root`` setting: resolve it once, map host paths under it with one function."""

from __future__ import annotations

import os

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional


def resolve_root(cli_value: Optional[str]) -> str:
    """The root directory: ``--root`` if given, else ``CXLCTL_ROOT``, else ``/``.

    An empty value is an error, not ``/``: ``--root "$UNSET_VAR"`` must not
    silently act on the live host.  (An empty ``CXLCTL_ROOT`` is treated as
    unset, as the shell convention for environment variables has it.)  The error
    module is imported when there is an error to raise: ``status --json`` needs it
    no other time.
    """
    if cli_value is not None and cli_value == "":
        from cxlctl.errors import UsageError

        raise UsageError("--root is empty", hint="point it at / or at a tree made by `cxlctl record`")
    root = cli_value if cli_value is not None else os.environ.get("CXLCTL_ROOT") or "/"
    if not os.path.isdir(root):
        from cxlctl.errors import UsageError

        src = "--root" if cli_value is not None else "CXLCTL_ROOT"
        raise UsageError(
            f"{src} {root!r} is not a directory", hint="point it at / or at a tree made by `cxlctl record`"
        )
    root = os.path.abspath(root)
    if root != "/" and not any(os.path.isdir(os.path.join(root, d)) for d in ("sys", "proc")):
        # a folder of trees (fixtures/linux-7.x) or a typo: read as a host it would be one
        # without CXL, kernel or knobs, every answer a wrong one
        from cxlctl.errors import UsageError

        src = "--root" if cli_value is not None else "CXLCTL_ROOT"
        raise UsageError(
            f"{src} {root!r} holds neither sys/ nor proc/: it is not a host's tree",
            hint="point it at / or at one tree made by `cxlctl record` (the directory holding sys/ and proc/)",
        )
    return root


#: the environment variable naming where the host's ``/proc/sys`` is mounted when it is not at
#: ``/proc/sys`` (see :func:`proc_sys_at`)
PROC_SYS_ENV = "CXLCTL_HOST_PROC_SYS"
_proc_sys: Optional[str] = None


def proc_sys_at() -> str:
    """Where the live host's ``/proc/sys`` is: ``/proc/sys``, or ``$CXLCTL_HOST_PROC_SYS``.

    Why: an unprivileged Kubernetes pod's own ``/proc/sys`` is read-only (the runtime's read-only
    paths) and no volume may be mounted inside ``/proc``, so the DaemonSet mounts the host's
    ``/proc/sys/vm`` and ``/proc/sys/kernel`` at ``/host/proc/sys/…`` (as Cilium does) and names the
    place here.  Only the file access moves: every host path, the journal's included, stays
    ``/proc/sys/…``, so a ``cxlctl tune revert`` on the host undoes what the pod wrote.  The place
    must be root's own and writable by no one else (:func:`cxlctl.hostio.trust.untrusted`): root
    writes kernel knobs there, and a directory a user could fill would let them pick the values.
    Resolved once, on first use."""
    global _proc_sys
    if _proc_sys is None:
        at = os.environ.get(PROC_SYS_ENV) or ""
        if not at:
            _proc_sys = "/proc/sys"
        else:
            from .trust import untrusted

            bad = ["not an absolute path"] if not os.path.isabs(at) else untrusted(at)
            if bad:
                from cxlctl.errors import UsageError

                raise UsageError(
                    f"{PROC_SYS_ENV}={at}: {bad[0]}",
                    hint="point it at the host's /proc/sys mounted in this container, or unset it",
                )
            _proc_sys = os.path.normpath(at)
    return _proc_sys


def under(root: str, path: str) -> str:
    """``path`` (as seen on the target host, e.g. ``/proc/sys/vm/swappiness``) under ``root``.

    The one place that maps host paths into a ``--root`` tree; ``root`` is an
    absolute path (what :func:`resolve_root` returns).  On the live host, ``/proc/sys/…``
    goes where :func:`proc_sys_at` says.
    """
    if root == "/":
        if path.startswith("/proc/sys/") and (_proc_sys or proc_sys_at()) != "/proc/sys":
            return (_proc_sys or proc_sys_at()) + path[9:]
        return path
    return root.rstrip("/") + path


#: characters a shell takes literally in a word
_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+:@%,=")


def shell_word(text: str) -> str:
    """``text`` as one shell word (``shlex.quote``'s rule, without importing ``re`` on ``status``'s path)."""
    if text and all(c in _SHELL_SAFE for c in text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def cxlctl_command(root: str, args: str) -> str:
    """``cxlctl ARGS`` as a hint prints it for the host at ``root``: ``--root ROOT`` in it unless
    that is the live host, so the hint runs as printed against the host the output described
    (``cxlctl tune revert`` under ``--root`` would revert the live machine)."""
    return f"cxlctl {args}" if root == "/" else f"cxlctl --root {shell_word(root)} {args}"


#: commands whose hints act on the host cxlctl read (``launch``, ``policy``, ``record`` and ``daemon``
#: act on the live machine's processes and services: their hints stay as written)
_HOST_COMMANDS = ("status", "doctor", "stat", "top", "tune", "region", "dax", "health", "events", "k8s")


def rooted(root: str, text: str) -> str:
    """``text`` (a fix, a hint) with ``--root ROOT`` in every ``cxlctl COMMAND`` it names, so the
    hint runs as printed against the tree the output described; unchanged on the live host."""
    if root == "/" or "cxlctl " not in text:
        return text
    import re

    words = "|".join(_HOST_COMMANDS)
    return re.sub(rf"\bcxlctl (?=(?:{words})\b)", lambda _: f"cxlctl --root {shell_word(root)} ", text)
