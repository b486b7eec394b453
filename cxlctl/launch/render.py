"""The launcher's human output: the plan of ``launch … --dry-run`` (and the short account a
real launch writes on stderr), and ``policy show``'s report.

Moved out of the CLI so ``cxlctl.cli.launch`` only parses, calls and emits.  Prose is folded
with :mod:`cxlctl.term` at the terminal's width (80 for a pipe); command lines are folded
between their words with `` \\`` continuations, so they still copy and paste as one
command.  ``policy show`` prints through a console that reads no markup: a process name
holding ``[…]`` prints as it is.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, TextIO, Tuple

from cxlctl.term import Cell, fold_command, fold_lines, isatty, join, styled

if TYPE_CHECKING:
    from rich.console import Console

    from .build import LaunchPlan


def _lines(lp: LaunchPlan) -> List[Tuple[str, str]]:
    """(label, text) lines describing a plan, shared by the dry run and the real launch."""
    from cxlctl.parse import format_nodelist, format_size

    out: List[Tuple[str, str]] = []
    for line in lp.nodesets.how:
        out.append(("nodes", line))
    out.append(("policy", lp.policy.describe()))
    if lp.run_as is not None:
        out.append(("user", lp.run_as.describe()))
    out.append(
        ("method", "numactl" if lp.method == "numactl" else "direct (set_mempolicy + sched_setaffinity, then exec)")
    )
    wp = lp.weights
    if wp is not None:
        if wp.writes:
            ch = ", ".join(f"{s.split('.', 1)[-1]} {a} -> {b}" for s, a, b in wp.changes)
            out.append(
                (
                    "weights",
                    f"{wp.source}: {ch} (system-wide; set by the tuning engine, journaled; undo: cxlctl tune revert)",
                )
            )
        else:
            out.append(
                (
                    "weights",
                    f"{' '.join(f'node{n}={x}' for n, x in sorted(wp.weights.items()))} ({wp.source}; no change)",
                )
            )
    if lp.engine.kv_bytes is not None:
        line = f"{format_size(lp.engine.kv_bytes)} over {lp.engine.ranks} rank(s)"
        if lp.tokens is not None:
            line += f", {lp.tokens:,} tokens"
        out.append(("kv", line))
    who_decides, how = lp.engine.placement
    out.append(("placement", f"decided by {who_decides}: {how}"))
    if lp.placement is not None:
        out.append(("offload", _offload(lp.placement)))
    dd = lp.devdax
    if dd is not None:
        who = "LMCache L1" if lp.request.engine == "lmcache" else "Mooncake CXL transport"
        out.append(
            (
                "devdax",
                f"{dd.path} {format_size(dd.size)} of {format_size(dd.device_size)} for the {who}"
                + (f", pool {dd.pool_id} offset {dd.offset}" if dd.pool_id else ""),
            )
        )
    if lp.tmpfs is not None:
        out.append(
            (
                "tmpfs",
                f"/dev/shm = tmpfs {format_size(lp.tmpfs[0])}, mpol={lp.tmpfs[2]}:{format_nodelist(lp.tmpfs[1])} "
                "nosuid,nodev,noexec (private mount namespace)",
            )
        )
    out.append(("argv", " ".join(shlex.quote(a) for a in lp.argv)))
    out.append(
        (
            "env",
            " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(lp.env_added.items()))
            + "".join(f" (removed: {k})" for k in lp.engine.env_unset),
        )
    )
    out.append(("numactl", lp.equivalent))
    return out


# lines that are commands to copy and paste: folded between shell words, with `` \`` continuations
_COMMANDS = ("argv", "env", "numactl")


def _width(f: TextIO) -> int:
    """The terminal's width when ``f`` is one (COLUMNS first, as ls does), else 80: a pipe or a log
    is read at 80 columns; never narrower than 60, where wrapping would only make it worse."""
    from cxlctl.term import width

    return max(width(f), 60)


def _wrapped(first: str, text: str, width: int, indent: str) -> str:
    """``first + text`` folded at ``width`` (:func:`fold_lines`), as lines ending in a newline."""
    return "\n".join(fold_lines(text, width, first, indent) or [first.rstrip()]) + "\n"


def plan_text(lp: LaunchPlan, f: TextIO, dry_run: bool) -> None:
    """Dry run: the whole plan and every check on stdout.  Real launch: a short account on stderr.

    Prose (notes, warnings, checks and their fixes) is folded at the terminal's width, 80 for a
    pipe; the command lines (argv, env, numactl) are folded between their words with `` \\``
    continuations, so the lines copied together are still the one command.  The real
    launch's account on stderr is folded only on a terminal: under systemd it is journal records."""
    w = f.write
    width = _width(f)
    if not dry_run and not isatty(f):
        width = 1 << 20  # the account on stderr, in the journal: one record per line (docs/cli.md)
    if dry_run:
        w(f"cxlctl launch {lp.request.engine} (dry run: nothing changed, nothing launched)\n")
        prev = ""
        for label, text in _lines(lp):
            head = f"{(label + ':') if label != prev else '':9} "
            if label in _COMMANDS:
                w("\n".join(fold_command(text, width, head, " " * 12)) + "\n")
            else:
                w(_wrapped(head, text, width, " " * 12))
            prev = label
        if lp.checks:
            w("checks:\n")
        for c in lp.checks:
            w(_wrapped(f"  {c.status.upper():5} ", f"{c.name}: {c.message}", width, " " * 10))
            if c.fix and c.status in ("fail", "warn"):
                w(_wrapped("        fix: ", c.fix, width, " " * 13))
        for n in lp.notes:
            w(_wrapped("note: ", n, width, "      "))
        for x in lp.warnings:
            w(_wrapped("warning: ", x, width, "         "))
        return
    keep = ("policy", "user", "weights", "kv", "placement", "offload", "devdax", "tmpfs")
    for label, text in _lines(lp):
        if label in keep:
            w(_wrapped(f"cxlctl: {label} ", text, width, "  "))
    for c in lp.checks:
        if c.status in ("fail", "warn"):
            w(_wrapped(f"cxlctl: {c.status}: ", f"{c.name}: {c.message}", width, "  "))
            if c.fix:
                w(_wrapped("  fix: ", c.fix, width, "    "))
    for n in lp.notes:
        w(_wrapped("cxlctl: note: ", n, width, "  "))
    for x in lp.warnings:
        w(_wrapped("cxlctl: warning: ", x, width, "  "))
    if not lp.failed:
        w("cxlctl: exec " + " ".join(shlex.quote(a) for a in lp.argv) + "\n")


def _offload(kp: Any) -> str:
    """The ``offload`` line: the bytes expected per node, what spills or falls back, who decides."""
    from cxlctl.parse import format_size

    from .kvplace import per_node

    per, spill = per_node(kp.expected) or "no NUMA node", per_node(kp.spill)
    over = (
        f" ({per_node(kp.over_share)} beyond the weight share: a full node's share falls back to another node of the set)"
        if kp.over_share
        else ""
    )
    return (
        f"expected {per}"
        + (f" (spill: {spill})" if spill else "")
        + over
        + (f"; {format_size(kp.unplaced)} fits on no node (free memory)" if kp.unplaced else "")
        + (
            f" after the long-term pin (before it: {per_node(kp.before_pin)})"
            if kp.pinned and kp.pin_moved
            else " (long-term pinned: stays in the nodes' kernel zone)"
            if kp.pinned
            else ""
        )
        + f"; decided by {kp.decided_by}"
    )


def proof(rep: Dict[str, Any], c: Console) -> None:
    """``policy show``: the process' policy, its pages per node, and each check against what was asked."""
    from cxlctl.parse import PAGE_SIZE, format_nodelist, format_size
    from cxlctl.term import grid, hang

    pol = rep["policy"]
    c.print(
        join(
            (str(rep["pid"]), "bold"),
            f" {rep['name']}: policy ",
            (str(pol["mode"]), "bold"),
            f" over node(s) {format_nodelist(pol['nodes'])}" if pol["nodes"] else "",
        )
    )
    c.print(f"Mems_allowed {format_nodelist(rep['mems_allowed'])}, Cpus_allowed {format_nodelist(rep['cpus_allowed'])}")
    if len(rep["policies"]) > 1:
        c.print("mappings by policy: " + ", ".join(f"{p['policy']} x{p['mappings']}" for p in rep["policies"]))
    c.print(styled("Pages per node", "bold"))
    pages = rep["pages"]
    nodes = sorted({int(n) for k in ("anon", "file", "total") for n in pages[k]})
    anon_total = sum(pages["anon"].values()) or 1
    rows: List[Tuple[Sequence[Cell], Optional[Cell]]] = []
    for n in nodes:
        a, f, tot = (pages[k].get(str(n), 0) for k in ("anon", "file", "total"))
        rows.append(
            (
                [
                    str(n),
                    f"{a} ({format_size(a * PAGE_SIZE)})",
                    f"{f} ({format_size(f * PAGE_SIZE)})",
                    f"{tot} ({format_size(tot * PAGE_SIZE)})",
                    f"{a / anon_total:.1%}",
                ],
                None,
            )
        )
    cols = [("NODE", "right"), ("ANONYMOUS", "right"), ("FILE", "right"), ("TOTAL", "right"), ("ANON SHARE", "right")]
    grid(c, cols, rows)
    if rep["asked"] is None:
        c.print(styled("not launched by cxlctl (no CXLCTL_POLICY in its environment): nothing to compare with", "dim"))
        return
    a = rep["asked"]
    c.print(f"asked: {a['env']}" + (f" (inherited: from PID {a['from_pid']})" if a["from_pid"] != rep["pid"] else ""))
    style = {"pass": "green", "fail": "bold red", "info": "dim"}
    for ch in rep["checks"]:
        st = style[ch["status"]]
        hang(c, join("  ", (f"{ch['status']:4}", st), " "), f"{ch['check']}: {ch['detail']}", 7)
    c.print(
        styled("matches what was asked", "green") if rep["match"] else styled("differs from what was asked", "bold red")
    )
