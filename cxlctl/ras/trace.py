"""Parse the text lines of the kernel's ``cxl`` trace events.

Why text: the formatted ``trace``/``trace_pipe`` output is what every tracefs
has, needs no libtraceevent, and is what an operator pastes into a bug report.
Its shape is ``<task>-<pid> [<cpu>] <flags> <seconds>: <event>: <body>``, where
the body is the event's ``TP_printk`` text: ``key=value`` pairs, quoted values
(``flags='...'``), the ``key: 'value'`` form of the AER events and bare ``:``
separators.  Kernels change these bodies between releases (fields are added,
renamed, reordered), so the parser reads pairs by name and never by position,
keeps unknown ones, and turns anything it cannot read into a counted error,
never an exception.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

#: the line header; flags (``.....``, ``d..1.``) are absent when the instance's
#: ``irq-info`` option is off, and the task name may contain spaces and dashes
_HEADER = re.compile(
    r"^\s*(?P<task>.*?)-(?P<pid>[0-9]{1,20})\s+"
    r"(?:\(\s*(?:[0-9]+|-+)\)\s+)?"  # tgid column (record-tgid option)
    r"\[(?P<cpu>[0-9]{1,20})\]\s+"
    r"(?:(?P<flags>[^\s0-9][^\s]*)\s+)?"
    r"(?P<ts>[0-9]+\.[0-9]+):\s+"
    r"(?P<event>[A-Za-z_][A-Za-z0-9_]*):\s?(?P<body>.*)$"
)
_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(=|:\s+(?='))")

#: longest line accepted (the kernel's trace_seq page is 4 KiB; cap above it)
MAX_LINE = 16384


class TraceLine(NamedTuple):
    """One parsed trace line: header and the body's fields, all as text."""

    event: str
    timestamp: float  # seconds since boot (the trace clock, "local" by default)
    cpu: int
    task: str
    pid: int
    fields: Dict[str, str]
    raw: str


class ParseError(NamedTuple):
    line_no: int
    reason: str
    text: str  # the line, cut to 200 characters


def parse_body(body: str) -> Dict[str, str]:
    """``key=value`` pairs of an event body.

    Values are bare (up to whitespace) or single-quoted (may hold spaces).  A
    word that is no pair continues the previous bare value (``comp_id`` hex
    dumps, ``device=mem0 (0000:0d:00.0)``).  A trailing ``:`` on a bare value is
    the kernel's separator (``serial=8194:``), not part of the value.
    """
    out: Dict[str, str] = {}
    last: Optional[str] = None
    last_bare = False
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c.isspace():
            i += 1
            continue
        m = _KEY.match(body, i)
        if m is not None:
            key = m.group(1)
            j = m.end()
            if j < n and body[j] == "'":
                end = body.find("'", j + 1)
                # a quote closes only before whitespace or the end
                while end != -1 and end + 1 < n and not body[end + 1].isspace():
                    end = body.find("'", end + 1)
                if end == -1:
                    raise ValueError(f"unterminated quote in {key}=")
                value, i, last_bare = body[j + 1 : end], end + 1, False
            else:
                k = j
                while k < n and not body[k].isspace():
                    k += 1
                value, i, last_bare = body[j:k], k, True
                if value.endswith(":"):
                    value = value[:-1]
            if key in out:  # a repeated key keeps the first; later ones get a suffix
                key = f"{key}_{sum(1 for x in out if x.split('_')[0] == key)}"
            out[key] = value
            last = key
            continue
        k = i
        while k < n and not body[k].isspace():
            k += 1
        word = body[i:k]
        i = k
        if word == ":":
            last_bare = False
            continue
        if last is not None and last_bare:
            out[last] = f"{out[last]} {word}"
            continue
        raise ValueError(f"stray text {word[:40]!r}")
    return out


def parse_line(line: str) -> TraceLine:
    """One trace line; raises ValueError naming what is wrong."""
    if len(line) > MAX_LINE:
        raise ValueError(f"line longer than {MAX_LINE} characters")
    text = line.rstrip("\n")
    m = _HEADER.match(text)
    if m is None:
        raise ValueError("not a trace event line (no '<task>-<pid> [cpu] <time>: <event>:' header)")
    fields = parse_body(m.group("body"))
    return TraceLine(
        event=m.group("event"),
        timestamp=float(m.group("ts")),
        cpu=int(m.group("cpu")),
        task=m.group("task").strip(),
        pid=int(m.group("pid")),
        fields=fields,
        raw=text,
    )


def is_comment(line: str) -> bool:
    """Header comments of the ``trace`` file, blank lines, and the kernel's
    ``CPU:N [LOST n EVENTS]`` markers are not events and not errors."""
    s = line.strip()
    return not s or s.startswith("#") or (s.startswith("CPU:") and "LOST" in s)


def lost_events(line: str) -> int:
    """Events the ring buffer dropped, from a ``CPU:N [LOST n EVENTS]`` marker (0 otherwise).

    Numbers in trace lines are bounded to 20 digits (a u64): ``int()`` raises past 4300."""
    m = re.search(r"\[LOST ([0-9]{1,20}) EVENTS\]", line)
    return int(m.group(1)) if m else 0


class Stream:
    """Parse a stream of lines, keeping count of errors, ignored events and
    losses; ``errors`` holds the first few for a report."""

    MAX_KEPT = 20

    def __init__(self, prefix: str = "cxl_") -> None:
        self.prefix = prefix
        self.parsed = 0
        self.ignored = 0  # events of other groups (a shared buffer)
        self.error_count = 0
        self.lost = 0
        self.errors: List[ParseError] = []
        self._line_no = 0

    def feed(self, lines: Iterable[str]) -> Iterator[TraceLine]:
        for line in lines:
            self._line_no += 1
            if is_comment(line):
                self.lost += lost_events(line)
                continue
            try:
                t = parse_line(line)
            except ValueError as e:
                self._error(str(e), line)
                continue
            if not t.event.startswith(self.prefix):
                self.ignored += 1
                continue
            self.parsed += 1
            yield t

    def _error(self, reason: str, line: str) -> None:
        self.error_count += 1
        if len(self.errors) < self.MAX_KEPT:
            self.errors.append(ParseError(self._line_no, reason, line.rstrip("\n")[:200]))

    def summary(self) -> Dict[str, object]:
        return {
            "parsed": self.parsed,
            "parse_errors": self.error_count,
            "ignored": self.ignored,
            "lost": self.lost,
            "errors": [e._asdict() for e in self.errors],
        }


def split_lines(data: bytes) -> Tuple[List[str], bytes]:
    """Complete lines of ``data`` (decoded, invalid UTF-8 replaced) and the
    unfinished tail, for readers of ``trace_pipe`` that get partial chunks."""
    *full, tail = data.split(b"\n")
    return [x.decode("utf-8", "replace") for x in full], tail
