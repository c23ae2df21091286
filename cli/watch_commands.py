"""`memvault watch` and `memvault health`: keeping the index in step with the files, and proving it.

`watch` runs the owner as `serve` does (`foreground_owner.run_owner`, which also reads the crash
tests' `MEMVAULT_TEST_CRASH_AT`).
"""

import json
import sys

import click

from memvault.cli.app import cli, open_store
from memvault.cli.errors import emit_json, json_option
from memvault.cli.foreground_owner import run_owner


@cli.command("watch")
@click.option(
    "--debounce",
    type=click.FloatRange(0.0, 10.0),
    default=0.2,
    show_default=True,
    help="Seconds of quiet after the last file event before a batch is indexed.",
)
@click.option(
    "--compact-after",
    type=click.FloatRange(min=1.0),
    default=60.0,
    show_default=True,
    help="Seconds of quiet after which edited indexes are compacted (BM25 statistics match a rebuild).",
)
@click.option(
    "--consolidate-every",
    type=click.FloatRange(min=0.0),
    default=3600.0,
    show_default=True,
    help="Seconds between regenerations of index.md (memvault consolidate); 0 disables.",
)
@json_option
@click.pass_context
def watch_command(
    ctx: click.Context, debounce: float, compact_after: float, consolidate_every: float, json_: bool
) -> None:
    """Follow edits to the vault and keep the index current until interrupted (Ctrl-C / SIGTERM).

    Logs one line per batch that changed the index to stderr (with --json: one JSON object per
    batch to stdout). Runs the vault's owner (as `memvault serve` does): admitted turns are
    projected, vectors kept complete, and other memvault commands are answered by this process.
    """

    def report(batch) -> None:
        if json_:
            click.echo(json.dumps(batch.to_json(), default=str), nl=True)
            sys.stdout.flush()
        elif batch.changed or batch.error:
            click.echo(batch.line(), err=True)

    def ready(root) -> None:
        click.echo(f"watching {root} (Ctrl-C to stop)", err=True)

    run_owner(
        ctx,
        "watch",
        report=report,
        ready=ready,
        debounce=debounce,
        compact_after=compact_after,
        consolidate_every=consolidate_every or None,
    )
    click.echo("stopped; the index is consistent", err=True)


@cli.command("health")
@click.option("--strict", is_flag=True, help="Re-read every note and compare every row; warnings fail too.")
@json_option
@click.pass_context
def health_command(ctx: click.Context, strict: bool, json_: bool) -> None:
    """Compare the index with the notes (and vectors with the config, and the intake); exit 1 when unhealthy."""
    with open_store(ctx, sync=False, engine=True) as store:  # health looks; it must not repair first
        report = store.health_report(strict=strict)
    if json_:
        emit_json(report)
    else:
        _print_health(report)
    if not report["healthy"]:
        ctx.exit(1)


def _named(finding: dict) -> str:
    """The finding's message, led by the file it concerns when the message does not say it
    (a subject with a '/' is a vault path; others name a component, a row key or a setting)."""
    subject, message = finding.get("subject") or "", finding["message"]
    return f"{subject}: {message}" if "/" in subject and subject not in message else message


def _print_health(report: dict) -> None:
    for finding in report["findings"]:
        click.echo(f"{finding['severity']:<7} {finding['check']}: {_named(finding)}")
    counts = f"{report['errors']} error(s), {report['warnings']} warning(s)"
    mode = "strict " if report["strict"] else ""
    if report["healthy"]:
        click.echo(f"healthy ({mode}{', '.join(report['checks'])}; {counts})")
        return
    click.echo(f"unhealthy ({mode}check: {counts}). Fix:")
    for fix in report["fixes"]:
        click.echo(f"  {fix}")
