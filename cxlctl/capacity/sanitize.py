"""Sanitize a released memdev's media before it is called safe to hand to another host.

``capacity release`` tears the regions down; the device's media still holds the
last tenant's pages.  The kernel's way to wipe it is the memdev's
``security/sanitize`` attribute (``security_sanitize_store()``,
drivers/cxl/core/memdev.c): writing ``1`` starts the device's Sanitize
background command through ``cxl_mem_sanitize()``; it is refused with EBUSY
while any of the memdev's endpoint decoders is committed (a region maps it) and
with EINVAL without an endpoint.  While the command runs, ``security/state``
(``security_state_show()``) reads ``sanitize``; when it is done it reads the
security state again (``disabled``, ``unlocked``, ``locked``, ``frozen``).
cxlctl polls that file, bounded by :data:`SANITIZE_TIMEOUT`.
"""

from __future__ import annotations

import time
from typing import Callable, Literal, NamedTuple, Optional

from cxlctl.hostio import paths
from cxlctl.hostio.host import Host
from cxlctl.hostio.write import KnobError, write_knob

#: seconds a sanitize may take before cxlctl stops waiting (a device may take minutes per GiB)
SANITIZE_TIMEOUT = 1800.0
POLL = 0.5
#: what ``released_line`` says about the media, by outcome
DONE: Literal["sanitized"] = "sanitized"
SKIPPED: Literal["not-sanitized"] = "not-sanitized"
FAILED: Literal["sanitize-failed"] = "sanitize-failed"


Result = Literal["sanitized", "not-sanitized", "sanitize-failed"]


class Sanitized(NamedTuple):
    memdev: str
    result: Result
    security: Optional[str]  # security/state at the end, as the kernel wrote it
    detail: str
    seconds: float = 0.0


def sanitize(
    host: Host,
    memdev: str,
    log: Callable[[str], None],
    timeout: float = SANITIZE_TIMEOUT,
    sleep: Callable[[float], None] = time.sleep,
) -> Sanitized:
    """Start the memdev's sanitize and wait for ``security/state`` to leave ``sanitize``."""
    state_path = paths.memdev_security(memdev, "state")
    r = host.reread()
    st = r.text(state_path)
    if st is None or not r.exists(paths.memdev_security(memdev, "sanitize")):
        return Sanitized(
            memdev, FAILED, st.strip() if st else None,
            "the kernel offers no security/sanitize for it (a kernel before 6.5, or a device without "
            "the Sanitize command)",
        )  # fmt: skip
    t0 = time.monotonic()
    try:
        write_knob(host.root, paths.memdev_security(memdev, "sanitize"), "1")
    except KnobError as e:
        why = (
            "a decoder of it is still committed (EBUSY)"
            if e.errno_name == "EBUSY"
            else f"{e.errno_name or 'error'}: {e.reason}"
        )
        return Sanitized(memdev, FAILED, (host.reread().text(state_path) or "").strip() or None, why)
    log(f"{memdev}: sanitize started")
    try:
        return _wait(host, memdev, t0, timeout, sleep)
    except KeyboardInterrupt:  # Ctrl-C stops the waiting, not the device
        return Sanitized(
            memdev, FAILED, "sanitize",
            f"interrupted while waiting; the device goes on sanitizing (watch {state_path})",
            time.monotonic() - t0,
        )  # fmt: skip


def _wait(host: Host, memdev: str, t0: float, timeout: float, sleep: Callable[[float], None]) -> Sanitized:
    state_path = paths.memdev_security(memdev, "state")
    while True:
        now = (host.reread().text(state_path) or "").strip()
        took = time.monotonic() - t0
        if now != "sanitize":
            return Sanitized(memdev, DONE, now or None, f"done in {took:.1f} s, security/state {now or 'unread'}", took)
        if took >= timeout:
            return Sanitized(
                memdev, FAILED, now, f"still sanitizing after {timeout:g} s (security/state sanitize)", took
            )
        sleep(POLL)
