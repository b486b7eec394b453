"""Who the engine runs as, and the privilege drop right before ``execve`` (issue 43, item 3).

Why: ``sudo cxlctl launch`` needs root for the launch itself — the private mount
namespace and the CXL-bound ``/dev/shm`` (CAP_SYS_ADMIN), the system-wide
weighted-interleave weights — but the engine it then runs is a network server
that loads models and code from the network.  Left as root with every
capability, a bug in it (or in a model's custom code) owns the host.  So, after
the mount and the policy calls and before ``execve``, the process becomes an
ordinary user: supplementary groups, gid and uid set; the bounding, ambient and
inheritable capability sets cleared (setuid to a non-zero uid already clears the
effective and permitted sets, and the empty bounding set keeps file capabilities
of whatever the engine runs from granting any back); ``no_new_privs`` set, so
no setuid program the engine runs gains anything.

The order matters and is :func:`cxlctl.launch.build.execute`'s: the memory
policy and CPU affinity are per task (set_mempolicy(2), sched_setaffinity(2))
and no credential change touches them, so setting them as root and dropping
afterwards leaves them on the engine; the mount is made while
CAP_SYS_ADMIN is still held.

Who: ``--user``/``--group``, else the ``sudo`` caller (SUDO_UID/SUDO_GID).  An
engine runs as root only when asked with ``--allow-root``; as a non-root
caller, cxlctl has nothing to drop and the engine runs as that caller.

prctl(2) and capset(2) through ctypes (as the memory-policy calls in
:mod:`cxlctl.launch.policy`): the stdlib has setuid/setgroups but no
capability calls, and no dependency is needed for four syscalls.
"""

from __future__ import annotations

import ctypes
import grp
import os
import pwd
from typing import Dict, Mapping, Optional, Tuple

from cxlctl.errors import CxlctlError, UsageError
from cxlctl.namedrecord import NamedTuple

#: uapi/linux/prctl.h
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
#: uapi/linux/capability.h: _LINUX_CAPABILITY_VERSION_3 (two 32-bit data words)
_CAP_V3 = 0x20080522
#: capability numbers are below 64 on every kernel (CAP_LAST_CAP is 40 in 6.x); PR_CAPBSET_DROP
#: answers EINVAL past the last one, which ends the loop
_CAP_MAX = 64
_EINVAL = 22


class RunAs(NamedTuple):
    """The identity the engine is exec'd with."""

    uid: int
    gid: int
    groups: Tuple[int, ...]  # supplementary groups
    user: str  # name, or the number when the passwd database has none
    group: str
    source: str  # --user | sudo caller | --allow-root | caller (not root: nothing to drop)
    drop: bool  # change uid/gid and clear capabilities before exec (cxlctl runs as root)
    home: Optional[str] = None  # the user's home directory (HOME of the engine), when known
    refused: Optional[str] = None  # why a real launch is refused (root with nobody to run as)

    def describe(self) -> str:
        text = f"{self.user} (uid {self.uid}), group {self.group} (gid {self.gid})"
        if self.groups:
            text += ", groups " + ",".join(str(g) for g in self.groups)
        if self.drop:
            text += f"; from {self.source}: no capabilities, no_new_privs"
        elif self.refused:
            text += "; a real launch is refused (no --user, no sudo caller, no --allow-root)"
        elif self.uid == 0:
            text += f"; {self.source}: root with every capability"
        else:
            text += f"; {self.source}"
        return text

    def to_json(self) -> Dict[str, object]:
        return {
            "user": self.user,
            "uid": self.uid,
            "group": self.group,
            "gid": self.gid,
            "groups": list(self.groups),
            "source": self.source,
            "drop_privileges": self.drop,
            "refused": self.refused,
        }


def _user(spec: str) -> Tuple[int, Optional[pwd.struct_passwd]]:
    """(uid, passwd entry or None) of a user name or number."""
    try:
        return (pw := pwd.getpwnam(spec)).pw_uid, pw
    except KeyError:
        pass
    if spec.isdigit():
        uid = int(spec)
        try:
            return uid, pwd.getpwuid(uid)
        except KeyError:
            return uid, None
    raise UsageError(f"--user {spec!r}: no such user", hint="give a user name from /etc/passwd or a number")


def _group(spec: str, opt: str = "--group") -> int:
    try:
        return grp.getgrnam(spec).gr_gid
    except KeyError:
        pass
    if spec.isdigit():
        return int(spec)
    raise UsageError(f"{opt} {spec!r}: no such group", hint="give a group name from /etc/group or a number")


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def resolve(
    user: Optional[str], group: Optional[str], allow_root: bool, environ: Mapping[str, str], euid: Optional[int] = None
) -> RunAs:
    """The engine's identity from the options and the ``sudo`` caller; no change on the host.

    A root launch with neither ``--user``, a sudo caller nor ``--allow-root`` resolves to root
    with ``refused`` set: the dry run shows it, a real launch refuses (:func:`check`)."""
    euid = os.geteuid() if euid is None else euid
    if allow_root and (user is not None or group is not None):
        raise UsageError("--allow-root runs the engine as root: it takes no --user or --group", hint="give one")
    if euid != 0:
        if allow_root:
            raise UsageError("--allow-root: cxlctl is not running as root", hint="leave out --allow-root")
        if user is not None or group is not None:
            raise UsageError(
                "--user and --group need cxlctl to run as root (only root can change who a program runs as)",
                hint="run as the user itself, or with sudo",
            )
        gid = os.getegid()
        return RunAs(euid, gid, (), _name(euid), _group_name(gid), "caller", drop=False)
    if allow_root:
        return RunAs(0, 0, (), "root", _group_name(0), "--allow-root", drop=False)
    source = "--user"
    if user is not None:
        uid, pw = _user(user)
    elif environ.get("SUDO_UID", "").isdigit() and environ["SUDO_UID"] != "0":
        source = "sudo caller (SUDO_UID)"
        uid, pw = _user(environ["SUDO_UID"])
        if group is None and environ.get("SUDO_GID", "").isdigit():
            group = environ["SUDO_GID"]
    else:
        return RunAs(
            0,
            0,
            (),
            "root",
            _group_name(0),
            "root (refused)",
            drop=False,
            refused="an engine is a network server: cxlctl does not run it as root unless asked",
        )
    if group is not None:
        gid = _group(group)
    elif pw is not None:
        gid = pw.pw_gid
    else:
        raise UsageError(f"--user {user}: no passwd entry, so no primary group", hint="add --group GROUP")
    if uid == 0:
        raise UsageError(
            "--user root runs the engine as root", hint="say so with --allow-root, or give an unprivileged user"
        )
    name = pw.pw_name if pw is not None else str(uid)
    groups: Tuple[int, ...] = ()
    if pw is not None:
        groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, gid)) - {gid}))
    return RunAs(
        uid, gid, groups, name, _group_name(gid), source, drop=True, home=pw.pw_dir if pw is not None else None
    )


def _name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def env_for(ra: RunAs) -> Dict[str, str]:
    """HOME, USER and LOGNAME of the user the engine becomes (sudo leaves root's or the caller's:
    an engine caches models under HOME, which must be its own)."""
    if not ra.drop:
        return {}
    env = {"USER": ra.user, "LOGNAME": ra.user}
    if ra.home:
        env["HOME"] = ra.home
    return env


def check(ra: RunAs) -> None:
    """Refuse a real launch that would run the engine as root without ``--allow-root``."""
    if ra.refused:
        raise UsageError(
            f"refusing to run the engine as root: {ra.refused}",
            hint="give --user USER (and --group GROUP), run through sudo as that user, or add --allow-root",
        )


def _prctl(libc: ctypes.CDLL, option: int, arg: int, what: str) -> int:
    if libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        err = ctypes.get_errno()
        if err == _EINVAL and option == PR_CAPBSET_DROP:
            return err
        raise CxlctlError(f"{what} failed: {os.strerror(err)}", hint="nothing was launched; report this")
    return 0


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop(ra: RunAs) -> None:
    """Become ``ra`` with no capabilities and ``no_new_privs``; the last step before ``execve``.

    Bounding set first (PR_CAPBSET_DROP needs CAP_SETPCAP, gone after setuid), then the ids
    (groups before gid before uid: each needs the privilege the next one gives up), then
    capset(2) with all three sets empty (setuid leaves the inheritable set), then no_new_privs.
    Every step checked; the result verified with the kernel's own view (getresuid, capget)."""
    if not ra.drop:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clearing the ambient capabilities")
    for cap in range(_CAP_MAX):
        if _prctl(libc, PR_CAPBSET_DROP, cap, f"dropping capability {cap} from the bounding set"):
            break
    try:
        os.setgroups(list(ra.groups))
        os.setresgid(ra.gid, ra.gid, ra.gid)
        os.setresuid(ra.uid, ra.uid, ra.uid)
    except OSError as e:
        raise CxlctlError(
            f"switching to {ra.user}:{ra.group} failed: {e.strerror}", hint="nothing was launched; report this"
        ) from None
    hdr = _CapHeader(_CAP_V3, 0)
    data = (_CapData * 2)()
    if libc.capset(ctypes.byref(hdr), data) != 0:
        err = ctypes.get_errno()
        raise CxlctlError(f"clearing the capabilities failed: {os.strerror(err)}", hint="nothing was launched")
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1, "setting no_new_privs")
    got = (_CapData * 2)()
    if libc.capget(ctypes.byref(_CapHeader(_CAP_V3, 0)), got) != 0 or any(
        d.effective or d.permitted or d.inheritable for d in got
    ):
        raise CxlctlError("capabilities remain after dropping them", hint="nothing was launched; report this")
    if os.getresuid() != (ra.uid,) * 3 or os.getresgid() != (ra.gid,) * 3:
        raise CxlctlError(f"still not {ra.user}:{ra.group} after switching", hint="nothing was launched")
