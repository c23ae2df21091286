"""Entry point of the `memvault` command: the group, whose commands load on first use (cli/app.py)."""

from memvault.cli.app import COMMAND_MODULES, cli

__all__ = ["COMMAND_MODULES", "cli"]
