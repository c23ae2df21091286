"""What every `memvault --remote NAME <command>` shares, and nothing more: the vault's
ConnectedStore and which commands run remotely. `memvault --remote NAME search` loads this module,
never cli/remote_commands.py (admission, the run ledger, the MCP server: the remote forms' own).
The connection comes from MEMVAULT_INDEX_DSN, else libpq's own service and password files."""

import gc
import os

import click

#: the commands that run as they are against a vault reached by name (`REMOTE_FORMS` have forms
#: of their own in cli/remote_commands.py; the rest need its files)
SHARED_COMMANDS = ("search", "journal", "remember", "health")
REMOTE_FORMS = ("admit", "inspect", "engine", "mcp")


def connected_store(ctx: click.Context, *, probe: bool = True):
    """The ConnectedStore of `--remote NAME`; `probe`: reach the server now (a clear error naming
    the host when it is unreachable) rather than at the first call."""
    from memvault.indexer.engine.connected import ConnectedStore  # psycopg, numpy: a vault on a server only

    if not probe:
        return ConnectedStore(ctx.obj["remote"], os.environ.get("MEMVAULT_INDEX_DSN", ""), env=dict(os.environ))
    return ConnectedStore.connect(ctx.obj["remote"], env=dict(os.environ))


def refuse_local_only(name: str, ctx: click.Context) -> None:
    raise click.UsageError(
        f"`{name}` needs the vault's folder; with --remote only search, journal, admit, remember, "
        "inspect, health, engine status and mcp work. Run it on the vault's home machine.",
        ctx,
    )


def end_lightly() -> None:
    """Leave the objects this process made to the OS as it ends. A remote search's process ends
    right after its answer, and the interpreter's last collections walk every object numpy,
    psycopg and the tokenizer made (about 55 ms of its 75 ms exit, measured) to free memory the
    exit frees anyway; frozen, they are skipped. Call it once the store is closed: no connection or
    file is left to a collector."""
    gc.freeze()
