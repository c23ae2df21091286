"""`memvault git …`: one vault on several machines through git (docs/backup.md).

`setup` writes the attributes and registers the merge drivers in this clone; `resolve` resolves
a note git left in conflict; `merge-driver` is what git itself runs during a merge, rebase or
cherry-pick (not a command for people, but documented so its behaviour is no secret).
"""

import os
import shlex
import sys
from pathlib import Path

import click

from memvault.cli.app import cli, open_store
from memvault.cli.errors import emit_json, json_option
from memvault.vault.errors import VaultError


def driver_command() -> str:
    """How git starts memvault from this clone: this interpreter, so no PATH is needed."""
    return f"{shlex.quote(sys.executable)} -m memvault"


def _vault_root(ctx: click.Context) -> Path:
    from memvault.indexer.engine.locate import locate_vault

    return locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())


@cli.group("git")
def git_group() -> None:
    """Keep one vault on several machines through git: merge drivers and conflict resolution."""


@git_group.command("setup")
@json_option
@click.pass_context
def git_setup(ctx: click.Context, json_: bool) -> None:
    """Write .gitattributes and register memvault's merge drivers in this clone (idempotent).

    Run it once in every clone: git versions .gitattributes but never clones the config that
    names the drivers."""
    from memvault.vault.git_setup import setup

    report = setup(_vault_root(ctx), driver_command())
    if json_:
        emit_json(report.to_json())
        return
    for line in report.attributes_added:
        click.echo(f"added to .gitattributes: {line}")
    for line in report.attributes_kept:
        click.echo(f"kept your own .gitattributes line: {line} (memvault's driver is not used for it)")
    for key in report.config_set:
        click.echo(f"set in {report.repository}/.git/config: {key}")
    if not report.changed:
        click.echo("Already set up: nothing changed.")
    elif report.attributes_added:
        click.echo("Commit .gitattributes so every clone merges the same way, and run `memvault git setup` in each.")


@git_group.command("resolve")
@click.argument("paths", nargs=-1, metavar="[NOTE]...")
@json_option
@click.pass_context
def git_resolve(ctx: click.Context, paths: tuple[str, ...], json_: bool) -> None:
    """Resolve merge conflicts in notes: keep both sides' memories, once each, in time order.

    NOTE is a vault-relative path (daily/2026-11-30.md); without one, every note that holds
    conflict markers. A hunk where one memory was edited two ways is left for you, and named."""
    from memvault.vault.config import load_config
    from memvault.vault.git_resolve import conflicted_notes, resolve_note
    from memvault.vault.layout import VaultLayout

    layout = VaultLayout(_vault_root(ctx))
    try:
        zone = load_config(layout.root, dict(os.environ)).memory.zone  # bullets ordered by instant
    except (VaultError, ValueError):
        zone = None  # a config it cannot read: by wall time, as written
    chosen = list(paths) or conflicted_notes(layout)
    results = [resolve_note(layout, relpath, zone) for relpath in chosen]
    changed = [result.relpath for result in results if result.changed]
    if changed:  # the index follows at once (a running owner is asked to look now)
        with open_store(ctx, engine=True) as store:
            store.sync(changed)
    if json_:
        emit_json({"notes": [result.to_json() for result in results]})
    else:
        if not results:
            click.echo("No note holds conflict markers.")
        for result in results:
            if result.unresolved:
                click.echo(f"{result.relpath}: left for you: {'; '.join(result.unresolved)}")
            elif result.changed:
                click.echo(f"{result.relpath}: resolved (both sides kept). Next: git add {result.relpath}")
            else:
                click.echo(f"{result.relpath}: no conflict markers")
    if any(result.unresolved for result in results):
        ctx.exit(1)


@git_group.command("merge-driver")
@click.argument("kind", type=click.Choice(["note", "graph", "index", "replay"]))
@click.argument("base", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("ours", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("theirs", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("path", required=False, default="")
def git_merge_driver(kind: str, base: Path, ours: Path, theirs: Path, path: str) -> None:
    """What git runs to merge a note, graph.jsonl, index.md or the replay sidecar (%O %A %B %P).

    Writes the result over OURS.

    Exits 0 when merged, 1 when OURS is left in conflict (git's markers; both sides kept)."""
    from memvault.vault.git_merge import MergeDriverError, merge, note_clock, write_result

    try:
        sides = [_read_side(side) for side in (base, ours, theirs)]
        when = note_clock(path, Path.cwd(), dict(os.environ)) if kind == "note" and path else None
        outcome = merge(kind, *sides, path=path, when=when)
        write_result(ours, outcome.data)
    except (MergeDriverError, OSError) as exc:
        raise click.ClickException(
            f"memvault merge driver ({kind}, {path or ours}): {exc}; git keeps the conflict"
        ) from None
    if outcome.message:
        click.echo(f"memvault: {outcome.message}", err=True)
    sys.exit(0 if outcome.clean else 1)


#: a side bigger than this is not read at all (the format's own limits are far below it)
MAX_SIDE_BYTES = 256 * 1024 * 1024


def _read_side(path: Path) -> bytes:
    from memvault.vault.git_merge import MergeDriverError

    try:
        if path.stat().st_size > MAX_SIDE_BYTES:
            raise MergeDriverError(f"{path} is over {MAX_SIDE_BYTES} bytes; resolve it by hand")
        return path.read_bytes()
    except FileNotFoundError:
        return b""  # git passes an empty base for an add/add
