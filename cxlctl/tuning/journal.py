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

Format: JSON with ``"schema": 2`` and a ``"checksum"`` (``sha256:`` of the
document's canonical JSON without that key); file mode 0600.  Written as temp
file + fsync + rename + fsync of the directory, so a reader sees the old or the
new journal, never a torn one.  Why a checksum as well: the rename protects
against cxlctl's own crash, not against a disk, an editor or a stray ``dd``
changing the file later; a flipped byte that still parses (``"60"`` → ``"61"``,
a misspelt ``"origjnal"`` key read as absent) would make ``tune revert`` restore
wrong values, or skip knobs, and report success.  A
journal whose checksum does not match is refused (:class:`JournalCorrupt`,
naming the file and what to do) and never acted on or overwritten, so the boot
values it may still hold are not lost.  Schema 1 journals (no checksum, written
by cxlctl before 0.2) are still read: ``/run`` is cleared at boot, so they only
exist across an upgrade within one boot.

Per-entry values:

``original``  the value before cxlctl touched the knob this boot (what revert restores)
``prior``     the value before *this* apply (what a failed apply rolls back to;
              differs from ``original`` when switching from one profile to another)
``desired``   canonical value verify expects, or None for files saved only
              because a coupled write changes them
``write``     the exact text written, or None
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Dict, Optional, Tuple

from cxlctl.errors import CxlctlError
from cxlctl.hostio import paths
from cxlctl.hostio.atomic import StorageError, atomic_write, remove
from cxlctl.hostio.host import Host
from cxlctl.hostio.reader import Unreadable, fence_of
from cxlctl.hostio.write import outside
from cxlctl.namedrecord import NamedTuple

SCHEMA = 2
#: schemas this cxlctl reads (1: no checksum)
READS = (1, 2)
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
    """The journal is there but cannot be trusted: nothing acts on it, nothing overwrites it."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(
            f"the tuning journal {path} is unreadable ({why}); nothing was changed",
            hint=(
                "cxlctl will not act on or overwrite it: the boot-time values it holds may be wrong. "
                "Compare its `original` values (docs/tuning.md, How to undo) with the knobs, or reboot "
                f"(runtime knobs reset at boot); once the knobs are known to be right, remove {path} by hand"
            ),
        )


def checksum(d: Dict[str, Any]) -> str:
    """``sha256:`` of ``d``'s canonical JSON, its own ``checksum`` key left out."""
    body = {k: v for k, v in d.items() if k != "checksum"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(canon.encode("ascii")).hexdigest()


def verified(d: Any) -> Any:
    """``d`` when its checksum holds (or it is a schema-1 document, which has none); else ValueError.

    A document with a ``checksum`` key is always checked, whatever its ``schema`` says, so one
    damaged byte cannot make a new journal pass for an old one (``"schema": 2`` → ``1``); one
    without it must say schema 1 (a damaged ``"checksum"`` key is caught that way).
    """
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    if "checksum" in d:
        if d["checksum"] != checksum(d):
            raise ValueError("checksum mismatch: the file was changed or damaged after cxlctl wrote it")
    elif d.get("schema") != 1:
        raise ValueError("no checksum: the file was changed or damaged after cxlctl wrote it")
    return d


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
    if d.get("schema") not in READS:
        raise ValueError(f"schema {d.get('schema')!r}, this cxlctl reads schema {' and '.join(map(str, READS))}")
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
    )  # an older journal's "beside_other_damon" is ignored: no kdamond runs beside a DAMON module


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
        return from_json(verified(json.loads(raw.decode("utf-8"))))
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise JournalCorrupt(path, str(e)) from None


def save(host: Host, j: Journal, done: str = "nothing was changed") -> None:
    """Write the journal atomically; :class:`StorageError` (``done`` says what that leaves) when the
    file system refuses — the journal on disk is then the previous one, intact."""
    d = to_json(j._replace(schema=SCHEMA))
    d["checksum"] = checksum(d)
    data = json.dumps(d, indent=2, sort_keys=False).encode("utf-8") + b"\n"
    try:
        atomic_write(host.root, JOURNAL, data)
    except OSError as e:
        raise StorageError(host.path(JOURNAL), e, done) from None


def discard(host: Host) -> None:
    """Remove the journal (another boot's, or on request); fsync the directory."""
    try:
        remove(host.root, JOURNAL)
    except OSError as e:
        raise StorageError(host.path(JOURNAL), e) from None
