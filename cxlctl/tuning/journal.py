"""The write-ahead journal of original knob values, under ``<root>/run/cxlctl/``.

Why a journal: an apply changes several kernel settings one by one; if the
process dies in the middle (SIGKILL, OOM, power loss of the session), the
originals must still be known so ``cxlctl tune revert`` can put every knob
back.  So the journal is written — atomically and durably — *before* the first
knob write, and it holds the whole group of coupled files (all
weighted-interleave ``nodeN`` weights and ``auto``), not only the files written.

Why ``/run``: it is tmpfs, so the journal disappears on reboot together with
the runtime values it describes.  It is also stamped with the boot id
(``/proc/sys/kernel/random/boot_id``) and a journal from another boot is
discarded, in case ``/run`` is not a tmpfs.

Format: JSON with ``"schema": 1``; file mode 0600.  Written as temp file +
fsync + rename + fsync of the directory, so a reader sees the old or the new
journal, never a torn one.

Per-entry values:

``original``  the value before cxlctl touched the knob this boot (what revert restores)
``prior``     the value before *this* apply (what a failed apply rolls back to;
              differs from ``original`` when switching from one profile to another)
``desired``   canonical value verify expects, or None for files saved only
              because a coupled write changes them
``write``     the exact text written, or None
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Optional, Tuple

from cxlctl.errors import CxlctlError
from cxlctl.hostio import paths
from cxlctl.hostio.atomic import atomic_write, remove
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Unreadable, fence_of
from cxlctl.hostio.write import outside
from cxlctl.namedrecord import NamedTuple

SCHEMA = 1
RUN_DIR = paths.RUN_DIR
JOURNAL = RUN_DIR + "/journal.json"
BOOT_ID = paths.BOOT_ID

#: journal states
APPLYING = "applying"  # write-ahead record; still this way after a crash
APPLIED = "applied"
ROLLED_BACK = "rolled-back"  # apply failed, every change was undone
ROLLBACK_FAILED = "rollback-failed"  # apply failed and some knobs could not be restored
REVERTED = "reverted"
REVERT_FAILED = "revert-failed"

#: states in which knobs may differ from their originals (revert has work to do)
ACTIVE_STATES = (APPLYING, APPLIED, ROLLBACK_FAILED, REVERT_FAILED)


class Entry(NamedTuple):
    knob: str  # registry name
    setting: str  # display name (``weighted_interleave.node2``)
    path: str  # root-relative path, e.g. /proc/sys/vm/swappiness
    original: Optional[str]  # raw text; None = file absent
    prior: Optional[str]
    desired: Optional[str]
    write: Optional[str]
    status: str  # pending | unchanged | written | failed | restored | gone | restore-failed | reverted


class Journal(NamedTuple):
    schema: int
    state: str
    profile: str
    profile_source: str
    boot_id: Optional[str]
    pid: int
    tool: str
    started: str
    finished: Optional[str]
    entries: Tuple[Entry, ...]
    skipped: Tuple[Tuple[str, str], ...]  # (setting, why) for unsupported/skipped settings
    persist: Dict[str, Optional[str]]  # path → content before cxlctl wrote it (None = absent)
    error: Optional[str] = None
    previous_profile: Optional[str] = None  # when this apply switched from another profile
    #: the profile document when it has no file (built in memory, e.g. the launcher's
    #: weights), so the daemon can rebuild and keep enforcing it
    profile_data: Optional[Dict[str, Any]] = None
    trial: Optional[Trial] = None  # set by `tune try` until it is confirmed
    #: the apply ran DAMON tiering beside DAMON modules' kdamonds (``--beside-other-damon`` or
    #: the profile's ``beside_other_damon``): re-applying this profile (the daemon, ``tune
    #: apply``/``verify`` of it) keeps that choice instead of refusing
    beside_other_damon: bool = False


class Trial(NamedTuple):
    """A `tune try` waiting for confirmation (why in the journal: the waiter may be SIGKILLed,
    and then the next `cxlctl tune` command or the daemon reverts the try once it expires)."""

    deadline: float  # wall-clock seconds (time.time()); after it, an unconfirmed try is reverted
    timeout: float
    pid: int  # the waiting process
    confirmed: Optional[str] = None  # when `tune confirm` (or Enter) kept it
    previous: Optional[Journal] = None  # the journal this try replaced; put back when it is reverted

    @property
    def pending(self) -> bool:
        return self.confirmed is None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def same_boot(journal: Journal, current: Optional[str]) -> bool:
    """False only when both ids are known and differ (unknown = give the benefit of the doubt)."""
    return journal.boot_id is None or current is None or journal.boot_id == current


def to_json(j: Journal) -> Dict[str, Any]:
    d = j._asdict()
    d["entries"] = [e._asdict() for e in j.entries]
    d["skipped"] = [{"setting": s, "reason": r} for s, r in j.skipped]
    if j.trial is not None:
        t = j.trial._asdict()
        t["previous"] = None if j.trial.previous is None else to_json(j.trial.previous)
        d["trial"] = t
    return d


def _trial(d: Any) -> Optional[Trial]:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError("trial is not an object")
    return Trial(
        deadline=float(d["deadline"]),
        timeout=float(d.get("timeout", 0)),
        pid=int(d.get("pid", 0)),
        confirmed=None if d.get("confirmed") is None else str(d["confirmed"]),
        previous=None if d.get("previous") is None else from_json(d["previous"]),
    )


class JournalCorrupt(CxlctlError):
    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"the tuning journal {path} is unreadable ({why})",
            hint="inspect it; once the knobs are known to be right, remove it by hand",
        )


def _entry(d: Any) -> Entry:
    if not isinstance(d, dict):
        raise ValueError("entry is not an object")
    return Entry(
        knob=str(d["knob"]),
        setting=str(d.get("setting", d["knob"])),
        path=str(d["path"]),
        original=None if d.get("original") is None else str(d["original"]),
        prior=None if d.get("prior") is None else str(d["prior"]),
        desired=None if d.get("desired") is None else str(d["desired"]),
        write=None if d.get("write") is None else str(d["write"]),
        status=str(d.get("status", "pending")),
    )


def from_json(d: Any) -> Journal:
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if d.get("schema") != SCHEMA:
        raise ValueError(f"schema {d.get('schema')!r}, this cxlctl reads schema {SCHEMA}")
    persist = d.get("persist") or {}
    if not isinstance(persist, dict):
        raise ValueError("persist is not an object")
    return Journal(
        schema=SCHEMA,
        state=str(d["state"]),
        profile=str(d["profile"]),
        profile_source=str(d.get("profile_source", "")),
        boot_id=d.get("boot_id"),
        pid=int(d.get("pid", 0)),
        tool=str(d.get("tool", "")),
        started=str(d.get("started", "")),
        finished=d.get("finished"),
        entries=tuple(_entry(e) for e in d.get("entries", [])),
        skipped=tuple((str(s["setting"]), str(s["reason"])) for s in d.get("skipped", [])),
        persist={str(k): (None if v is None else str(v)) for k, v in persist.items()},
        error=d.get("error"),
        previous_profile=d.get("previous_profile"),
        profile_data=d["profile_data"] if isinstance(d.get("profile_data"), dict) else None,
        trial=_trial(d.get("trial")),
        beside_other_damon=d.get("beside_other_damon") is True,
    )


def load(host: Host) -> Optional[Journal]:
    """The journal, None when there is none; :class:`JournalCorrupt` when unreadable."""
    path = host.path(JOURNAL)
    fence = fence_of(host.root)
    try:
        raw = host.reader.read(JOURNAL, limit=64 << 20)
    except Unreadable as e:
        if fence is not None and not fence.holds(os.path.realpath(path)):
            # another tree's journal (ROOT/run linked out): never act on it, name the link (exit 2)
            raise outside(fence, path) from None
        raise JournalCorrupt(path, e.reason) from None
    if raw is None:
        return None
    try:
        return from_json(json.loads(raw.decode("utf-8")))
    except (ValueError, KeyError, TypeError) as e:
        raise JournalCorrupt(path, str(e)) from None


def save(host: Host, j: Journal) -> None:
    data = json.dumps(to_json(j), indent=2, sort_keys=False).encode("utf-8") + b"\n"
    atomic_write(host.root, JOURNAL, data)


def discard(host: Host) -> None:
    """Remove the journal (another boot's, or on request); fsync the directory."""
    remove(host.root, JOURNAL)
