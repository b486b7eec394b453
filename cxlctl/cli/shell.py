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
import sys

from cxlctl.errors import EXIT_USAGE, CxlctlError

from .params import argument

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_CXLCTL_COMPLETE"


def enable() -> None:
    """Register typer's bash/zsh/fish completion classes with its click.

    typer only does this when ``add_completion`` is on (which also adds the
    install options this CLI does not want); the classes themselves are the same.
    """
    from typer._completion_classes import completion_init

    completion_init()


def completing() -> bool:
    """True when the shell is asking for completions (set by the completion script)."""
    return bool(os.environ.get(COMPLETE_VAR))


def completion(
    shell: str = argument(..., "SHELL", "bash, zsh or fish."),
) -> None:
    """Print the completion script for SHELL (source it, or save it where the shell looks)."""
    if shell not in SHELLS:
        raise CxlctlError(
            f"no completion for shell {shell!r}", code=EXIT_USAGE, hint=f"use one of: {', '.join(SHELLS)}"
        )
    from typer._completion_shared import get_completion_script

    enable()
    sys.stdout.write(get_completion_script(prog_name="cxlctl", complete_var=COMPLETE_VAR, shell=shell))
