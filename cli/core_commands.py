"""Core commands: init, remember, search, rebuild, validate.

Heavy modules (tantivy, hnswlib, wordllama) are imported inside the commands that need them, so
`memvault --help` starts instantly.
"""

import os
from pathlib import Path

import click

from memvault.cli.app import cli, open_store
from memvault.cli.errors import emit_json, json_option
from memvault.cli.fact_args import FactCommand, parse_at
from memvault.cli.foreground_owner import crash_hook_from_env
from memvault.cli.git_commands import driver_command
from memvault.cli.remote_store import end_lightly


@cli.command("init")
@click.argument("path", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--mode",
    type=click.Choice(["lite", "journal", "bujo"]),
    default="journal",
    show_default=True,
    help="Memory tier: lite (BM25 only, never embeds), journal (hybrid recall with the builtin "
    "offline embeddings), bujo (journal plus LLM capture; edit the llm block it writes).",
)
@click.option(
    "--time-zone",
    "time_zone",
    default=None,
    help="IANA zone for bullet times (default: this machine's zone, else UTC).",
)
@click.option(
    "--index",
    "index",
    type=click.Choice(["local", "postgres"]),
    default="local",
    show_default=True,
    help="Where the derived index lives: .index/ (Tantivy + hnswlib), or a PostgreSQL 16+ server with "
    "pgvector, reached through MEMVAULT_INDEX_DSN or libpq's service and password files.",
)
@click.option(
    "--index-name",
    "index_name",
    default=None,
    metavar="NAME",
    help="The vault's name on the index server (default: the folder's name).",
)
@json_option
@click.pass_context
def init_command(
    ctx: click.Context,
    path: Path | None,
    mode: str,
    time_zone: str | None,
    index: str,
    index_name: str | None,
    json_: bool,
) -> None:
    """Create a vault in PATH (default: the current folder)."""
    from memvault.vault.config import default_config_data, index_block, render_config
    from memvault.vault.init import host_time_zone, init_vault

    root = path or ctx.obj["vault_path"] or Path.cwd()
    block = index_block(index, index_name or root.resolve().name.lower())
    if block is None and index_name is not None:
        raise click.UsageError("--index-name applies to --index postgres")
    data = default_config_data(mode=mode, time_zone=time_zone or host_time_zone(dict(os.environ)), index=block)
    created = init_vault(root, render_config(data), git_driver=driver_command())
    from memvault.indexer.engine.store import MemoryStore

    with MemoryStore.open(root, env=dict(os.environ), sync=True) as store:
        unindexed = store.unsynced  # the files are made; an index server that is away is named
    if json_:
        emit_json({"vault": str(root.resolve()), "created": created, "mode": mode, "indexed": unindexed is None})
    else:
        click.echo(f"Created a {mode} vault in {root.resolve()} ({', '.join(created)}).")
    if unindexed:
        click.echo(
            f"warning: {unindexed}; the vault is made: run `memvault rebuild` once the index is reachable", err=True
        )


@cli.command("remember", cls=FactCommand)
@click.argument("text", required=False)
@click.option(
    "--at",
    "at_",
    default=None,
    metavar="WHEN",
    help="When it happened: ISO-8601 with an offset (2026-11-30T14:03:00+01:00), or a date (2026-11-30) "
    "for the start of that day in the vault's zone. Default: now.",
)
@click.option(
    "--from",
    "from_",
    type=click.File("rb"),
    default=None,
    metavar="FILE",
    help='Bulk import: JSON lines {"text": ..., "at": ISO-8601 (optional)} from FILE (- for stdin); '
    "idempotent per line.",
)
@json_option
@click.pass_context
def remember_command(ctx: click.Context, text: str | None, at_: str | None, from_, json_: bool) -> None:
    """Store one fact in today's daily note and index it at once (idempotent).

    With --from, store every line of a JSON-lines file in batches (one write per daily note and
    one index commit per batch); a bad line is reported with its number and nothing is written
    for it. A progress bar shows on a terminal.

    TEXT may start with '-' (a task `- [ ] Ask Alice`, a rule `---`): only `-x` / `--word` are options.
    """
    if (text is None) == (from_ is None):
        raise click.UsageError("give either TEXT or --from FILE")
    if from_ is not None:
        if at_:
            raise click.UsageError('--at applies to TEXT; in --from lines give each its own "at"')
        _remember_lines(ctx, from_, json_)
        return
    with open_store(ctx, engine=True) as store:
        when = parse_at(at_, store.time_zone) if at_ else None
        receipt = store.remember(text, at=when)
    if json_:
        emit_json(receipt.to_json())
    else:
        click.echo(f"{receipt.status}: {receipt.source}")


def _remember_lines(ctx: click.Context, stream, json_: bool) -> None:
    from memvault.cli.bulk_lines import parse_lines, summarize
    from memvault.cli.progress import phase_progress, progress_enabled

    items, refused = parse_lines(stream)
    with phase_progress(progress_enabled(json_)) as log, open_store(ctx, engine=True) as store:
        progress = None if log is None else _import_progress(log, len(items))  # on a terminal only
        outcomes = store.remember_many([item for _, item in items], progress=progress, total=len(items))
        if log is not None:
            log.done()
    body = summarize(items, outcomes, refused)
    if json_:
        emit_json(body)
    else:
        counts = body["counts"]
        click.echo(
            f"{counts['added']} added, {counts['duplicate']} duplicate, {counts['completed']} completed, "
            f"{counts['refused']} refused (of {body['lines']} lines)"
        )
        for row in body["refused"]:
            click.echo(f"  line {row['line']}: {row['message']}", err=True)
    if body["refused"]:
        ctx.exit(1)


@cli.command("search")
@click.argument("query")
@click.option("--limit", default=10, show_default=True, type=click.IntRange(1, 100), help="Most hits to return.")
@click.option(
    "--mode",
    type=click.Choice(["tool", "auto"]),
    default="tool",
    show_default=True,
    help="tool: up to --limit hits; auto: what a host injects (gated, at most 5).",
)
@click.option("--explain", is_flag=True, help="Show each retriever's rank and score.")
@click.option(
    "--across",
    "across",
    default=None,
    metavar="NAME[,NAME…]",
    help="Search these vaults on the index server (MEMVAULT_INDEX_DSN) as one fused list, each hit "
    "naming its vault; only vaults your role may read. Needs no vault folder.",
)
@json_option
@click.pass_context
def search_command(
    ctx: click.Context, query: str, limit: int, mode: str, explain: bool, across: str | None, json_: bool
) -> None:
    """Search curated memories."""
    if across is not None:
        _search_across(across, query, limit, mode, explain, json_)
        return
    with open_store(ctx, engine=True) as store:
        result = store.recall(query, limit=limit, mode=mode)
    if ctx.obj.get("remote"):
        end_lightly()
    if json_:
        emit_json(result.to_json(explain=explain))
        return
    from memvault.cli.render import print_recall

    print_recall(result, explain=explain)


def _search_across(across: str, query: str, limit: int, mode: str, explain: bool, json_: bool) -> None:
    from memvault.indexer.engine.across import parse_vault_names, search_across
    from memvault.vault.config import server_bounds
    from memvault.vault.config_schema import INDEX_DSN_ENV

    if mode != "tool":
        raise click.UsageError("--across searches in tool mode only")
    names, bounds = parse_vault_names(across), server_bounds(os.environ)
    result = search_across(names, query, dsn=os.environ.get(INDEX_DSN_ENV, ""), limit=limit, like=bounds)
    if json_:
        emit_json(result.to_json(explain=explain))
        return
    if result.degraded:
        click.echo(f"degraded: {result.degraded}", err=True)
    if not result.hits:
        click.echo("No matches.")
    for found in result.hits:
        hit = found.hit
        click.echo(f"{found.vault}: {hit.source}  {hit.text}")
        if explain:
            click.echo(f"    {hit.explain}")


@cli.command("rebuild")
@json_option
@click.pass_context
def rebuild_command(ctx: click.Context, json_: bool) -> None:
    """Recreate every derived index from the files alone."""
    from memvault.cli.progress import phase_progress, progress_enabled

    with phase_progress(progress_enabled(json_), opening="Opening the vault…") as progress:
        with open_store(ctx, sync=False, engine=True) as store:  # a running owner rebuilds itself
            report = store.rebuild(progress=progress, hook=crash_hook_from_env())
    if json_:
        emit_json(report.to_json())
        return
    click.echo(
        f"Rebuilt {report.generation}: {report.memories} memories from {report.files} files in {report.seconds}s."
    )
    for problem in report.problems:
        click.echo(f"  warning: {problem}", err=True)


@cli.command("validate")
@json_option
@click.pass_context
def validate_command(ctx: click.Context, json_: bool) -> None:
    """Check the vault's config file and environment; exit 1 with every problem found."""
    from memvault.indexer.engine.locate import locate_vault
    from memvault.vault.config import load_config

    root = locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())
    config = load_config(root, dict(os.environ))
    problems = []
    if config.index.on_server:  # the server is part of the configuration: reach it
        from memvault.indexer.backend import check_read_replica, check_server

        problems = check_server(config.index) + check_read_replica(config.index)
    if json_:
        emit_json(
            {
                "valid": not problems,
                "vault": str(root),
                "mode": config.memory.mode,
                "writeMode": config.memory.write_mode,
                "index": config.index.backend,
                "problems": problems,
                "source": config.source,
            }
        )
    elif problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
    else:
        click.echo(
            f"{root}: configuration is valid ({config.memory.mode}, {config.memory.write_mode}"
            f"{', index on ' + config.index.backend if config.index.on_server else ''})."
        )
    if problems:
        ctx.exit(1)


def _import_progress(log, total: int):
    """A `remember_many` progress callback feeding the terminal's phase log."""
    log.phase("import", total=total)
    reported = [0]

    def progress(done: int, _total: int) -> None:
        log.advance("import", done - reported[0])
        reported[0] = done

    return progress
