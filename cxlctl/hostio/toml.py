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
from typing import Any, Dict, Optional

from .reader import Reader, Unreadable

#: deeper nesting than any real profile or configuration could need
MAX_DEPTH = 64
MAX_BYTES = 1 << 20


class TomlError(ValueError):
    """A TOML file that cannot be used; ``missing`` when it does not exist.

    The message names no file: callers wrap it into their own error type
    (ProfileError, ConfigError), which names the file.
    """

    def __init__(self, reason: str, *, missing: bool = False, line: Optional[int] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing
        self.line = line  # the parser's line for a syntax error, when it said one


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
        import re  # only for a file that does not parse

        # tomllib and tomli end their message with "(at line N, column M)"
        m = re.search(r"\(at line (\d+), column \d+\)", str(e))
        raise TomlError(f"invalid TOML: {e}", line=int(m.group(1)) if m else None) from None


def load(path: str) -> Dict[str, Any]:
    """Read and parse a TOML file (a real path, already under the root)."""
    return loads(load_text(path))


def load_text(path: str) -> str:
    """A TOML file's text (bounded, UTF-8), for a caller that also wants :func:`key_lines` of it."""
    try:
        raw = Reader().read(os.path.abspath(path), limit=MAX_BYTES)
    except Unreadable as e:
        raise TomlError(e.reason if e.errno is None else f"cannot read: {e.reason}") from None
    if raw is None:
        raise TomlError("no such file", missing=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TomlError("not UTF-8 text") from None


def key_lines(text: str) -> Dict[str, int]:
    """Dotted key → the 1-based line defining it (``drift.action`` → 3), tables included (``drift`` → 2).

    Why: the parser returns values without positions, and an error message that says which line
    to fix is the one an operator can act on.  A line scan, not a parser: bare and quoted keys,
    ``[table]`` headers and dotted keys; lines inside a multi-line string or array are skipped.
    The first definition wins (a duplicate is the parser's error, with its own line).
    """
    import re

    header = re.compile(r"^\s*\[\s*([^\[\]#]+?)\s*\]")
    key = re.compile(
        r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
    )
    out: Dict[str, int] = {}
    table = ""
    open_ml = ""  # the delimiter of a multi-line string being skipped
    depth = 0  # open brackets of a multi-line array being skipped
    for n, line in enumerate(text.splitlines(), 1):
        if open_ml:
            if open_ml in line:
                open_ml = ""
            continue
        if depth > 0:
            depth += line.count("[") - line.count("]")
            continue
        m = header.match(line)
        if m:
            table = _dotted(m.group(1))
            out.setdefault(table, n)
            continue
        m = key.match(line)
        if not m:
            continue
        name = _dotted(m.group(1))
        out.setdefault(f"{table}.{name}" if table else name, n)
        rest = line[m.end() :]
        for q in ('"""', "'''"):
            if rest.count(q) == 1:
                open_ml = q
        if not open_ml and rest.lstrip().startswith("["):
            depth = rest.count("[") - rest.count("]")
    return out


def _dotted(spec: str) -> str:
    """``a . "b" . c`` → ``a.b.c`` (quotes dropped; a dot inside quotes is kept as written)."""
    parts, cur, quote = [], "", ""
    for c in spec:
        if quote:
            if c == quote:
                quote = ""
            else:
                cur += c
        elif c in "\"'":
            quote = c
        elif c == ".":
            parts.append(cur.strip())
            cur = ""
        elif not c.isspace():
            cur += c
    parts.append(cur.strip())
    return ".".join(parts)
