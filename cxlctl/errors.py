"""Exit codes and the user-facing error type.

Every command maps failures to these codes (docs/cli.md lists them):
0 success, 1 runtime failure, 2 usage error (bad arguments or input),
3 verification found drift, 4 another cxlctl holds the lock.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_DRIFT = 3
EXIT_LOCKED = 4


class CxlctlError(Exception):
    """An error to show the user as one line (no traceback), with an exit code and a fix."""

    def __init__(self, message: str, *, code: int = EXIT_FAILURE, hint: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.hint = hint

    def render(self) -> str:
        return f"cxlctl: error: {self}" + (f"\n  hint: {self.hint}" if self.hint else "")


class UsageError(CxlctlError):
    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message, code=EXIT_USAGE, hint=hint)


class InternalError(CxlctlError):
    """A bug met while running a command: one line naming the exception, never a traceback
    (``CXLCTL_DEBUG=1`` lets it through instead)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(
            f"internal error: {type(cause).__name__}: {cause}", hint="rerun with CXLCTL_DEBUG=1 for a traceback"
        )

    def render(self) -> str:
        return f"cxlctl: {self}\n  {self.hint}"


class StdoutError(CxlctlError):
    """stdout cannot take the output: closed (``>&-``), full (``>/dev/full``), or the reader left.

    Exit 1 with one line on stderr, never a traceback or a silent exit 0 (the
    interpreter's own last flush would fail with exit 120)."""

    broken_pipe = False

    @classmethod
    def of(cls, cause: BaseException | None) -> StdoutError:
        if cause is None:
            return cls("cannot write the output: stdout is closed", hint="run it with stdout open (a terminal, a file)")
        reason = getattr(cause, "strerror", None) or str(cause)
        e = cls(f"cannot write the output to stdout: {reason}")
        e.broken_pipe = isinstance(cause, BrokenPipeError)
        return e


def json_error(e: CxlctlError) -> str:
    """The JSON document a failing ``--json`` command prints on stdout (docs/json-schema.md, "Errors").

    One shape for every command: ``{"schema_version": 1, "error": {"message", "hint", "exit"}}``;
    the message also goes to stderr as ``cxlctl: error: …``.  json is imported here, on the
    error path only (the ``status --json`` fast path must not pay for it)."""
    import json

    from .status_json import SCHEMA_VERSION

    doc = {"schema_version": SCHEMA_VERSION, "error": {"message": str(e), "hint": e.hint, "exit": e.code}}
    return json.dumps(doc) + "\n"
