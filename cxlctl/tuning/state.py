"""Which tuning journal is in effect on this boot: the one question the CLI, the
daemon, the launcher and the engine all ask before they plan.

A journal from an earlier boot describes values the kernel has since reset, so it
never counts; an unreadable one counts as none here (the commands that write say
why through :func:`cxlctl.tuning.journal.load`).
"""

from __future__ import annotations

from typing import List, Optional

from cxlctl.errors import CxlctlError
from cxlctl.hostio.host import Host

from . import journal as jn
from .journal import Journal


def this_boot(host: Host, messages: Optional[List[str]] = None) -> Optional[Journal]:
    """The journal if it belongs to this boot (read-only; nothing is discarded here).

    Raises :class:`~cxlctl.tuning.journal.JournalCorrupt` on an unreadable journal;
    appends a note to ``messages`` when the journal is from an earlier boot.
    """
    j = jn.load(host)
    if j is None:
        return None
    if not jn.same_boot(j, host.boot_id):
        if messages is not None:
            messages.append(f"the tuning journal is from an earlier boot ({j.boot_id}); it will be discarded")
        return None
    return j


def applied_journal(host: Host) -> Optional[Journal]:
    """The journal of the profile applied this boot (state ``applied``), else None.

    An unreadable journal counts as none: the caller only wants to know what is in effect.
    """
    try:
        j = this_boot(host)
    except CxlctlError:
        return None
    return j if j is not None and j.state == jn.APPLIED else None
