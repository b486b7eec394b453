"""The host a command acts on: its root, read fence, reader and boot id, resolved once.

Every engine function takes a :class:`Host` instead of a ``root`` string, so a
command resolves ``--root`` once (:meth:`Host.resolve`), keeps one fenced
:class:`~cxlctl.hostio.reader.Reader` for its reads, and reads the boot id at
most once.  The daemon builds one per reconcile (:meth:`Host.fresh`): a reader
keeps directory handles open, and hot-plug replaces directories under them.

Writers (``write_knob``, ``atomic_write``) still take ``host.root``: they prove
each directory inside the root at the moment of writing (``openat`` on a checked
handle), which no cached answer could do for them.
"""

from __future__ import annotations

import os

from cxlctl.hostio import paths
from cxlctl.hostio.reader import Reader
from cxlctl.hostio.root import cxlctl_command, resolve_root, rooted, under

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from cxlctl.errors import CxlctlError


class Host:
    """One target host (``/`` or a ``--root`` tree) for the life of one command.

    ``reader`` is shared by everything the command reads, so a directory proven
    inside the root is proven once.  After the command itself changed the tree
    (created a DAMON context, a region, onlined memory), read through
    :meth:`reread` so no handle kept from before the change is used.
    """

    __slots__ = ("root", "_reader", "_boot_id", "_boot_read")

    def __init__(self, root: str = "/") -> None:
        #: the root directory, absolute (``/`` for the live host)
        self.root: str = os.path.abspath(root)
        self._reader: Optional[Reader] = None
        self._boot_id: Optional[str] = None
        self._boot_read = False

    @classmethod
    def resolve(cls, cli_value: Optional[str] = None) -> Host:
        """``--root`` if given, else ``CXLCTL_ROOT``, else ``/``; :class:`UsageError` when unusable."""
        return cls(resolve_root(cli_value))

    @property
    def live(self) -> bool:
        """True when this is the running machine itself (root ``/``)."""
        return self.root == "/"

    @property
    def reader(self) -> Reader:
        """The command's fenced reader (made on first use)."""
        if self._reader is None:
            self._reader = Reader(self.root)
        return self._reader

    def close(self) -> None:
        """Release the reader's kept directory handles: at the end of the command.  A process that
        runs many commands (the test kit's in-process calls, the fuzzer) kept every command's
        handles through the click context that holds the host: 64 per ``capacity`` scan, past
        select()'s 1,024 within one test run (issue 44's fresh-machine run)."""
        if self._reader is not None:
            self._reader.close()

    def reread(self) -> Reader:
        """The reader, its kept directory handles dropped: for reads after this command wrote."""
        r = self.reader
        r.close()
        return r

    def new_reader(self, *, log: bool = False) -> Reader:
        """A reader of its own: for another thread, or a recording (``log=True``)."""
        return Reader(self.root, log=log)

    def fresh(self) -> Host:
        """A new context for the same root (the daemon: one per reconcile)."""
        return Host(self.root)

    def command(self, args: str) -> str:
        """``cxlctl ARGS`` runnable as printed against this host (``--root`` in it unless live)."""
        return cxlctl_command(self.root, args)

    def hint(self, text: str) -> str:
        """``text`` (a fix, a hint) with ``--root`` in each ``cxlctl COMMAND`` it names, unless live."""
        return rooted(self.root, text)

    def hinted(self, error: CxlctlError) -> CxlctlError:
        """``error`` with its hint runnable against this host (:meth:`hint`).  Both entry paths
        (typer's group, the fast path) raise their errors through it."""
        error.hint = self.hint(error.hint) if error.hint else ""
        return error

    def path(self, host_path: str) -> str:
        """``host_path`` (as the host sees it, ``/sys/...``) as a path on this machine."""
        return under(self.root, host_path)

    @property
    def boot_id(self) -> Optional[str]:
        """The kernel's boot id (read once), None when unreadable (a tree without ``/proc``)."""
        if not self._boot_read:
            self._boot_id = self.reader.text(paths.BOOT_ID) or None
            self._boot_read = True
        return self._boot_id

    def __repr__(self) -> str:
        return f"Host({self.root!r})"
