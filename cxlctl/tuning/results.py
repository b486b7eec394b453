"""What the tuning engine returns: typed results, built with keywords.

The CLI decides exit codes and :mod:`cxlctl.tuning.tune_json` shapes the JSON;
nothing here renders.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

from cxlctl.model import Inventory
from cxlctl.namedrecord import NamedTuple

from .conflicts import Conflict
from .journal import Journal
from .plan import Plan
from .profile import Profile

#: ``tune verify``'s word for a setting (a tag: mypy rejects a compare with a word it never holds)
CheckStatus = Literal["pass", "drift", "unsupported"]


class FileResult(NamedTuple):
    setting: str
    path: str
    before: Optional[str]  # canonical value found
    after: Optional[str]  # canonical value wanted
    status: str
    error: Optional[str] = None


class Check(NamedTuple):
    setting: str
    path: str
    expected: Optional[str]
    actual: Optional[str]
    status: CheckStatus
    note: str = ""


class Prepared(NamedTuple):
    profile: Profile
    inventory: Inventory
    plan: Plan
    conflicts: Tuple[Conflict, ...]
    active: Optional[Journal]  # the journal in effect this boot (state applied), if any
    messages: Tuple[str, ...]


class ApplyResult(NamedTuple):
    ok: bool
    dry_run: bool
    prepared: Prepared
    results: Tuple[FileResult, ...]
    journal: Optional[Journal]
    error: Optional[str]
    rollback_errors: Tuple[str, ...]
    checks: Tuple[Check, ...]
    persisted: Tuple[str, ...]
    messages: Tuple[str, ...]


class VerifyResult(NamedTuple):
    profile: str
    basis: str  # "journal" | "profile"
    checks: Tuple[Check, ...]
    messages: Tuple[str, ...]

    @property
    def drift(self) -> int:
        return sum(1 for c in self.checks if c.status == "drift")


class RevertResult(NamedTuple):
    ok: bool
    profile: Optional[str]
    state_before: Optional[str]
    results: Tuple[FileResult, ...]
    removed: Tuple[str, ...]
    errors: Tuple[str, ...]
    messages: Tuple[str, ...]


class UndoResult(NamedTuple):
    """A transaction undone to the exact values before it (an unconfirmed `tune try`)."""

    ok: bool
    profile: str  # the profile that was tried
    back_to: Optional[str]  # the profile in effect again (None: none was)
    results: Tuple[FileResult, ...]
    errors: Tuple[str, ...]
    messages: Tuple[str, ...]


class JournalSummary(NamedTuple):
    path: str
    state: str
    this_boot: bool
    profile: str
    profile_source: str
    previous_profile: Optional[str]
    started: str
    finished: Optional[str]
    pid: int
    error: Optional[str]
    entries: Tuple[Tuple[str, int], ...]  # (status, count) in first-seen order


class VerifySummary(NamedTuple):
    passed: int
    drift: Tuple[str, ...]
    unsupported: Tuple[str, ...]


class PersistSummary(NamedTuple):
    sysctl_file: Optional[str]
    profile: Optional[str]
    #: the tmpfiles.d file carrying the sysfs knobs for boot (None: none written)
    tmpfiles_file: Optional[str] = None


class TrialSummary(NamedTuple):
    """A `tune try` waiting for confirmation."""

    profile: str
    deadline: float  # wall-clock seconds
    seconds_left: float
    pid: int  # the waiting process
    waiting: bool  # that process is still alive


class DamonSchemeRow(NamedTuple):
    """One DAMOS scheme of a kdamond, for ``tune status``."""

    kdamond: int
    owner: str  # cxlctl | other
    state: Optional[str]
    pid: Optional[int]
    scheme: int
    action: Optional[str]
    target_nid: Optional[int]
    nr_tried: Optional[int]
    sz_tried: Optional[int]
    nr_applied: Optional[int]
    sz_applied: Optional[int]
    qt_exceeds: Optional[int]
    #: 6.17+ weighted migration destinations as (node, weight); () when none or no ``dests/``
    dests: Tuple[Tuple[Optional[int], Optional[int]], ...] = ()


class StatusResult(NamedTuple):
    active_profile: Optional[str]
    journal: Optional[JournalSummary]
    trial: Optional[TrialSummary]
    verify: Optional[VerifySummary]
    persisted: Optional[PersistSummary]
    lock_held: bool
    lock_holder: Optional[int]
    messages: Tuple[str, ...]
    damon: Tuple[DamonSchemeRow, ...] = ()  # every kdamond's schemes, with who owns it
