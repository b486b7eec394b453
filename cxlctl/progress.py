"""The progress callback the long-running engines accept (no rich, no terminal here).

Onlining or offlining a large region touches thousands of memory blocks (1 TiB
is 8,192 blocks of 128 MiB) and a tuning profile may write many knobs; the
engines report ``(done, total, what)`` after each unit so a front end can draw
a bar (the CLI does, on a terminal: :func:`cxlctl.cli.common.progress_bar`).
``done`` only grows and ends at ``total`` when the work completes; ``what``
names the work (one bar per distinct ``what``).
"""

from __future__ import annotations

from typing import Callable, Optional

ProgressFn = Callable[[int, int, str], None]


def tick(progress: Optional[ProgressFn], done: int, total: int, what: str) -> None:
    """Call ``progress`` if there is one (so engines need no ``if`` at each call)."""
    if progress is not None:
        progress(done, total, what)
