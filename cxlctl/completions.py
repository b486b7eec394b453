"""Completion of values, not only command names: an argument's metavar names what it takes
(``PROFILE``, ``MEMDEV...``, ``REGION``, ``DEVICE``, ``KIND``), and the shell is offered those of
the host (``--root`` on the command line, else ``CXLCTL_ROOT``, else ``/``) that start with what
was typed.  Nothing here may fail a completion: an unreadable host offers nothing."""

from __future__ import annotations

from typing import Any, Callable, List, Optional


def _host(ctx: Any) -> Any:
    from cxlctl.hostio.host import Host

    root = None
    try:
        root = ctx.find_root().params.get("root")
    except AttributeError:
        pass
    return Host.resolve(root)


def _values(metavar: str, ctx: Any) -> List[str]:
    what = metavar.rstrip(".").upper()
    if what == "KIND":
        from cxlctl.listing import KINDS

        return list(KINDS)
    if what == "PROFILE":
        from cxlctl.tuning.profile import list_names

        return [n for n, _, _ in list_names(_host(ctx))]
    if what not in ("MEMDEV", "REGION", "DEVICE"):
        return []
    from cxlctl.inventory import scan

    inv = scan(_host(ctx))
    if what == "MEMDEV":
        return [m.name for m in inv.memdevs]
    if what == "REGION":
        return [r.name for r in inv.regions]
    return [d.name for d in inv.dax_devices]


def completer(metavar: str) -> Optional[Callable[..., List[str]]]:
    """The completion function for an argument named ``metavar`` (None when it takes free text)."""
    if metavar.rstrip(".").upper() not in ("KIND", "PROFILE", "MEMDEV", "REGION", "DEVICE"):
        return None

    import typer  # only here: typer hands the callback what its annotations name

    def complete(ctx: Any, incomplete: str) -> List[str]:
        try:
            return [v for v in _values(metavar, ctx) if v.startswith(incomplete)]
        except Exception:  # a completion never fails the shell: offer nothing
            return []

    complete.__annotations__ = {"ctx": typer.Context, "incomplete": str, "return": List[str]}
    return complete
