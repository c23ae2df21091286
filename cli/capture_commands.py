"""BuJo maintenance commands: adopt-replay (metadata-only trust on first use) and consolidate."""

import click

from memvault.cli.app import cli, open_store
from memvault.cli.errors import emit_json, json_option


@cli.command("adopt-replay")
@json_option
@click.pass_context
def adopt_replay_command(ctx: click.Context, json_: bool) -> None:
    """Adopt the index's replay state as the vault's replay sidecar; then run `memvault rebuild`.

    For a BuJo vault whose index holds replay state (supersession lifecycle, thread edges) but
    which has no .replay-projection-v1.json. Needs a stopped agent. Every entry is attested
    against the durable intake (records, receipts, ledger) before anything is written; one
    unattested entry refuses the whole adoption. Reads and writes metadata only. Never start
    the agent between this command and the rebuild that must follow it.
    """
    from memvault.indexer.maintenance.replay_adopt import adopt_replay
    from memvault.vault.clock import utc_now

    store = open_store(ctx, sync=False)
    try:
        report = adopt_replay(store.layout, store.config, utc_now())
    finally:
        store.close()
    if json_:
        emit_json(report)
    elif report["adopted"]:
        click.echo(f"adopted {report['entries']} replay entries into .replay-projection-v1.json; now run `memvault rebuild`")
    else:
        click.echo(f"nothing adopted ({report['reason'].replace('_', ' ')})")


@cli.command("consolidate")
@json_option
@click.pass_context
def consolidate_command(ctx: click.Context, json_: bool) -> None:
    """Regenerate index.md: recent days, counts, top entities, duplicate groups.

    Makes no model call and never changes daily/, audit/, graph.jsonl or the replay sidecar;
    only the marked block of index.md is memvault's (text outside it is kept). `memvault watch`
    runs the same consolidation on a schedule.
    """
    with open_store(ctx) as store:
        report = store.consolidate()
    if json_:
        emit_json(report.to_json())
        return
    state = "updated" if report.changed else "unchanged"
    click.echo(f"index.md {state}: {report.curated} curated memories ({report.superseded} superseded), "
               f"{report.entities} entities, {report.duplicate_fact_groups + report.duplicate_entity_groups} duplicate groups")
