"""The terminal: its width, folding text to it, and the one rich console cxlctl prints with.

Why one module: every human view folds prose at the width of the screen (80 for a pipe
or a log), and each used to do it its own way -- some split knob names and paths
mid-word, some trusted ``COLUMNS=0`` (rich then prints nothing at all).  Here:

* :func:`width` -- ``COLUMNS`` when it is a positive ASCII number, else the terminal's
  width, else 80.  Zero, negative or garbage ``COLUMNS`` means 80, never 0.
* :func:`fold_lines` / :func:`fold` / :func:`fold_text` -- fold on spaces only: names,
  paths and flags are never broken (a word longer than the line stays whole);
  :func:`fold_command` -- a shell command folded between its words with `` \\`` continuations,
  so the folded lines still copy and paste as the one command.
* :func:`console` -- a rich console at :func:`width` that reads **no markup**: every
  string cxlctl hands it (a kernel value, a profile's reason, an error message holding
  ``[damon]``) is printed as it is.  Style goes through :func:`styled` (a
  :class:`rich.text.Text`), never through ``[bold]`` inside a string.
* :func:`clean` -- text from the host (a kernel value, a process' name, a trace field) made
  safe to show: what is not printable shown as its escape, so it cannot drive the terminal;
  :func:`markup_escape` -- a value safe inside one of cxlctl's own markup templates.
  Every view, the JSON's messages included, shows host text through these two.
* :func:`grid` -- the ``lsblk``-style table of short values with one long note per row
  (a reason, an error): values whole in their columns; the note in a last column when
  the screen is wide enough, else folded under its row.

rich is imported inside the functions: commands that print JSON never load it.
"""

from __future__ import annotations

import os
import sys

# typing costs ~5 ms of start-up (it imports re): the human status on a pipe loads this module and
# nothing else that needs typing, so only mypy imports it here
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Pattern, Sequence, TextIO, Tuple, Union

    from rich.console import Console
    from rich.text import Text

#: what a pipe, a log or an unknown terminal is read at
DEFAULT_WIDTH = 80
#: narrowest column a note (a reason) gets beside its row before it moves under the row
NOTE_MIN = 40
#: what a note the same as the row above's shows
DITTO = "〃"

if TYPE_CHECKING:
    Cell = Union[str, "Text"]
else:  # only annotations name it (strings at run time): no typing needed to define it
    Cell = object


def clean(text: str) -> str:
    """``text`` with every character that is not printable (ESC, a newline or a tab inside a
    name, U+2028) shown as its Python escape (``\\x1b``, ``\\n``, ``\\u2028``): a crafted
    sysfs value, cgroup or trace field cannot move the cursor or change the colours of the
    terminal reading it, and what it held stays readable.  Markup is not touched: the
    console reads none (:func:`console`)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def unmarked(text: str) -> str:
    """Help text as ``--help`` prints it: typer reads rich markup in help, so a literal ``[`` is
    written ``\\[`` (``\\[capacity]``); the man page and the narrow help print the bracket."""
    return text.replace("\\[", "[")


def markup_escape(value: object) -> str:
    """A value made safe inside one of cxlctl's markup templates (``[/]`` stays text): what
    :func:`rich.markup.escape` returns, without importing rich when there is nothing to escape."""
    text = str(value)
    if "[" not in text and not text.endswith("\\"):
        return text
    from rich.markup import escape

    return escape(text)


def isatty(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal; False for a closed or odd stream (a test's StringIO)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def width(stream: Optional[TextIO] = None, default: int = DEFAULT_WIDTH) -> int:
    """Columns to lay out for: ``COLUMNS`` (positive ASCII digits, as ls reads it), else the
    terminal's width when ``stream`` (stdout) is one, else ``default``."""
    env = os.environ.get("COLUMNS", "")
    if env.isascii() and env.isdigit() and int(env) > 0:
        return int(env)
    out = sys.__stdout__ if stream is None else stream
    try:
        cols = os.get_terminal_size(out.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return default
    return cols if cols > 0 else default


#: a number and the unit after it ("95.04 MiB", "+0 B", "3 %"): one value, never folded apart
_NUMBER_UNIT: Optional[Pattern[str]] = None


def _number_unit() -> Pattern[str]:
    """Compiled on first use (textwrap, which every fold imports, has already imported re)."""
    global _NUMBER_UNIT
    if _NUMBER_UNIT is None:
        import re

        _NUMBER_UNIT = re.compile(r"(?<=\d) (?=(?:B|KiB|MiB|GiB|TiB|PiB|%|ns|MB/s)(?![\w/]))")
    return _NUMBER_UNIT


def fold_lines(text: str, width: int, first: str = "", indent: str = "") -> List[str]:
    """``first + text`` folded at ``width`` on spaces, continuation lines starting with
    ``indent``; paths and flags are never broken, nor a number from its unit ([] for blank text)."""
    import textwrap

    glued = _number_unit().sub("\0", text) if " " in text else text  # NUL: kept by textwrap, one cell wide
    return [
        line.replace("\0", " ")
        for line in textwrap.wrap(
            glued,
            width=width,
            initial_indent=first,
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
    ]


def fold(line: str, width: int, indent: Optional[str] = None) -> str:
    """One line, unchanged when it fits ``width``; else folded (:func:`fold_lines`) with its
    continuation lines indented two more than the line itself (or by ``indent``)."""
    if len(line) <= width:
        return line
    lead = " " * (len(line) - len(line.lstrip(" ")) + 2) if indent is None else indent
    return "\n".join(fold_lines(line, width, indent=lead) or [line])


def shell_words(line: str) -> List[str]:
    """The words of a shell command line, each as written (its quotes kept): a split at every
    blank outside quotes.  ``shlex.split`` would unquote them, and a quoted ``'K=v'`` is no
    longer an assignment."""
    words: List[str] = []
    cur: List[str] = []
    quote = ""
    escaped = False
    for ch in line:
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in " \t":
            if cur:
                words.append("".join(cur))
                cur = []
            continue
        cur.append(ch)
    if cur:
        words.append("".join(cur))
    return words


def fold_command(line: str, width: int, first: str = "", indent: str = "") -> List[str]:
    """A shell command line folded at ``width`` between its words, each line but the last ending
    in `` \\`` (a continuation: the lines copied together are the same command).  A word is
    never broken: one longer than the line stays whole on a line of its own."""
    if len(first) + len(line) <= width:
        return [first + line]
    words = shell_words(line)
    if not words:
        return [first + line]
    lines: List[str] = []
    cur = first + words[0]
    for word in words[1:]:
        if len(cur) + 1 + len(word) + 2 > width:  # the word, its space, and the " \\" it would need
            lines.append(cur + " \\")
            cur = indent + word
        else:
            cur += " " + word
    lines.append(cur)
    return lines


def fold_text(text: Cell, width: int) -> List[Text]:
    """:func:`fold_lines` for styled text: the same breaks, each line keeping its styles."""
    from rich.text import Text

    t = text if isinstance(text, Text) else Text(text)
    plain = t.plain
    out: List[Text] = []
    at = 0
    for line in fold_lines(plain, max(1, width)):
        start = plain.find(line, at)
        if start < 0:  # tabs expanded or whitespace replaced: keep the words, lose the styles
            out.append(Text(line, style=t.style))
            continue
        at = start + len(line)
        out.append(t[start:at])
    return out


def console(stderr: bool = False, highlight: bool = False, file: Optional[TextIO] = None) -> Console:
    """The rich console every human view prints with: :func:`width` columns, no markup read.

    The width is given, not left to rich: rich takes ``COLUMNS=0`` at its word and prints
    nothing at all.  No emoji codes either: rich would print ``0000:ab:00.0`` as ``0000🆎00.0``."""
    from rich.console import Console

    return Console(stderr=stderr, file=file, width=width(), markup=False, emoji=False, highlight=highlight)


def styled(text: object, style: str = "") -> Text:
    """``text`` printed as it is, in ``style`` -- the way to colour cxlctl's text (no markup)."""
    from rich.text import Text

    return Text(str(text), style=style)


def join(*parts: Union[Cell, Tuple[str, str]]) -> Text:
    """Plain and styled pieces, ``(text, style)`` tuples included, as one :class:`Text`."""
    from rich.text import Text

    return Text.assemble(*parts)


def _row_lines(values: List[Text], widths: Sequence[int]) -> List[List[Text]]:
    """A table row as its lines: a value wider than its column ends its line (a first one takes a
    line of its own), the values after it continue on the next line under their own headers
    (blank cells before them), so every column stays aligned."""
    from rich.text import Text

    out: List[List[Text]] = []
    for i in range(len(values) - 1):
        if values[i].cell_len > widths[i]:
            out.append(values[: i + 1])
            values = [Text()] * (i + 1) + values[i + 1 :]
    return out + [values]


def grid(
    c: Console,
    columns: Sequence[Tuple[str, str]],
    rows: Sequence[Tuple[Sequence[Cell], Optional[Cell]]],
    note: str = "",
    note_min: int = NOTE_MIN,
) -> None:
    """Rows of short values (``columns``: header and ``"left"``/``"right"``), each row with an
    optional long ``note``: in a last column headed ``note`` when it gets ``note_min`` columns
    of the screen, else folded under its row (indented 4); a note the same as the one above
    is a ditto mark.  Values are never cut or split: a first value too long for its column
    takes a line of its own, the row's other values under it."""
    from rich.cells import cell_len
    from rich.text import Text

    cells = [[x if isinstance(x, Text) else Text(x) for x in values] for values, _ in rows]
    notes: List[Optional[Text]] = []
    said = None
    for _, n in rows:  # a note repeating the one above is a ditto mark (DAMON's many files share one)
        t = None if n is None or n == "" else n if isinstance(n, Text) else Text(n)
        if t is not None and t.plain == said:
            t = Text(DITTO)
        elif t is not None:
            said = t.plain
        notes.append(t)
    reserve = 2 + cell_len(DITTO) if any(n is not None and n.plain == DITTO for n in notes) else 0
    widths = [cell_len(h) for h, _ in columns]
    room = c.width - reserve
    # a row too wide for the screen on its own (a long path) does not widen the columns for all
    fit = [r for r in cells if sum(x.cell_len for x in r) + 2 * (len(r) - 1) <= room] or cells
    for r in fit:
        widths = [max(w, x.cell_len) for w, x in zip(widths, r)]
    rest = sum(widths[1:]) + 2 * (len(widths) - 1)
    if widths[0] + rest > room:  # a long name takes a line of its own, the values under it
        widths[0] = max(cell_len(columns[0][0]), room - rest)
    fixed = widths[0] + rest
    beside = bool(note) and fixed + 2 + note_min <= c.width and any(notes)

    def line(values: Sequence[Text], last: Optional[Text] = None) -> Text:
        out = Text()
        for i, (x, (_, just), w) in enumerate(zip(values, columns, widths)):
            pad = " " * max(0, w - x.cell_len)
            if i:
                out.append("  ")
            if just == "right":
                out.append(pad)
                out.append_text(x)
            else:
                out.append_text(x)
                out.append(pad)
        if last is not None:
            out.append("  ")
            out.append_text(last)
        out.rstrip()
        return out

    def emit(values: List[Text], last: Optional[Text] = None) -> None:
        parts = _fold_last(_row_lines(values, widths), widths, c.width)
        for part in parts[:-1]:
            c.print(line(part), soft_wrap=True)
        c.print(line(parts[-1], last), soft_wrap=True)

    head = [Text(h, style="bold") for h, _ in columns]
    c.print(line(head, Text(note, style="bold") if beside else None), soft_wrap=True)
    for values, n in zip(cells, notes):
        if not beside or line(values).cell_len > fixed:  # a row wider than the columns: its note goes under it
            if n is not None and fixed + 2 + n.cell_len <= c.width:  # a short note stays on its row
                emit(values, n)
                continue
            emit(values)
            for x in fold_text(n, c.width - 4) if n is not None else []:
                c.print(Text("    ").append_text(x), soft_wrap=True)
            continue
        folded = fold_text(n, c.width - fixed - 2) if n is not None else []
        emit(values, folded[0] if folded else None)
        for x in folded[1:]:
            c.print(Text(" " * (fixed + 2)).append_text(x), soft_wrap=True)


def _fold_last(parts: List[List[Text]], widths: Sequence[int], width: int) -> List[List[Text]]:
    """A row's lines with a last value wider than the screen folded: prose on spaces under its own
    column; a single word (a deep path) on a line of its own there, never split."""
    from rich.text import Text

    start = sum(widths[:-1]) + 2 * (len(widths) - 1)  # where the last column begins
    end = parts[-1][-1]
    if len(widths) < 2 or start + end.cell_len <= width:
        return parts
    pieces = fold_text(end, width - start) if width - start >= 20 else [end]
    if len(pieces) == 1 and any(x.cell_len for x in parts[-1][:-1]):
        pieces = [Text()] + pieces
    blank = [Text()] * (len(widths) - 1)
    return parts[:-1] + [parts[-1][:-1] + [pieces[0]]] + [blank + [x] for x in pieces[1:]]


def hang(c: Console, lead: Cell, body: Cell, indent: int) -> None:
    """``lead`` (``indent`` cells), then ``body`` folded on spaces (:func:`fold_text`: a path or
    a flag is never split) to the rest of the width, continuation lines indented ``indent``.
    Printed line by line, not as a table cell: a table pads every line to the full width with
    trailing spaces."""
    from rich.text import Text

    lead_len = lead.cell_len if isinstance(lead, Text) else len(str(lead))
    lines = fold_text(body, max(c.width - max(indent, lead_len), 20)) or [Text()]
    for i, line in enumerate(lines):
        line.rstrip()
        c.print(Text.assemble(lead if i == 0 else " " * indent, line), soft_wrap=True)
