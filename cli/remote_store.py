"""What every `memvault --remote NAME <command>` shares, and nothing more: the vault's
ConnectedStore and which commands run remotely. `memvault --remote NAME search` loads this module,
never cli/remote_commands.py (admission, the run ledger, the MCP server: the remote forms' own).
The connection comes from MEMVAULT_INDEX_DSN, else libpq's own service and password files.

While `memvault --remote NAME serve` runs on this machine (with the same settings), the shared
commands are its thin clients (`resident_store`), as local commands are of a vault's owner;
without one they connect in their own process."""

import gc
import os

import click

#: the commands that run as they are against a vault reached by name (`REMOTE_FORMS` have forms
#: of their own in cli/remote_commands.py; the rest need its files)
SHARED_COMMANDS = ("search", "journal", "remember", "health")
REMOTE_FORMS = ("admit", "inspect", "engine", "mcp", "serve")
#: `auto`: a shared command that finds no resident connection starts one for the next ones
RESIDENT_ENV_VAR = "MEMVAULT_REMOTE_RESIDENT"


def connected_store(ctx: click.Context, *, probe: bool = True, resident: bool = False):
    """The ConnectedStore of `--remote NAME`; `probe`: reach the server now (a clear error naming
    the host when it is unreachable) rather than at the first call. With `resident`, this
    machine's resident connection answers instead when one runs (a ResidentStore)."""
    if resident:
        store = resident_store(ctx)
        if store is not None:
            return store
    from memvault.indexer.engine.connected import ConnectedStore  # psycopg, numpy: a vault on a server only

    if not probe:
        return ConnectedStore(ctx.obj["remote"], os.environ.get("MEMVAULT_INDEX_DSN", ""), env=dict(os.environ))
    return ConnectedStore.connect(ctx.obj["remote"], env=dict(os.environ))


def resident_store(ctx: click.Context):
    """A thin client of the resident connection (`memvault --remote NAME serve`), a ResidentStore,
    or None: none runs (the command connects itself), or one that cannot be used, said on stderr."""
    # the remote commands' own thin client: never loaded by the local ones or `--help`
    from memvault.indexer.engine.resident_client import (
        ResidentStore,
        ResidentUnusable,
        find_resident,
        start_in_background,
    )

    name = ctx.obj["remote"]
    try:
        client = find_resident(name, os.environ)
    except ResidentUnusable as exc:
        say_on_stderr(f"{exc}; connecting in this process")
        return None
    if client is None:
        if on_demand():
            start_in_background(name, os.environ)  # for the next commands; this one connects itself
        return None
    return ResidentStore(name, client, fallback=lambda: connected_store(ctx), warn=say_on_stderr)


def on_demand() -> bool:
    """Whether MEMVAULT_REMOTE_RESIDENT asks a command that finds no resident to start one."""
    value = os.environ.get(RESIDENT_ENV_VAR, "")
    if value not in ("", "off", "auto"):
        say_on_stderr(f"{RESIDENT_ENV_VAR}={value[:40]!r} is not `auto` or `off`: no resident is started")
    return value == "auto"


def say_on_stderr(message: str) -> None:
    click.echo(f"memvault: {message}", err=True)


def refuse_local_only(name: str, ctx: click.Context) -> None:
    raise click.UsageError(
        f"`{name}` needs the vault's folder; with --remote only search, journal, admit, remember, "
        "inspect, health, engine status|stop, mcp and serve work. Run it on the vault's home machine.",
        ctx,
    )


def end_lightly() -> None:
    """Leave the objects this process made to the OS as it ends. A remote search's process ends
    right after its answer, and the interpreter's last collections walk every object numpy,
    psycopg and the tokenizer made (about 55 ms of its 75 ms exit, measured) to free memory the
    exit frees anyway; frozen, they are skipped. Call it once the store is closed: no connection or
    file is left to a collector."""
    gc.freeze()
