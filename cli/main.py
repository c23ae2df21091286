"""Entry point of the `memvault` command: the group plus every command module that registers on it."""

from memvault.cli import (
    archive_commands,  # noqa: F401  (registers export, import)
    capture_commands,  # noqa: F401  (registers adopt-replay, consolidate)
    completion_commands,  # noqa: F401  (registers completion)
    core_commands,  # noqa: F401  (registers init, remember, search, rebuild, validate)
    engine_commands,  # noqa: F401  (registers serve, engine status, engine stop)
    intake_commands,  # noqa: F401  (registers admit, inspect, retry, resolve)
    journal_commands,  # noqa: F401  (registers journal)
    mcp_server,  # noqa: F401  (registers mcp)
    runtime_commands,  # noqa: F401  (registers runtime, doc, space)
    watch_commands,  # noqa: F401  (registers watch, health)
)
from memvault.cli.app import cli

__all__ = ["cli"]
