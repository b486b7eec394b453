"""The one gate of the ``CXLCTL_TEST_*`` test hooks (faults, pauses, a tampered region plan).

Why a gate: the hooks make cxlctl fail, stall or program a wrong region on purpose.  Read
from the environment alone, anyone who can set root's environment (``sudo -E``, an
``env_keep``, a unit's ``Environment=``) could turn them against the live host.  So a hook
is honoured only with ``CXLCTL_TEST_HOOKS=1`` *and* either a ``--root`` tree other than ``/``
(the unit tests') or, on the live host, the root-owned file
:data:`~cxlctl.hostio.paths.TEST_HOOKS_MARK` (a test machine: the VM tier's guests make it;
only root can).  Otherwise the variable is ignored.
"""

from __future__ import annotations

import os
from typing import Optional

from . import paths


def enabled(root: str) -> bool:
    """Are test hooks honoured for a command working on ``root``?"""
    if os.environ.get("CXLCTL_TEST_HOOKS") != "1":
        return False
    if os.path.abspath(root) != "/":
        return True
    from .trust import untrusted

    return os.path.isfile(paths.TEST_HOOKS_MARK) and not untrusted(paths.TEST_HOOKS_MARK)


def hook(name: str, root: str) -> Optional[str]:
    """The value of test hook ``name`` (``CXLCTL_TEST_FAULT``) for ``root``; None when unset or not honoured."""
    value = os.environ.get(name)
    if value is None or not enabled(root):
        return None
    return value
