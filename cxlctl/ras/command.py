"""What ``cxlctl events`` does once its options are parsed: pick the source, print each event, sum up.

The command line (cli/ras.py) only parses; this module checks that the source
options combine (:func:`check_sources`), reads the stored collection, a saved
file or a live ``--follow`` stream (:mod:`.collect`), prints each mapped event
as text or one JSON line, and ends with the summary (parse errors and lost
events on stderr, or a ``summary`` JSON line).  ``--follow`` ends on Ctrl-C,
SIGTERM or ``--duration``, and always removes its trace instance.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from cxlctl.emit import SCHEMA_VERSION
from cxlctl.errors import CxlctlError, UsageError
from cxlctl.hostio.host import Host

from . import collect as C
from .events import Event
from .trace import Stream

#: the most of an ``--input`` file read (a saved trace; the kernel's buffers are far smaller)
INPUT_MAX = 64 << 20


def check_sources(
    follow: bool, since: Optional[str], collect: bool, stop: bool, input_file: Optional[str], duration: Optional[float]
) -> Optional[float]:
    """:class:`UsageError` unless the options name one source; ``--since`` in seconds (None: all)."""
    if sum(bool(x) for x in (follow, stop, input_file is not None)) > 1 or (collect and (stop or input_file)):
        raise UsageError("--follow, --stop, --input and --collect do not combine that way", hint="use one at a time")
    if duration is not None and not follow:
        raise UsageError("--duration needs --follow")
    if since is not None and (follow or stop):
        raise UsageError("--since selects stored events; it does not apply to --follow or --stop")
    if since is None:
        return None
    try:
        return C.parse_since(since)
    except ValueError as e:
        raise UsageError(str(e), hint="--since 15m") from None


def jsonl(doc: Dict[str, Any]) -> None:
    """One compact JSON line (with ``schema_version``) on stdout, flushed: a follower reads it at once."""
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def events(
    host: Host,
    *,
    json_out: bool,
    follow: bool = False,
    since: Optional[str] = None,
    collect: bool = False,
    stop: bool = False,
    input_file: Optional[str] = None,
    duration: Optional[float] = None,
) -> None:
    """``cxlctl events``: the stored (or ``--input``) events in the ``--since`` window, a live
    ``--follow`` stream, or ``--stop``; tracefs' refusals as :class:`CxlctlError` with their fix."""
    from cxlctl.hostio.tracefs import TracefsError

    since_s = check_sources(follow, since, collect, stop, input_file, duration)
    emit, printed = _printer(json_out)
    try:
        if stop:
            gone = C.stop_collection(host)
            if json_out:
                jsonl({"type": "summary", "stopped": gone})
            else:
                _say("stopped collecting CXL events" if gone else "no collection was running")
            return
        if follow:
            stream, where = _follow(host, emit, duration)
        else:
            lines = None if input_file is None else read_input(input_file)
            got = C.stored_events(host, lines=lines, where=input_file or "", collect=collect, since=since_s)
            for ev in got.events:
                emit(ev)
            stream, where = got.stream, got.where
    except TracefsError as e:
        raise CxlctlError(str(e), hint=getattr(e, "hint", "")) from None
    finish(stream, printed[0], json_out, where, followed=follow, since=since_s)


def _printer(json_out: bool) -> Tuple[Callable[[Event], None], List[int]]:
    """What prints one event (a JSON line, or its text lines), and the count it keeps."""
    printed = [0]

    def emit(ev: Event) -> None:
        printed[0] += 1
        if json_out:
            jsonl({"type": "event", **ev.as_json()})
        else:
            from .text import event_lines

            _say("\n".join(event_lines(ev)))

    return emit, printed


def _follow(host: Host, emit: Callable[[Event], None], duration: Optional[float]) -> Tuple[Stream, str]:
    """Follow the live stream until Ctrl-C, SIGTERM or ``duration``; (its stream, where it was read)."""
    import signal

    flag = [False]
    stream = Stream()
    mapper = C.Mapper(host)

    def on_line(line: str) -> None:
        for ev in mapper.map([line], stream):
            emit(ev)

    def ready(src: Any) -> None:
        sys.stderr.write(f"cxlctl: following {len(src.available)} cxl events in {src.where} (Ctrl-C ends)\n")
        sys.stderr.flush()

    def on_term(signum: int, frame: Any) -> None:
        flag[0] = True

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        src: Optional[C.Source] = C.follow(host, on_line, flag, on_ready=ready, duration=duration)
    except KeyboardInterrupt:
        src = None
    finally:
        signal.signal(signal.SIGTERM, old)
    return stream, src.where if src else "follow"


def read_input(name: str) -> List[str]:
    """The lines of ``--input FILE`` (``-`` = stdin), at most :data:`INPUT_MAX` bytes of a file."""
    if name == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(name, "rb") as f:
            data = f.read(INPUT_MAX)
    except OSError as e:
        raise UsageError(f"cannot read --input {name}: {e.strerror}", hint="give a file of saved trace lines") from None
    return data.decode("utf-8", "replace").splitlines()


def nothing_printed(s: Dict[str, Any], where: str, *, followed: bool = False, since: Optional[float] = None) -> str:
    """Why a run printed no event, in the words a person reads once: an empty recording, one holding only
    other trace events or unreadable lines, events all older than ``--since``, or a quiet ``--follow``."""
    if followed:
        return f"no CXL event arrived while following ({where})"
    if s["parsed"]:
        return f"no CXL events in the last {since:g} s: all {s['parsed']} recorded are older (source: {where})"
    if s["ignored"] or s["parse_errors"]:
        return (
            f"no CXL events: the recording holds {s['ignored']} other trace event(s) and "
            f"{s['parse_errors']} unreadable line(s), none from the cxl group (source: {where})"
        )
    return f"no CXL events: the recording is empty (source: {where})"


def finish(
    stream: Stream, printed: int, json_out: bool, where: str, *, followed: bool = False, since: Optional[float] = None
) -> None:
    """The run's end: the summary JSON line, or why nothing printed and the parse and loss notes on stderr."""
    if json_out:
        jsonl(C.summary_json(stream, where, printed))
        return
    s: Dict[str, Any] = stream.summary()
    if not printed:
        _say(nothing_printed(s, where, followed=followed, since=since))
    if s["parse_errors"]:
        first = s["errors"][0]
        sys.stderr.write(
            f"cxlctl: {s['parse_errors']} line(s) could not be parsed "
            f"(first, line {first['line_no']}: {first['reason']})\n"
        )
    if s["lost"]:
        sys.stderr.write(f"cxlctl: the trace buffer dropped {s['lost']} event(s)\n")
