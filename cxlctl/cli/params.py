"""Shared pieces of the typer commands: help that reads like a Unix tool's, the number types.

typer 0.26-0.28 prints a required argument as ``{dest}`` in the usage line and
adds a ``<str>``/``<int>`` type column to the argument list.  Commands built
with :class:`Command` print ``DEST`` instead, and arguments declared with
:func:`argument` carry an upper-case metavar and no type column — what
``cp --help`` or ``ip help`` readers expect.

Every number on the command line goes through :func:`integer` or
:func:`seconds`: ASCII digits only (``int`` and ``float`` accept ``١٢``, Arabic-Indic
digits, and ``float`` accepts ``nan``), a clear message and exit 2 otherwise.

Only typer's public API is used: parameter types are ``parser=`` callables, not
subclasses of the click types typer vendors (``typer._click``, which typer's
maintainers ask users not to import; tests/test_core_cliargs.py checks it).
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Set

import typer
from typer.core import TyperCommand

from cxlctl.helptext import Group as Group
from cxlctl.helptext import Stacked
from cxlctl.parse import is_decimal, parse_seconds


def _no_type_column(*args: Any, **kwargs: Any) -> str:
    return ""  # the metavar says it all


class Command(Stacked, TyperCommand):
    """A command whose usage names arguments ``DEST`` (not ``{dest}``), whose arguments (:func:`argument`) have no
    ``<str>`` type column, and whose ``--help`` is stacked on a narrow screen (:class:`cxlctl.helptext.Stacked`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for p in self.params:
            # the parser's type object is this parameter's own (typer makes one per parameter)
            if p.param_type_name == "argument" and getattr(p.type, "func", None) in _PARSERS:
                p.type.get_metavar = _no_type_column  # type: ignore[method-assign]

    def collect_usage_pieces(self, ctx: Any) -> List[str]:
        out = []
        for piece in super().collect_usage_pieces(ctx):
            if piece.startswith("{") and piece.endswith("}"):
                piece = piece[1:-1]
            out.append(piece)
        return out


def integer(minimum: int = 0, maximum: Optional[int] = None) -> Callable[[str], int]:
    """The one integer type of the CLI (``parser=integer(1)``): ASCII digits, ``minimum`` ≤ n ≤ ``maximum``.

    A bad value is a usage error (exit 2) naming the option, e.g.
    ``cxlctl: error: Invalid value for '--count' / '-c': '٢' is not a whole number …``.
    """
    rng = f"{minimum} or more" if maximum is None else f"{minimum} to {maximum}"

    def whole_number(text: str) -> int:
        t = str(text).strip()
        if not is_decimal(t):
            raise typer.BadParameter(f"{text!r} is not a whole number of {rng} (ASCII digits 0-9)")
        v = int(t)
        if v < minimum or (maximum is not None and v > maximum):
            raise typer.BadParameter(f"{v} is out of range: give {rng}")
        return v

    _PARSERS.add(whole_number)
    return whole_number


def _text(text: str) -> str:
    return text


_PARSERS: Set[Callable[[str], Any]] = {_text}


def argument(default: Any, metavar: str, help: str, *, number: Optional[Callable[[str], int]] = None) -> Any:
    """``typer.Argument`` with an upper-case metavar and no type column in the help (with :class:`Command`).

    ``number``: an :func:`integer` parser for a numeric argument (``policy show PID``)."""
    from cxlctl.completions import completer  # values of the host: profiles, memdevs, regions, DAX devices

    return typer.Argument(
        default, metavar=metavar, help=help, parser=number or _text, autocompletion=completer(metavar)
    )


def seconds(text: str) -> float:
    """``--wait`` parser: a finite number of seconds ≥ 0 (exit 2 with a clear message otherwise)."""
    try:
        return parse_seconds(str(text))  # str(): click also passes the option's default (a float) through here
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
