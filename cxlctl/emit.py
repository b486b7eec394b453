"""How a command's output and its failure reach the user, written once for both entry paths.

The typer application (:func:`cxlctl.cli.common.run_app`) and the fast path that
skips typer (:mod:`cxlctl.__main__`) both run their command through :func:`guarded`,
so a failure is mapped to a message and an exit code in one place:

* a :class:`~cxlctl.errors.CxlctlError` -> its one-line message (and hint) on stderr,
  its exit code; with ``--json`` the same error as one JSON object on stdout
  (docs/json-schema.md, "Errors") unless the command had already printed its document;
* any other exception (a bug) -> one "internal error" line, never a traceback
  (``CXLCTL_DEBUG=1`` lets it through);
* Ctrl-C -> exit 130 (128 + SIGINT) and nothing more, as typer reports it (the
  shell shows the ``^C``);
* a stdout that cannot take the output (closed, full, a reader that left) -> exit 1
  with one line (none for a broken pipe), never exit 0 or the interpreter's 120.

This module imports neither typer nor rich: the fast path exists to skip them.  Nor, until a
command fails, :mod:`cxlctl.errors` (a module and four exception classes: ~1 % of
``status --json``, which succeeds).
"""

from __future__ import annotations

import os
import sys

# typing costs ~5 ms of start-up: only mypy needs it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, TextIO

    from cxlctl.errors import CxlctlError, StdoutError

#: exit code after Ctrl-C: 128 + SIGINT, what typer and shells use
EXIT_INTERRUPTED = 130

#: the ``schema_version`` of every JSON document cxlctl prints (docs/json-schema.md)
SCHEMA_VERSION = 1


def emit_json(doc: Dict[str, Any], stream: Optional[TextIO] = None, indent: Optional[int] = 2) -> None:
    """One JSON document (with ``schema_version`` first) on stdout, or ``stream``."""
    import json

    out = sys.stdout if stream is None else stream
    out.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, indent=indent) + "\n")


def _isatty(stream: Any) -> bool:
    from cxlctl.term import isatty  # term imports typing (~5 ms): not on status --json's path

    return isatty(stream)


def fold_for_terminal(text: str, stream: Optional[TextIO] = None) -> str:
    """``text`` folded at the terminal's width when ``stream`` (stderr) is a terminal;
    unchanged otherwise.

    Messages on stderr are one line each in a pipe, a log or the journal, where a line is a
    record that grep and journalctl keep whole; on a person's terminal a 200-column error
    is folded on spaces (paths and flags never broken), continuation lines indented."""
    if not _isatty(stream or sys.stderr):
        return text
    from cxlctl.term import fold, width

    cols = max(width(), 60)
    return "\n".join(fold(line, cols) for line in text.split("\n"))


class GuardedStdout:
    """``sys.stdout`` while a command runs: turns a failed write or flush into :class:`StdoutError`
    and remembers whether anything was written (then a ``--json`` failure adds no second document).

    A closed stdout (``>&-``: Python sets ``sys.stdout`` to None), a full disk
    (``>/dev/full``) or a closed pipe would otherwise surface as a traceback, an
    "internal error", or exit 0/120 once the interpreter's own last flush fails.
    """

    def __init__(self, inner: Optional[TextIO]) -> None:
        self.inner = inner
        self.written = False

    def write(self, text: str) -> int:
        if self.inner is None:
            raise _stdout_error(None)
        if text:
            self.written = True
        try:
            return self.inner.write(text)
        except (OSError, ValueError) as e:
            raise _stdout_error(e) from None

    def flush(self) -> None:
        if self.inner is None:
            return
        try:
            self.inner.flush()
        except (OSError, ValueError) as e:
            raise _stdout_error(e) from None

    def isatty(self) -> bool:
        return self.inner is not None and _isatty(self.inner)

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, ... for rich and click
        if self.inner is None:
            raise AttributeError(name)
        return getattr(self.inner, name)


def _stdout_error(cause: Optional[BaseException]) -> StdoutError:
    from cxlctl.errors import StdoutError

    return StdoutError.of(cause)


def guarded(body: Callable[[], int], json_requested: bool) -> int:
    """Run ``body`` (a command; returns its exit code) with stdout guarded; every failure
    mapped as the module docstring says.  The exit code."""
    out = GuardedStdout(sys.stdout)
    sys.stdout = out
    try:
        code = body()
        out.flush()
        return code
    except KeyboardInterrupt:  # typer turns Ctrl-C into this exit; the fast path must too
        return EXIT_INTERRUPTED
    except Exception as e:
        from cxlctl.errors import CxlctlError, InternalError

        if isinstance(e, CxlctlError):
            err = e
        elif os.environ.get("CXLCTL_DEBUG"):
            raise
        else:  # a bug: one line, never a traceback
            err = InternalError(e)
    finally:
        sys.stdout = out.inner
    return report(err, json_requested and not out.written, out.inner)


def report(err: CxlctlError, json_doc: bool, stdout: Optional[TextIO]) -> int:
    """Say ``err`` on stderr (and, when ``json_doc``, as a JSON error object on ``stdout``); its exit code."""
    from cxlctl.errors import StdoutError, json_error

    if isinstance(err, StdoutError):
        if not err.broken_pipe:  # `cxlctl … | head`: the reader left, nobody to tell
            sys.stderr.write(fold_for_terminal(err.render()) + "\n")
        return err.code
    sys.stderr.write(fold_for_terminal(err.render()) + "\n")
    if json_doc and stdout is not None:
        try:
            stdout.write(json_error(err))
            stdout.flush()
        except (OSError, ValueError):
            pass  # stdout itself fails: the message on stderr says enough
    return err.code


def root_first(argv: List[str]) -> List[str]:
    """``--root PATH`` is global (the app's option), but an operator writes it after the command
    too (``cxlctl status --root TREE``): moved in front, so it means the same wherever it stands.
    Nothing after ``--`` is touched (a launched program's own arguments).
    Every ``--root`` moves, in the order given, so the last one still wins as click has it
    (``--root A status --root B`` is B; moving only the later ones would have made it A)."""
    moved: List[str] = []
    out: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            out += argv[i:]
            break
        if a == "--root" and i + 1 < len(argv):
            moved += argv[i : i + 2]
            i += 2
            continue
        if a.startswith("--root="):
            moved.append(a)
        else:
            out.append(a)
        i += 1
    return moved + out
