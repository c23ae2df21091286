"""The `memvault` click group and what every command shares (vault option, opening the store).

Command modules register themselves on `cli`; `cli.main` imports them all.
"""

import os
from pathlib import Path

import click

from memvault.cli.errors import ErrorTranslatingGroup


@click.group(cls=ErrorTranslatingGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--vault",
    "vault_path",
    type=click.Path(file_okay=False, path_type=Path),
    envvar=None,
    help="The vault folder. Default: $MEMVAULT_MEMORY_PATH, else the nearest enclosing vault.",
)
@click.version_option(package_name="memvault")
@click.pass_context
def cli(ctx: click.Context, vault_path: Path | None) -> None:
    """memvault: a memory vault for AI agents, kept as plain markdown you can read, edit and version."""
    ctx.obj = {"vault_path": vault_path}


def open_store(ctx: click.Context, *, sync: bool = True, engine: bool = False):
    """The vault's store. With `engine`, a live owner is asked first (docs/engine.md): its client
    imports nothing heavy, so the everyday commands answer fast while `serve`/`watch` run."""
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
