"""Man pages generated from the CLI's own help: one page per command group.

Why generated: hand-written pages drift from ``--help`` the first time an
option is added.  The pages are built from the same click command tree that
``--help`` prints (help texts, option strings, metavars, defaults), written to
``cxlctl/man/`` by ``scripts/gen-man.sh`` and shipped as package data; a test
regenerates them and fails when the committed pages are stale.

Pages: ``cxlctl(1)`` (global options, the top-level commands, the groups) and
``cxlctl-GROUP(1)`` for each group (``tune``, ``region``, ``dax``, ...).
Output is plain man(7) roff that ``man -l`` and ``groff -man`` render.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

# no date in the footer, only the version: regeneration is byte-stable
from . import __version__
from .term import unmarked

SECTION = "1"
MANUAL = "cxlctl manual"

_EXIT_STATUS = (
    ("0", "success"),
    ("1", "a runtime failure (the message says what failed and what was left as it was)"),
    ("2", "a usage error: bad arguments or input; nothing was written"),
    ("3", "verification found drift"),
    ("4", "another cxlctl holds the tuning lock"),
)


def roff_escape(text: str) -> str:
    """Escape text for roff: backslashes, hyphens in option-like words, and
    control characters at the start of a line."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![\w])-", r"\\-", text)
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def _paragraphs(text: str) -> List[str]:
    """Help text as paragraphs, with click's ``\\b`` (no rewrap) marker dropped."""
    out: List[str] = []
    for block in re.split(r"\n\s*\n", unmarked(text or "").strip()):
        block = block.replace("\b\n", "").replace("\b", "").strip()
        if block:
            out.append(" ".join(line.strip() for line in block.splitlines()))
    return out


def _ctx(cmd: Any, name: str, parent: Optional[Any]) -> Any:
    import typer  # typer.Context is the click context, through typer's public API

    return typer.Context(cmd, info_name=name, parent=parent)


def _options(cmd: Any, ctx: Any) -> List[Tuple[str, str]]:
    """(term, help) rows for a command's arguments and options, as --help shows them."""
    rows: List[Tuple[str, str]] = []
    for p in cmd.params:
        if getattr(p, "hidden", False):
            continue
        if p.param_type_name == "argument":
            term = p.make_metavar(ctx)
            help_text = getattr(p, "help", None) or ""
        else:
            rec = p.get_help_record(ctx)
            if rec is None:
                continue
            term, help_text = rec
        rows.append((term, help_text))
    return rows


def _th(name: str) -> str:
    return f'.TH "{name.upper()}" "{SECTION}" "" "cxlctl {__version__}" "{MANUAL}"\n'


def _section(title: str) -> str:
    return f".SH {title}\n"


def _command_block(path: str, cmd: Any, ctx: Any, heading: str = ".SS") -> str:
    """A subsection for one command: usage, help paragraphs, options."""
    usage = cmd.get_usage(ctx).replace("Usage: ", "", 1)
    out = [f'{heading} "{roff_escape(path)}"\n', ".nf\n", f".B {roff_escape(usage)}\n", ".fi\n"]
    for para in _paragraphs(cmd.help or ""):
        out.append(".PP\n" + roff_escape(para) + "\n")
    for term, help_text in _options(cmd, ctx):
        out.append(f".TP\n.B {roff_escape(term)}\n{roff_escape(unmarked(help_text)) if help_text else ''}\n")
    return "".join(out)


def _group_page(prog: str, name: str, group: Any, parent_ctx: Any) -> str:
    ctx = _ctx(group, name, parent_ctx)
    full = f"{prog} {name}"
    summary = (_paragraphs(group.help or "") or [""])[0]
    out = [_th(f"{prog}-{name}"), _section("NAME"), f"{prog}\\-{name} \\- {roff_escape(summary)}\n"]
    out += [_section("SYNOPSIS"), f".B {full}\n.I COMMAND\n[\\fIOPTIONS\\fR] [\\fIARGS\\fR]\n"]
    out.append(_section("DESCRIPTION"))
    for para in _paragraphs(group.help or ""):
        out.append(".PP\n" + roff_escape(para) + "\n")
    out.append(".PP\nGlobal options (\\fB\\-\\-root\\fR) go before the group name; see \\fBcxlctl\\fR(1).\n")
    out.append(_section("COMMANDS"))
    for sub_name in group.list_commands(ctx):
        sub = group.get_command(ctx, sub_name)
        if sub is None or getattr(sub, "hidden", False):
            continue
        out.append(_command_block(f"{full} {sub_name}", sub, _ctx(sub, sub_name, ctx)))
    out.append(_exit_status())
    out.append(_section("SEE ALSO") + f".BR {prog} (1)\n")
    return "".join(out)


def _exit_status() -> str:
    rows = "".join(f".TP\n.B {code}\n{roff_escape(text)}\n" for code, text in _EXIT_STATUS)
    return _section("EXIT STATUS") + rows


def _top_page(prog: str, group: Any, groups: Sequence[str]) -> str:
    ctx = _ctx(group, prog, None)
    summary = (_paragraphs(group.help or "") or [""])[0]
    out = [_th(prog), _section("NAME"), f"{prog} \\- {roff_escape(summary)}\n"]
    out += [_section("SYNOPSIS"), f".B {prog}\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n"]
    out.append(_section("DESCRIPTION"))
    out.append(
        ".PP\nCXL Type-3 memory expanders appear as memdevs on the CXL bus, are assembled into "
        "interleaved regions, become DAX devices and, onlined through kmem, CPU-less NUMA nodes in "
        "a lower memory tier. cxlctl reads that chain into one model and acts on it: status, tuning "
        "profiles, regions, a launcher for inference engines and a daemon.\n"
    )
    out.append(_section("GLOBAL OPTIONS"))
    for term, help_text in _options(group, ctx):
        out.append(f".TP\n.B {roff_escape(term)}\n{roff_escape(help_text)}\n")
    out.append(_section("COMMANDS"))
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False) or name in groups:
            continue
        out.append(_command_block(f"{prog} {name}", cmd, _ctx(cmd, name, ctx)))
    out.append(_section("COMMAND GROUPS"))
    for name in groups:
        sub = group.get_command(ctx, name)
        first = (_paragraphs(sub.help or "") or [""])[0] if sub is not None else ""
        out.append(f".TP\n.BR {prog}\\-{name} (1)\n{roff_escape(first)}\n")
    out.append(_section("ENVIRONMENT"))
    out.append(".TP\n.B CXLCTL_ROOT\nThe default for \\fB\\-\\-root\\fR.\n")
    out.append(".TP\n.B CXLCTL_DEBUG\nShow a traceback for internal errors.\n")
    out.append(_exit_status())
    out.append(_section("SEE ALSO") + "".join(f".BR {prog}\\-{g} (1),\n" for g in groups))
    out.append(".BR cxl (1),\n.BR daxctl (1),\n.BR numactl (8)\n")
    return "".join(out)


def pages(prog: str = "cxlctl") -> Dict[str, str]:
    """File name -> roff text for every page, from the live command tree."""
    import typer.main

    from .cli import app

    root: Any = typer.main.get_command(app)
    ctx = _ctx(root, prog, None)
    groups = [n for n in root.list_commands(ctx) if hasattr(root.get_command(ctx, n), "list_commands")]
    out = {f"{prog}.{SECTION}": _top_page(prog, root, groups)}
    for name in groups:
        out[f"{prog}-{name}.{SECTION}"] = _group_page(prog, name, root.get_command(ctx, name), ctx)
    return out


def shipped_dir() -> Path:
    """Where the generated pages live inside the installed package."""
    return Path(__file__).resolve().parent / "man"


def write(dest: Path) -> List[Path]:
    """Write every page into ``dest`` (created) and remove stale ``cxlctl*.1`` pages there."""
    dest.mkdir(parents=True, exist_ok=True)
    want = pages()
    for old in dest.glob(f"cxlctl*.{SECTION}"):
        if old.name not in want:
            old.unlink()
    written = []
    for name, text in want.items():
        p = dest / name
        p.write_text(text, encoding="utf-8")
        written.append(p)
    return written


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m cxlctl.manpage [DEST]``: regenerate the pages (default: the package's man/)."""
    args = list(sys.argv[1:] if argv is None else argv)
    dest = Path(args[0]) if args else shipped_dir()
    for p in write(dest):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
