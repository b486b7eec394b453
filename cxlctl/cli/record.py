"""``cxlctl record DEST``: copy what cxlctl reads into a tree (a fixture or a bug report)."""

from __future__ import annotations

import typer

from cxlctl.errors import EXIT_USAGE, CxlctlError

from .common import JSON_OPT, emit_json, host
from .params import argument


def record(
    dest: str = argument(..., "DEST", "Directory to create (must be new or empty)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty directory."),
    json_out: bool = JSON_OPT,
) -> None:
    """Copy the part of sysfs/procfs that cxlctl reads into DEST (fixture / bug report)."""
    from cxlctl.record import RecordError, as_json
    from cxlctl.record import record as do_record

    try:
        m = do_record(host(), dest, force=force)
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
