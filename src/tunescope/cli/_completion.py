"""Shell completion: `tunescope completion SHELL` prints Typer's script for the shell, and a
shell's completion request (the script runs `tunescope` with ``_TUNESCOPE_COMPLETE`` set) is
answered by Typer's completion classes, the ones its scripts speak to.

Typer's own ``--install-completion``/``--show-completion`` are left off: the one edits the
user's shell start-up files and the other guesses the shell from the parent process."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from tunescope._env import ENV_COMPLETE
from tunescope.errors import ConfigError

__all__ = ["SHELLS", "answering", "completion"]

PROG = "tunescope"
SHELLS = ("bash", "zsh", "fish")


def answering() -> bool:
    """Whether this process answers a shell's completion request (then Typer's completion
    classes are registered, which the request needs)."""
    if not os.environ.get(ENV_COMPLETE):
        return False
    from typer._completion_classes import completion_init

    completion_init()
    return True


def completion(
    shell: Annotated[str, typer.Argument(metavar="SHELL", help="bash, zsh or fish.")],
) -> None:
    """Print the completion script of SHELL (bash, zsh or fish): commands, options, values.

    bash: add `eval "$(tunescope completion bash)"` to ~/.bashrc; zsh: the same with zsh to
    ~/.zshrc (after compinit); fish: tunescope completion fish >
    ~/.config/fish/completions/tunescope.fish"""
    if shell not in SHELLS:
        raise ConfigError(f"unknown shell {shell!r}: use one of {', '.join(SHELLS)}")
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name=PROG, complete_var=ENV_COMPLETE, shell=shell))
