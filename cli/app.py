"""The `memvault` click group and what every command shares (vault option, opening the store).

Command modules register themselves on `cli`. A call imports only the module of the command it
runs (`COMMAND_MODULES`): `memvault search` never loads the MCP server or the web pages, a
measurable part of every CLI call's start-up. `--help` and completion list them all.
"""

import difflib
import importlib
import os
from pathlib import Path

import click

from memvault.cli.errors import ErrorTranslatingGroup
from memvault.cli.remote_store import REMOTE_FORMS, SHARED_COMMANDS, connected_store, refuse_local_only
from memvault.vault.errors import VaultLocked

#: command name → the modules that register it (and what it runs inside, like serve's web face)
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("init", "remember", "search", "rebuild", "validate"), ("memvault.cli.core_commands",)),
    **dict.fromkeys(("admit", "inspect", "retry", "resolve"), ("memvault.cli.intake_commands",)),
    **dict.fromkeys(("export", "import"), ("memvault.cli.archive_commands",)),
    **dict.fromkeys(("adopt-replay", "consolidate", "capture"), ("memvault.cli.capture_commands",)),
    **dict.fromkeys(("runtime", "doc", "space"), ("memvault.cli.runtime_commands",)),
    **dict.fromkeys(("watch", "health"), ("memvault.cli.watch_commands",)),
    "serve": ("memvault.cli.engine_commands", "memvault.cli.web.face"),
    "engine": ("memvault.cli.engine_commands",),
    "journal": ("memvault.cli.journal_commands",),
    "mcp": ("memvault.cli.mcp_command",),
    "web": ("memvault.cli.web.command",),
    "completion": ("memvault.cli.completion_commands",),
    "git": ("memvault.cli.git_commands",),
}


class SuggestingGroup(ErrorTranslatingGroup):
    """A mistyped command name is answered with the closest real ones (`serach` → `search`)."""

    def resolve_command(self, ctx: click.Context, args: list[str]):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            name = args[0] if args else ""
            if not name or self.get_command(ctx, name) is not None:
                raise
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.6)
            if not close:
                raise
            path = ctx.command_path
            raise click.UsageError(
                f"No such command {name!r}. Did you mean {' or '.join(repr(c) for c in close)}?"
                f" (`{path} --help` lists them all)",
                ctx,
            ) from None


class CommandGroup(SuggestingGroup):
    """Imports a command's module when the command is looked up."""

    group_class = SuggestingGroup  # `memvault runtime ad` gets a suggestion too

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str):
        if ctx.params.get("remote") and name in COMMAND_MODULES:  # a vault reached by name
            if name in REMOTE_FORMS:  # their own forms; the shared commands never load that module
                from memvault.cli.remote_commands import REMOTE_FORM_COMMANDS

                return REMOTE_FORM_COMMANDS[name]
            if name not in SHARED_COMMANDS:
                refuse_local_only(name, ctx)
        for module in COMMAND_MODULES.get(name, ()):
            importlib.import_module(module)
        return self.commands.get(name)


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--vault",
    "vault_path",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=None,
    help="The vault folder. Default: $MEMVAULT_MEMORY_PATH, else the nearest enclosing vault.",
)
@click.option(
    "--remote",
    "remote",
    metavar="NAME",
    default=None,
    help="Use the vault NAME on the index server (MEMVAULT_INDEX_DSN, or a libpq service) from a machine "
    "without its files: search, journal, admit, remember, inspect, health, engine status|stop, mcp, and serve "
    "(a resident connection the others then use; docs/team.md).",
)
@click.version_option(package_name="memvault")
@click.pass_context
def cli(ctx: click.Context, vault_path: Path | None, remote: str | None) -> None:
    """memvault: a memory vault for AI agents, kept as plain markdown you can read, edit and version."""
    if remote is not None and vault_path is not None:
        raise click.UsageError(
            "give --vault PATH (a folder here) or --remote NAME (a vault on the index server), not both"
        )
    ctx.obj = {"vault_path": vault_path, "remote": remote}


def open_store(ctx: click.Context, *, sync: bool = True, engine: bool = False):
    """The vault's store. With `engine`, a live owner is asked first (docs/engine.md): its client
    imports nothing heavy, so the everyday commands answer fast while `serve`/`watch` run.
    With `--remote NAME`, the ConnectedStore of that vault on the index server."""
    if ctx.obj.get("remote"):
        return connected_store(ctx, resident=engine)  # this machine's resident connection, when one runs
    if engine:
        remote = owner_store(ctx)
        if remote is not None:
            return remote
    from memvault.indexer.engine.store import MemoryStore

    return MemoryStore.open(ctx.obj["vault_path"], env=dict(os.environ), sync=sync, engine=False)


def owner_store(ctx: click.Context):
    """A RemoteStore for the vault's live owner, or None when no owner runs (work in-process)."""
    from memvault.indexer.engine.client import find_owner
    from memvault.indexer.engine.locate import locate_vault

    root = locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())
    owner = find_owner(root)
    if owner is None:
        return None
    from memvault.indexer.engine.remote import RemoteStore

    return RemoteStore(root, owner, dict(os.environ))


def require_no_owner(ctx: click.Context, what: str, root: Path | None = None) -> Path:
    """The vault's root, once no owner answers on its socket; else VaultLocked naming it.

    Operator steps that need the agent stopped (retry, resolve, import, adopt-replay) also take
    the liveness fence, but right after `rm -rf .locks` the fence file is briefly gone (the
    owner's guard re-creates it within 5 s) while the owner still runs: the socket still answers."""
    from memvault.indexer.engine.client import find_owner
    from memvault.indexer.engine.locate import locate_vault

    root = locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd()) if root is None else Path(root)
    owner = find_owner(root)
    if owner is not None and not owner.is_this_process:
        raise VaultLocked(
            f"{what} needs the vault's owner stopped: the engine (pid {owner.pid}, {owner.hello.get('role')}) "
            f"answers on {owner.path}. Fix: stop it (`memvault engine stop`, or end its watch/serve/mcp), then retry."
        )
    return root
