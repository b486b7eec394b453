"""The one TOML loader (tuning profiles, the daemon configuration, launch profiles).

Why one: the three file kinds need the same rules -- bounded size, UTF-8, the
3.9/3.10 ``tomli`` fallback, and a clean error for input that would exhaust
the parser's recursion (``tomllib`` is recursive: a 5,000-deep nested array
raises ``RecursionError``, which used to surface as an internal error).  The
depth is checked before parsing; the ``RecursionError`` catch is a backstop.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

from .reader import Reader, Unreadable

#: deeper nesting than any real profile or configuration could need
MAX_DEPTH = 64
MAX_BYTES = 1 << 20


class TomlError(ValueError):
    """A TOML file that cannot be used; ``missing`` when it does not exist.

    The message names no file: callers wrap it into their own error type
    (ProfileError, ConfigError), which names the file.
    """

    def __init__(self, reason: str, *, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` outside strings and comments (an upper bound on the parser's).

    Table headers (``[a.b]``, ``[[x]]``) count 1-2 and close at once, so they
    never add up.
    """
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "\"'":
            q3 = text.startswith(c * 3, i)
            end = text.find(c * 3 if q3 else c, i + (3 if q3 else 1))
            while end > 0 and c == '"' and _escaped(text, end):
                end = text.find(c * 3 if q3 else c, end + 1)
            if end < 0:
                return deepest  # unterminated string: the parser reports it
            i = end + (3 if q3 else 1)
            continue
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest


def _escaped(text: str, i: int) -> bool:
    k = i - 1
    while k >= 0 and text[k] == "\\":
        k -= 1
    return (i - 1 - k) % 2 == 1


def loads(text: str) -> Dict[str, Any]:
    """Parse TOML text; :class:`TomlError` for invalid or too deeply nested input."""
    if nesting_depth(text) > MAX_DEPTH:
        raise TomlError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        if sys.version_info >= (3, 11):
            import tomllib

            return tomllib.loads(text)
        import tomli  # type: ignore[import-not-found,unused-ignore]  # the 3.9/3.10 dependency

        data: Dict[str, Any] = tomli.loads(text)
        return data
    except RecursionError:
        raise TomlError(f"nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise TomlError(f"invalid TOML: {e}") from None


def load(path: str) -> Dict[str, Any]:
    """Read and parse a TOML file (a real path, already under the root)."""
    try:
        raw = Reader().read(os.path.abspath(path), limit=MAX_BYTES)
    except Unreadable as e:
        raise TomlError(e.reason if e.errno is None else f"cannot read: {e.reason}") from None
    if raw is None:
        raise TomlError("no such file", missing=True)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TomlError("not UTF-8 text") from None
    return loads(text)
