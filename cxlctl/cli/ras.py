"""``cxlctl events`` and ``cxlctl health``: CXL RAS events and per-memdev health.

Thin: options, sources, output.  The parser, the mapping and the health model
live in :mod:`cxlctl.ras`; the tracefs instances in :mod:`cxlctl.hostio.tracefs`.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional

import typer

from cxlctl.errors import EXIT_FAILURE, CxlctlError, UsageError

from .common import JSON_OPT, SCHEMA_VERSION, emit_json, host_root
from .params import seconds

if TYPE_CHECKING:
    from cxlctl.ras.trace import Stream


def _tracefs_error(e: Exception) -> CxlctlError:
    hint = getattr(e, "hint", "")
    return CxlctlError(str(e), hint=hint)


def _jsonl(doc: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"schema_version": SCHEMA_VERSION, **doc}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def events(
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing events as they arrive (Ctrl-C ends)."),
    since: Optional[str] = typer.Option(
        None, "--since", metavar="DURATION", help="Only events of the last DURATION (90s, 15m, 2h, 1d)."
    ),
    collect: bool = typer.Option(
        False, "--collect", help="Start collecting into cxlctl's private trace instance (cxlctl-events), then show."
    ),
    stop: bool = typer.Option(False, "--stop", help="Stop collecting: remove the cxlctl-events trace instance."),
    input_file: Optional[str] = typer.Option(
        None, "--input", metavar="FILE", help="Parse saved trace lines from FILE ('-' = stdin) instead of tracefs."
    ),
    duration: Optional[float] = typer.Option(
        None, "--duration", metavar="SECONDS", help="With --follow: stop after SECONDS.", parser=seconds
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON lines: one object per event, then a summary."),
) -> None:
    """CXL RAS trace events (media, DRAM, module health, poison, AER) mapped to region, node and memory block."""
    from cxlctl.hostio.tracefs import TracefsError
    from cxlctl.ras import collect as C
    from cxlctl.ras.trace import Stream

    if sum(bool(x) for x in (follow, stop, input_file is not None)) > 1 or (collect and (stop or input_file)):
        raise UsageError("--follow, --stop, --input and --collect do not combine that way", hint="use one at a time")
    if duration is not None and not follow:
        raise UsageError("--duration needs --follow")
    if since is not None and (follow or stop):
        raise UsageError("--since selects stored events; it does not apply to --follow or --stop")
    since_s: Optional[float] = None
    if since is not None:
        try:
            since_s = C.parse_since(since)
        except ValueError as e:
            raise UsageError(str(e), hint="--since 15m") from None
    from cxlctl.hostio.host import Host

    host = Host(host_root())
    printed = 0

    def emit(ev: Any) -> None:
        nonlocal printed
        printed += 1
        if json_out:
            _jsonl({"type": "event", **ev.as_json()})
        else:
            from cxlctl.ras.text import event_lines

            sys.stdout.write("\n".join(event_lines(ev)) + "\n")
            sys.stdout.flush()

    try:
        if stop:
            gone = C.stop_collection(host)
            msg = "stopped collecting CXL events" if gone else "no collection was running"
            if json_out:
                _jsonl({"type": "summary", "stopped": gone})
            else:
                typer.echo(msg)
            return
        if follow:
            flag = [False]
            stream = Stream()
            mapper = C.Mapper(host)

            def on_line(line: str) -> None:
                for ev in mapper.map([line], stream):
                    emit(ev)

            def ready(src: Any) -> None:
                sys.stderr.write(f"cxlctl: following {len(src.available)} cxl events in {src.where} (Ctrl-C ends)\n")
                sys.stderr.flush()

            import signal

            def on_term(signum: int, frame: Any) -> None:
                flag[0] = True

            old = signal.signal(signal.SIGTERM, on_term)
            try:
                src = C.follow(host, on_line, flag, on_ready=ready, duration=duration)
            except KeyboardInterrupt:
                src = None
            finally:
                signal.signal(signal.SIGTERM, old)
            _finish(stream, printed, json_out, src.where if src else "follow")
            return
        if input_file is not None:
            got = C.stored_events(host, lines=_read_input(input_file), where=input_file, since=since_s)
        else:
            got = C.stored_events(host, collect=collect, since=since_s)
        for ev in got.events:
            emit(ev)
        _finish(got.stream, printed, json_out, got.where)
    except TracefsError as e:
        raise _tracefs_error(e) from None


def _read_input(name: str) -> List[str]:
    if name == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(name, "rb") as f:
            data = f.read(64 << 20)
    except OSError as e:
        raise UsageError(f"cannot read --input {name}: {e.strerror}", hint="give a file of saved trace lines") from None
    return data.decode("utf-8", "replace").splitlines()


def _finish(stream: Stream, printed: int, json_out: bool, where: str) -> None:
    from cxlctl.ras.collect import summary_json

    if json_out:
        _jsonl(summary_json(stream, where, printed))
        return
    s: Dict[str, Any] = stream.summary()
    if not printed:
        typer.echo(f"no CXL events (source: {where})")
    if s["parse_errors"]:
        first = s["errors"][0]
        sys.stderr.write(
            f"cxlctl: {s['parse_errors']} line(s) could not be parsed "
            f"(first, line {first['line_no']}: {first['reason']})\n"
        )
    if s["lost"]:
        sys.stderr.write(f"cxlctl: the trace buffer dropped {s['lost']} event(s)\n")


def health(
    json_out: bool = JSON_OPT,
    poison: bool = typer.Option(
        True,
        "--poison/--no-poison",
        help="Ask each memdev for its poison list (trigger_poison_list; root) and collect the result.",
    ),
) -> None:
    """Per-memdev health, poison list, event counts and fault domain (regions, nodes, blocks, processes)."""
    from cxlctl.hostio.host import Host
    from cxlctl.ras.health import collect_health, render_health

    doc = collect_health(Host(host_root()), poison=poison)
    if json_out:
        emit_json(doc)
    else:
        sys.stdout.write(render_health(doc))
    if doc.get("errors"):  # a critical device or poison: exit 1, for scripts and checks
        raise typer.Exit(EXIT_FAILURE)
