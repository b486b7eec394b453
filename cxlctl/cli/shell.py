"""``cxlctl completion SHELL``: the shell's completion script on stdout.

Why a command (kubectl's way) and not typer's ``--install-completion``: that
option edits the user's shell start-up files as a side effect of a CLI flag and
adds two options to every help screen.  Printing the script lets the operator
(or ``scripts/install.sh``) put it where their shell looks:

    cxlctl completion bash > ~/.local/share/bash-completion/completions/cxlctl
    cxlctl completion zsh  > "${fpath[1]}/_cxlctl"
    cxlctl completion fish > ~/.config/fish/completions/cxlctl.fish

The script calls ``cxlctl`` back with ``_CXLCTL_COMPLETE`` set; :func:`enable`
registers the shells so that call is answered.
"""

from __future__ import annotations

import os

import typer

from cxlctl.errors import EXIT_USAGE, CxlctlError

from .params import argument

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CXLCTL_COMPLETE"


def _nothing() -> None:
    """The one command of the throw-away app :func:`enable` builds (never run)."""


def enable() -> None:
    """Register typer's bash/zsh/fish completion classes with its click.

    typer registers them when it builds an app with ``add_completion`` on (which
    also adds the install options this CLI does not want to every help screen);
    building a throw-away such app, never run, does it through typer's public API.
    """
    import typer.main

    stub = typer.Typer(add_completion=True)
    stub.command()(_nothing)
    typer.main.get_command(stub)


def completing() -> bool:
    """True when the shell is asking for completions (set by the completion script)."""
    return bool(os.environ.get(COMPLETE_VAR))


def completion(
    ctx: typer.Context,
    shell: str = argument(..., "SHELL", "bash, zsh or fish."),
) -> None:
    """Print the completion script for SHELL (source it, or save it where the shell looks)."""
    if shell not in SHELLS:
        raise CxlctlError(
            f"no completion for shell {shell!r}", code=EXIT_USAGE, hint=f"use one of: {', '.join(SHELLS)}"
        )
    enable()
    # the script is the answer to click's documented request `_CXLCTL_COMPLETE=source_SHELL cxlctl`
    # (typer's spelling of click's `bash_source`): ask the root command that, as the shell would
    old = os.environ.get(COMPLETE_VAR)
    os.environ[COMPLETE_VAR] = f"source_{shell}"
    try:
        ctx.find_root().command.main(args=[], prog_name="cxlctl", complete_var=COMPLETE_VAR, standalone_mode=False)
    except SystemExit as e:  # click ends a completion request with sys.exit(its status)
        if e.code:
            raise CxlctlError(f"typer could not write the {shell} completion script (status {e.code})") from None
    finally:
        if old is None:
            del os.environ[COMPLETE_VAR]
        else:
            os.environ[COMPLETE_VAR] = old
