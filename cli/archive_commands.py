"""`memvault export` and `memvault import apply|restore`: backups of the vault's canonical files.

Export is read-only and may run beside a live agent. Import needs the vault stopped (no agent,
MCP server or `watch` owning it), verifies the whole archive before touching anything, and ends
by rebuilding the derived index from the imported files. Format and checks: vault/archive.py.
"""

import os
from pathlib import Path

import click

from memvault.cli.app import cli, require_no_owner
from memvault.cli.errors import emit_json, json_option
from memvault.vault.errors import VaultError


@cli.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Replace FILE if it already exists.")
@json_option
@click.pass_context
def export_command(ctx: click.Context, file: Path, force: bool, json_: bool) -> None:
    """Write the vault's canonical files to FILE (a .tar.gz with a SHA-256 manifest); safe while an agent runs."""
    from memvault.vault.archive_export import export_vault

    report = export_vault(_vault_root(ctx), file, overwrite=force)
    if json_:
        emit_json(report.to_json())
        return
    click.echo(f"Exported {report.files} files ({report.bytes} bytes) to {report.archive}.")
    if not report.consistent:
        click.echo("  note: the vault is read-only to this user, so it was copied without taking its locks", err=True)
    for skipped in report.skipped:
        click.echo(f"  skipped {skipped}", err=True)


@cli.group("import")
def import_group() -> None:
    """Bring a `memvault export` archive into a stopped vault: apply (merge) or restore (replace)."""


@import_group.command("apply")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def import_apply_command(ctx: click.Context, file: Path, json_: bool) -> None:
    """Add the archive's files that the vault lacks; any conflicting file refuses the whole import."""
    from memvault.vault.archive_import import apply_archive

    root = require_no_owner(ctx, "memvault import apply")
    report = apply_archive(root, file)
    _finish(root, report, json_)


@import_group.command("restore")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def import_restore_command(ctx: click.Context, file: Path, json_: bool) -> None:
    """Replace the vault's canonical state with the archive's (--vault may name an empty or new folder)."""
    from memvault.vault.archive_import import restore_archive

    root = ctx.obj["vault_path"] or _vault_root(ctx)
    require_no_owner(ctx, "memvault import restore", Path(root))
    report = restore_archive(root, file)
    _finish(Path(root), report, json_)


def _vault_root(ctx: click.Context) -> Path:
    from memvault.indexer.engine.store import locate_vault

    return locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())


def _finish(root: Path, report, json_: bool) -> None:
    """Rebuild the index from the imported files (holding the fence), then report."""
    from memvault.indexer.engine.store import MemoryStore
    from memvault.indexer.journal.cursor import discard_persisted_snapshots
    from memvault.vault.locks import LivenessFence

    discard_persisted_snapshots(root)
    rebuilt, problem = None, None
    try:
        with LivenessFence(root), MemoryStore.open(root, env=dict(os.environ), sync=False) as store:
            rebuilt = store.rebuild()
    except VaultError as exc:
        problem = f"the files were imported, but the index was not rebuilt ({exc}): run `memvault rebuild`"
    if json_:
        emit_json(report.to_json() | {"rebuild": rebuilt.to_json() if rebuilt else None, "problem": problem})
    else:
        _print_report(report)
        if rebuilt is not None:
            click.echo(f"Rebuilt {rebuilt.generation}: {rebuilt.memories} memories from {rebuilt.files} files.")
    if problem:
        if not json_:
            click.echo(problem, err=True)
        raise SystemExit(1)


def _print_report(report) -> None:
    if report.mode == "restore":
        click.echo(f"Restored {report.restored} files.")
    else:
        click.echo(f"Added {len(report.added)} files ({len(report.unchanged)} already identical).")
        for kept in report.kept:
            click.echo(f"  kept the vault's own {kept}", err=True)
    for leftover in report.leftovers:
        click.echo(f"  note: {leftover} holds files from an interrupted earlier restore; delete it when done", err=True)
