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
