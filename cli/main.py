"""Entry point of the `memvault` command: the group plus every command module that registers on it."""

from cli.app import cli
from cli import core_commands  # noqa: F401  (registers init, remember, search, rebuild, validate)
from cli import intake_commands  # noqa: F401  (registers admit, inspect, retry, resolve)
from cli import runtime_commands  # noqa: F401  (registers runtime, doc, space)
from cli import watch_commands  # noqa: F401  (registers watch, health)
from cli import capture_commands  # noqa: F401  (registers adopt-replay, consolidate)
from cli import journal_commands  # noqa: F401  (registers journal)
from cli import mcp_server  # noqa: F401  (registers mcp)
from cli import archive_commands  # noqa: F401  (registers export, import)

__all__ = ["cli"]
