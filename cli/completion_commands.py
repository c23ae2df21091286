"""`memvault completion SHELL`: the shell completion script, from click's own completion support."""

import click
from click.shell_completion import get_completion_class

from memvault.cli.app import cli

SHELLS = ("bash", "zsh", "fish")


@cli.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def completion_command(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish).

    \b
    bash:  eval "$(memvault completion bash)"       (in ~/.bashrc)
    zsh:   eval "$(memvault completion zsh)"        (in ~/.zshrc)
    fish:  memvault completion fish > ~/.config/fish/completions/memvault.fish
    """
    completer = get_completion_class(shell)(cli, {}, "memvault", "_MEMVAULT_COMPLETE")
    click.echo(completer.source())
