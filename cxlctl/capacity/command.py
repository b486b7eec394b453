"""What ``cxlctl capacity`` does after parsing: the report, as a grid or one JSON document."""

from __future__ import annotations

from cxlctl.hostio.host import Host


def show(host: Host, json_out: bool) -> None:
    """``cxlctl capacity [--json]``: the report on stdout."""
    from .report import gather, to_json

    rep = gather(host)
    if json_out:
        from cxlctl.emit import emit_json

        emit_json(to_json(rep))
        return
    from cxlctl.term import console

    from .render import render

    render(rep, console())
