"""Shared pieces of the typer commands: help that reads like a Unix tool's, shared checks.

typer 0.26-0.28 prints a required argument as ``{dest}`` in the usage line and
adds a ``<str>``/``<int>`` type column to the argument list.  Commands built
with :class:`Command` print ``DEST`` instead, and arguments declared with
:func:`argument` carry an upper-case metavar and no type column — what
``cp --help`` or ``ip help`` readers expect.
"""

from __future__ import annotations

from typing import Any, List

import typer
from typer._click import types as _types
from typer.core import TyperCommand

from cxlctl.parse import parse_seconds


class Command(TyperCommand):
    """A command whose usage line names arguments ``DEST``, not ``{dest}``."""

    def collect_usage_pieces(self, ctx: Any) -> List[str]:
        out = []
        for piece in super().collect_usage_pieces(ctx):
            if piece.startswith("{") and piece.endswith("}"):
                piece = piece[1:-1]
            out.append(piece)
        return out


class _Text(_types.StringParamType):
    def get_metavar(self, param: Any, ctx: Any) -> str:
        return ""  # the metavar says it all; no "<str>" column


class _Int(_types.IntParamType):
    def get_metavar(self, param: Any, ctx: Any) -> str:
        return ""


def argument(default: Any, metavar: str, help: str, *, integer: bool = False) -> Any:
    """``typer.Argument`` with an upper-case metavar and no type column in the help."""
    return typer.Argument(default, metavar=metavar, help=help, click_type=_Int() if integer else _Text())


def seconds(text: str) -> float:
    """``--wait`` parser: a finite number of seconds ≥ 0 (exit 2 with a clear message otherwise)."""
    try:
        return parse_seconds(text)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
