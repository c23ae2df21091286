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


def open_store(ctx: click.Context, *, sync: bool = True):
    from memvault.indexer.engine.store import MemoryStore

    return MemoryStore.open(ctx.obj["vault_path"], env=dict(os.environ), sync=sync)
