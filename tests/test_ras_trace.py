"""The ``cxl`` trace line parser on malformed input: every bad line is a counted
parse error with a reason, never an exception; good lines around it still
parse.  (The parser on real recorded streams: tests/test_ras_events.py.)"""

from __future__ import annotations

import random

import pytest

from cxlctl.ras.trace import Stream, parse_body, parse_line

#: the shape of the kernel's line header, with a body of the AER form
AER = (
    "  irq/24-aerdrv-51      [001] .....   812.004000: cxl_aer_uncorrectable_error: "
    "memdev=mem0 host=0000:0d:00.0 serial=8193: status: 'Memory Data ECC Error' "
    "first_error: 'Memory Data ECC Error'"
)


def test_body_forms() -> None:
    f = parse_body("memdev=mem0 host=0000:0d:00.0 serial=8193: status: 'A B' first_error: 'A B'")
    assert f == {"memdev": "mem0", "host": "0000:0d:00.0", "serial": "8193", "status": "A B", "first_error": "A B"}
    f = parse_body("log=Warning : time=0 flags='' : dpa=4000 comp_id=00 01 02 validity_flags='CHANNEL|RANK'")
    assert f["flags"] == "" and f["dpa"] == "4000" and f["comp_id"] == "00 01 02"
    assert f["validity_flags"] == "CHANNEL|RANK"
    assert parse_body("device=mem0 (0000:0d:00.0) parent=x")["device"] == "mem0 (0000:0d:00.0)"
    assert parse_body("a='it''s' b=1")["a"] == "it''s"


def test_aer_form_line() -> None:
    t = parse_line(AER)
    assert t.event == "cxl_aer_uncorrectable_error" and t.cpu == 1 and t.timestamp == pytest.approx(812.004)
    assert t.task == "irq/24-aerdrv" and t.pid == 51
    assert t.fields["status"] == "Memory Data ECC Error"


@pytest.mark.parametrize(
    "line, reason",
    [
        ("garbage", "not a trace event line"),
        ("", "not a trace event line"),
        ("  kworker/0:1-9 [000] ..... notatime: cxl_poison: memdev=mem0", "not a trace event line"),
        ("  kworker/0:1-9 [000] ..... 1.0: cxl_poison: memdev=mem0 flags='unterminated", "unterminated quote"),
        ("  kworker/0:1-9 [000] ..... 1.0: cxl_poison: 'stray' memdev=mem0", "stray text"),
        ("  kworker/0:1-9 [000] ..... 1.0: cxl_poison: " + "x=1 " * 5000, "longer than"),
    ],
)
def test_malformed_lines_raise_value_errors(line: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_line(line)


def test_stream_counts_errors_and_keeps_going() -> None:
    lines = [
        "# tracer: nop",
        "#",
        AER,
        "this is not a trace line",
        "CPU:1 [LOST 17 EVENTS]",
        AER.replace("cxl_aer_uncorrectable_error", "sched_switch"),  # another group: ignored
        AER.replace("'Memory Data ECC Error'", "'cut"),
        "\x00\x01\x02",
        AER,
    ]
    s = Stream()
    got = list(s.feed(lines))
    assert len(got) == 2
    assert s.error_count == 3 and s.lost == 17 and s.ignored == 1
    assert [e.line_no for e in s.errors] == [4, 7, 8]
    summary = s.summary()
    assert summary["parse_errors"] == 3 and summary["parsed"] == 2


def test_a_number_of_thousands_of_digits_is_no_crash() -> None:
    """``int()`` raises past 4300 digits: a LOST marker or a pid that long is garbage, counted as such."""
    s = Stream()
    lines = [
        "CPU:0 [LOST " + "9" * 5000 + " EVENTS]",
        "  bash-" + "1" * 5000 + " [000] ..... 1.0: cxl_poison: memdev=mem0",
    ]
    assert list(s.feed(lines)) == []
    assert s.lost == 0 and s.error_count == 1
    assert "not a trace event line" in s.errors[0].reason


def test_random_bytes_never_raise() -> None:
    """Seeded garbage, cut lines and mangled copies of a real-shaped line: the
    stream only ever counts them."""
    rnd = random.Random(1312)
    lines = []
    for _ in range(2000):
        base = list(AER)
        for _ in range(rnd.randint(1, 8)):
            i = rnd.randrange(len(base))
            base[i] = chr(rnd.choice([0, 9, 39, 58, 61, 0x663, 0xFFFD, rnd.randint(32, 126)]))
        lines.append("".join(base)[: rnd.randint(0, len(base))])
    s = Stream()
    n = len(list(s.feed(lines)))
    assert n + s.error_count + s.ignored <= len(lines)
    assert s.error_count > 0


def test_follow_pipe_reads_a_fifo_until_stopped(tmp_path: object) -> None:
    """trace_pipe stand-in: a FIFO written in bursts, partial lines across
    chunks; the reader never blocks longer than its poll and stops on request."""
    import os
    import threading
    from pathlib import Path

    from cxlctl.hostio.tracefs import follow_pipe
    from cxlctl.ras.trace import split_lines

    root = Path(str(tmp_path))
    inst = "/sys/kernel/tracing/instances/cxlctl-follow-1"
    d = root / inst.lstrip("/")
    d.mkdir(parents=True)
    os.mkfifo(d / "trace_pipe")
    stop = [False]
    got: list[str] = []

    def writer() -> None:
        fd = os.open(d / "trace_pipe", os.O_WRONLY)
        half = len(AER) // 2
        os.write(fd, (AER[:half]).encode())
        os.write(fd, (AER[half:] + "\n" + AER + "\n").encode())
        os.close(fd)

    t = threading.Thread(target=writer)
    t.start()
    tail = b""
    for chunk in follow_pipe(str(root), inst, stop, poll_s=0.05):
        lines, tail = split_lines(tail + chunk)
        got += lines
        if len(got) >= 2:
            stop[0] = True
    t.join(timeout=5)
    assert got == [AER, AER] and tail == b""
