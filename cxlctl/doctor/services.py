"""Tools and "Tuning and services": the peer tools' versions, cxlctl's own state, and who else sets its knobs.

Pure functions of :class:`~.model.Facts`.  The tools' answers come from
:mod:`.probes` (run live, or replayed from a record); the tuning state from
the tuning engine's own status; the daemon's state from ``systemctl show``
and the Node Feature Discovery file the daemon rewrites on every rescan.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Dict, List, Optional

from cxlctl.hostio import paths

if TYPE_CHECKING:
    import datetime

    from cxlctl.tuning.conflicts import Conflict
    from cxlctl.tuning.results import JournalSummary, TrialSummary

from . import probes as pr
from .model import CANNOT, FAIL, NOTE, OK, WARN, Check, Evidence, Facts, Probe

T = "Tools"
S = "Tuning and services"

#: ndctl's RAM regions (cxl create-region -t ram) arrived in v77: the for-77/ram-regions merge (b830c4a,
#: 'cxl: add core plumbing for creation of ram regions') is in tag v77 and not in v76.1
CXL_RAM_REGIONS_SINCE = 77
NUMACTL_WI = "--weighted-interleave"


def _probe(f: Facts, *argv: str) -> Optional[Probe]:
    return None if f.probes is None else f.probes.get(pr.key(argv))


def _cannot(f: Facts, layer: str, cid: str) -> Check:
    return Check(layer, cid, CANNOT, f.probes_note or "the tools were not asked")


def _major(text: str) -> Optional[int]:
    m = re.search(r"\b(\d+)(?:\.\d+)*\b", text)
    return int(m.group(1)) if m else None


def check_tools(f: Facts) -> List[Check]:
    """ndctl's two tools, numactl and systemctl: which are there and what their versions allow."""
    if f.probes is None:
        return [_cannot(f, T, "tools")]
    out = [_ndctl_tool(f, tool, pkg) for tool, pkg in (("cxl", "ndctl"), ("daxctl", "daxctl"))]
    return out + [_numactl(f), _systemctl(f)]


def _ndctl_tool(f: Facts, tool: str, pkg: str) -> Check:
    """``cxl`` or ``daxctl``: optional for cxlctl, but an old one cannot manage RAM regions."""
    p = _probe(f, tool, "version")
    ev_src = f"{tool} version"
    if p is None or p.rc is None:
        return Check(
            T,
            f"tools.{tool}",
            NOTE,
            f"{tool} is not installed: cxlctl does not need it ({'health data in the daemon does' if tool == 'cxl' else 'cxlctl dax reconfigure does its work'})",
            (Evidence(ev_src, "not found"),),
            f"apt install {pkg} (or dnf install {pkg})",
        )
    ver = p.out.strip().splitlines()[0] if p.out.strip() else "?"
    major = _major(ver) if p.rc == 0 else None
    if major is None:
        return Check(T, f"tools.{tool}", WARN, f"{tool} version failed (exit {p.rc})", (Evidence(ev_src, ver[:80]),))
    if major < CXL_RAM_REGIONS_SINCE:
        what = "cannot create RAM regions (cxl create-region -t ram)" if tool == "cxl" else "predates CXL RAM regions"
        return Check(
            T,
            f"tools.{tool}",
            NOTE,
            f"{tool} {ver} {what}: that needs ndctl {CXL_RAM_REGIONS_SINCE}+; cxlctl region create does it without",
            (Evidence(ev_src, ver),),
            f"ndctl {CXL_RAM_REGIONS_SINCE} or newer if you want {tool} to manage RAM regions",
        )
    return Check(T, f"tools.{tool}", OK, f"{tool} {ver}", (Evidence(ev_src, ver),))


def _numactl(f: Facts) -> Check:
    """numactl: optional (the launcher sets policies itself); weighted interleave since 2.0.19."""
    h = _probe(f, "numactl", "--help")
    v = _probe(f, "numactl", "--version")
    if h is None or h.rc is None:
        return Check(
            T,
            "tools.numactl",
            NOTE,
            "numactl is not installed: cxlctl launch sets the memory policy itself",
            (Evidence("numactl --help", "not found"),),
            "apt install numactl",
        )
    nver: Optional[str] = None
    if v is not None and v.rc == 0:
        m = re.search(r"\b(\d+\.\d+\.\d+)\b", v.out)
        nver = m.group(1) if m else None
    name = f"numactl {nver}" if nver else "numactl (no --version: before 2.0.17)"
    if NUMACTL_WI in h.out:
        return Check(T, "tools.numactl", OK, f"{name} has {NUMACTL_WI}", (Evidence("numactl --help", NUMACTL_WI),))
    return Check(
        T,
        "tools.numactl",
        NOTE,
        f"{name} lacks {NUMACTL_WI} (2.0.19+): cxlctl launch applies weighted interleave itself",
        (Evidence("numactl --help", f"no {NUMACTL_WI}"),),
        "numactl 2.0.19 or newer, only if you run numactl by hand",
    )


def _systemctl(f: Facts) -> Check:
    """systemctl: without it the cxlctl service cannot run."""
    s = _probe(f, "systemctl", "--version")
    if s is None or s.rc is None:
        return Check(
            T,
            "tools.systemctl",
            NOTE,
            "systemctl is not installed (no systemd): the cxlctl service cannot run here",
            (Evidence("systemctl --version", "not found"),),
        )
    first = s.out.strip().splitlines()[0] if s.out.strip() else "?"
    return Check(
        T, "tools.systemctl", OK if s.rc == 0 else WARN, first[:80], (Evidence("systemctl --version", first[:80]),)
    )


# ----------------------------------------------------------------------------- tuning


def check_profile(f: Facts) -> List[Check]:
    from cxlctl.tuning import journal as jn
    from cxlctl.tuning.results import StatusResult

    st = f.tuning
    if not isinstance(st, StatusResult):
        return [
            Check(
                S,
                "services.profile",
                CANNOT,
                f"tuning state unreadable: {st}",
                (Evidence(jn.JOURNAL, "unreadable"),),
                "cxlctl tune status",
            )
        ]
    out: List[Check] = []
    j = st.journal
    jev = Evidence(jn.JOURNAL, f"state {j.state}, profile {j.profile}, pid {j.pid}" if j else "absent")
    if st.active_profile:
        v = st.verify
        if v is not None and v.drift:
            out.append(
                Check(
                    S,
                    "services.profile",
                    WARN,
                    f"profile {st.active_profile} is applied but {len(v.drift)} setting(s) drifted: {', '.join(v.drift[:6])}",
                    (jev,),
                    f"cxlctl tune verify shows them; cxlctl tune apply {st.active_profile} sets them again",
                )
            )
        else:
            out.append(
                Check(
                    S,
                    "services.profile",
                    OK,
                    f"profile {st.active_profile} is applied" + (f", {v.passed} setting(s) as applied" if v else ""),
                    (jev,),
                )
            )
    else:
        out.append(
            Check(
                S,
                "services.profile",
                NOTE,
                "no cxlctl profile is applied on this boot",
                (jev,),
                "cxlctl tune recommend",
            )
        )
    trial = _trial(st.trial, jev)
    if trial is not None:
        out.append(trial)
    journal = _journal(j, jev)
    if journal is not None:
        out.append(journal)
    return out


def _trial(t: Optional[TrialSummary], jev: Evidence) -> Optional[Check]:
    """A ``tune try`` waiting for its confirmation (it reverts by itself at its deadline)."""
    if t is None:
        return None
    import datetime  # ~1.5 ms: only for a pending try

    when = datetime.datetime.fromtimestamp(t.deadline, datetime.timezone.utc).strftime("%H:%M:%SZ")
    msg = f"tune try of {t.profile} is unconfirmed: it reverts at {when} ({t.seconds_left:.0f} s left) unless confirmed"
    if not t.waiting:
        msg += f"; its waiting process (pid {t.pid}) is gone, the next cxlctl tune command or the daemon reverts it"
    return Check(S, "services.tune-try", WARN, msg, (jev,), "cxlctl tune confirm (keep it) or cxlctl tune revert")


def _journal(j: Optional[JournalSummary], jev: Evidence) -> Optional[Check]:
    """The tuning journal: an interrupted or failed transaction of this boot, or one of an earlier boot."""
    from cxlctl.tuning import journal as jn

    if j is None:
        return None
    if j.this_boot:
        bad = {
            jn.APPLYING: f"the apply of {j.profile} was interrupted (pid {j.pid}): the knobs are half-applied",
            jn.ROLLBACK_FAILED: f"the apply of {j.profile} failed and could not be fully rolled back: {j.error}",
            jn.REVERT_FAILED: f"the revert of {j.profile} did not complete: {j.error}",
        }.get(j.state)
        return Check(S, "services.journal", FAIL, bad, (jev,), "cxlctl tune revert") if bad else None
    return Check(
        S,
        "services.journal",
        NOTE,
        "the tuning journal is from an earlier boot; the next tune command discards it",
        (jev,),
    )


def check_conflicts(f: Facts) -> List[Check]:
    from cxlctl.tuning.conflicts import Conflict

    out: List[Check] = []
    cxl = any(n.kind == "cxl" and n.has_memory for n in f.inv.nodes)
    for c in f.conflicts:
        if isinstance(c, Conflict):
            out.append(_conflict(c, cxl))
    if f.tuned_active:
        sets = [c for c in f.conflicts if isinstance(c, Conflict) and c.source.startswith("TuneD profile")]
        out.insert(
            0,
            Check(
                S,
                "services.tuned",
                NOTE,
                f"TuneD profile {f.tuned_active} is active"
                + (
                    f": it sets {len(sets)} knob(s) cxlctl manages (below)"
                    if sets
                    else "; it sets none of the knobs cxlctl manages"
                ),
                (Evidence(paths.TUNED_ACTIVE, f.tuned_active),),
            ),
        )
    if not [c for c in out if c.id == "services.sysctl"]:
        src = ", ".join(paths.SYSCTL_DIRS[:2]) + ", TuneD"
        out.append(
            Check(
                S,
                "services.sysctl",
                OK,
                "no sysctl.d file or TuneD profile sets the knobs cxlctl manages",
                (Evidence(src, "none"),),
            )
        )
    return out


def _conflict(c: Conflict, cxl: bool) -> Check:
    """One knob another file sets: harmless, overridden at boot, or (``zone_reclaim_mode``) harmful with CXL."""
    ev = (Evidence(c.source, f"{c.key} = {c.theirs}"),)
    if c.ours is None and c.key == "vm.zone_reclaim_mode" and c.theirs != "0" and cxl:
        return Check(
            S,
            "services.sysctl",
            WARN,
            f"{c.source} sets {c.key}={c.theirs} on a host with CXL nodes: allocations reclaim local DRAM instead of spilling to CXL",
            ev,
            "cxlctl tune recommend, then cxlctl tune apply PROFILE --persist"
            + (
                " (TuneD re-applies sysctl.d after its profile; or choose a TuneD profile without it: tuned-adm profile NAME)"
                if c.source.startswith("TuneD")
                else f" (or remove the key from {c.source})"
            ),
        )
    if c.ours is None:
        return Check(
            S, "services.sysctl", NOTE, f"{c.source} sets {c.key}={c.theirs}, a knob cxlctl profiles manage", ev
        )
    if c.ours != c.theirs and c.wins_at_boot != "cxlctl":
        return Check(
            S,
            "services.sysctl",
            WARN,
            f"{c.source} sets {c.key}={c.theirs} (cxlctl: {c.ours}); at boot {c.wins_at_boot} wins: {c.note}",
            ev,
            "cxlctl tune apply PROFILE --persist, or remove the key from " + c.source,
        )
    return Check(
        S,
        "services.sysctl",
        OK if c.ours == c.theirs else NOTE,
        f"{c.source} sets {c.key}={c.theirs}; {c.note}",
        ev,
    )


def parse_show(text: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k.strip()] = v.strip()
    return out


def check_daemon(f: Facts, now: Optional[datetime.datetime] = None) -> List[Check]:
    """The cxlctl unit's state, and whether its node labels are still being refreshed."""
    out = [_daemon_unit(f)]
    labels = _daemon_labels(f, now)
    return out + [labels] if labels is not None else out


def _daemon_unit(f: Facts) -> Check:
    """What ``systemctl show`` says of the cxlctl unit."""
    src = f"systemctl show {pr.UNIT} -p {pr.SHOW_PROPS}"
    if f.probes is None:
        return _cannot(f, S, "services.daemon")
    p = _probe(f, "systemctl", "show", pr.UNIT, "-p", pr.SHOW_PROPS)
    if p is None or p.rc is None:
        return Check(
            S,
            "services.daemon",
            CANNOT,
            "cannot check: systemctl is not installed (no systemd)",
            (Evidence(src, "systemctl not found"),),
        )
    if p.rc != 0:
        first = (p.out.strip().splitlines() or ["no output"])[0]
        return Check(
            S,
            "services.daemon",
            CANNOT,
            f"cannot check: systemctl show failed (exit {p.rc}): {first[:120]}",
            (Evidence(src, first[:120]),),
        )
    kv = parse_show(p.out)
    state = kv.get("ActiveState", "?")
    sub = kv.get("SubState", "?")
    pid = kv.get("MainPID", "0")
    shown = " ".join(f"{k}={kv[k]}" for k in ("LoadState", "ActiveState", "SubState", "MainPID", "Result") if k in kv)
    ev = (Evidence(src, shown),)
    if kv.get("LoadState") == "not-found":
        return Check(
            S,
            "services.daemon",
            NOTE,
            f"{pr.UNIT} is not installed",
            ev,
            "install it as docs/daemon.md says (systemd/cxlctl.service)",
        )
    if state == "active":
        return Check(S, "services.daemon", OK, f"{pr.UNIT} is active ({sub}), main pid {pid}", ev)
    if state == "failed":
        return Check(
            S,
            "services.daemon",
            FAIL,
            f"{pr.UNIT} has failed ({sub}, result {kv.get('Result', '?')})",
            ev,
            f"journalctl -b -u {pr.UNIT}; then systemctl restart {pr.UNIT}",
        )
    if state == "inactive":
        return Check(
            S,
            "services.daemon",
            NOTE,
            f"{pr.UNIT} is installed but not running ({sub})",
            ev,
            f"systemctl enable --now {pr.UNIT}",
        )
    return Check(S, "services.daemon", NOTE, f"{pr.UNIT} is {state} ({sub}), main pid {pid}", ev)


def _daemon_labels(f: Facts, now: Optional[datetime.datetime]) -> Optional[Check]:
    """The daemon's NFD labels: expired ones mean it stopped refreshing them.  None without labels."""
    if f.nfd_labels is None:
        return None
    from cxlctl.k8s import nfd

    exp = nfd.expiry_of(f.nfd_labels)
    path = f"{paths.NFD_DIR}/{nfd.FILE_NAME}"
    import datetime  # ~1.5 ms: only when the daemon runs

    now = now or datetime.datetime.now(datetime.timezone.utc)
    ev2 = (Evidence(path, f"expiry {exp.strftime(nfd.EXPIRY_FORMAT)}" if exp else "no expiry"),)
    if exp is not None and exp < now:
        return Check(
            S,
            "services.daemon-labels",
            WARN,
            "the daemon's node labels have expired: it stopped refreshing them (stopped, or its rescans fail)",
            ev2,
            f"systemctl status {pr.UNIT}",
        )
    return Check(S, "services.daemon-labels", OK, "the daemon's node labels are current", ev2)


def check_tiering(f: Facts) -> List[Check]:
    """Whether anything moves pages between DRAM and CXL: the verdict ``status`` and ``stat``
    give too, in the same words (:mod:`cxlctl.tiering`); a warning, as theirs."""
    from cxlctl import tiering

    found = tiering.of_inventory(f.inv, f.host.reader)
    if found is None:
        return []
    ev = tuple(
        Evidence(p, v)
        for p, v in (
            (paths.DEMOTION_ENABLED, f.inv.knob_value("demotion_enabled")),
            (paths.NUMA_BALANCING, f.inv.knob_value("kernel.numa_balancing")),
            (paths.DAMON_KDAMONDS, "no running migrate_hot/migrate_cold scheme"),
        )
        if v is not None
    )
    return [Check(S, f"tuning.{tiering.ID}", WARN, found[0], ev, found[1])]


def checks(f: Facts) -> List[Check]:
    """(Tools checks are separate: :func:`check_tools`.)"""
    return check_profile(f) + check_tiering(f) + check_conflicts(f) + check_daemon(f)
