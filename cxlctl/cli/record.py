"""``cxlctl record DEST``: copy what cxlctl reads into a tree (a fixture or a bug report)."""

from __future__ import annotations

import typer

from cxlctl.errors import EXIT_USAGE, CxlctlError

from .common import JSON_OPT, emit_json, host
from .params import argument


def record(
    dest: str = argument(..., "DEST", "Directory to create (must be new or empty)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty directory (one of your own)."),
    include_process_data: bool = typer.Option(
        False,
        "--include-process-data",
        help="Also keep the largest processes' names, cgroups and numa_maps (file paths), the cgroups' "
        "names and statistics, the whole kernel command line, and the kernel's module and physical "
        "(/proc/iomem) addresses. Off: none of these; for test fixtures, not bug reports.",
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Copy the part of sysfs/procfs that cxlctl reads into DEST (fixture / bug report).

    DEST is made private (0700); by default the record holds no process data, cgroup names,
    kernel addresses or kernel command line beyond the options cxlctl checks (docs/security.md).
    """
    from cxlctl.record import RecordError, as_json
    from cxlctl.record import record as do_record

    try:
        m = do_record(host(), dest, force=force, include_process_data=include_process_data)
    except RecordError as e:
        raise CxlctlError(str(e), code=EXIT_USAGE) from None
    except OSError as e:
        raise CxlctlError(f"cannot write the record to {dest}: {e.strerror}") from None
    if json_out:
        emit_json(as_json(m, dest))
        return
    typer.echo(
        f"recorded {m['files']} files from {m['source_root']} (kernel {m['kernel']}) into {dest}"
        + ("" if m["as_root"] else "; not root: root-only attributes are missing")
    )
