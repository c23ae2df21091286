"""Entry point of the `memvault` command: the group plus every command module that registers on it."""

from cli.app import cli
from cli import core_commands  # noqa: F401  (registers init, remember, search, rebuild, validate)
from cli import intake_commands  # noqa: F401  (registers admit, inspect, retry, resolve)
from cli import runtime_commands  # noqa: F401  (registers runtime, doc, space)
from cli import watch_commands  # noqa: F401  (registers watch, health)

__all__ = ["cli"]
