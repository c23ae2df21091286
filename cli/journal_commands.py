"""`memvault journal`: the MemoryJournal tool from the shell.

Each CLI call is its own process, so the cursor of a page is kept in the vault (owner-only
snapshots and key under `.index/journal/`) and `--cursor` works from a later call for 15
minutes. On a read-only vault nothing can be kept: the command says so and `--all` prints every
page in one call instead.
"""

import re
from contextlib import contextmanager

import click

from memvault.cli.app import cli, open_store
from memvault.cli.errors import emit_json, json_option
from memvault.vault.errors import VaultError

#: MemoryJournal's argument names (the library's messages use them) → what this command calls them
_CLI_NAMES = {"fromDate": "FROM", "throughDate": "THROUGH", "timeZone": "--tz", "{cursor}": "--cursor"}
#: JournalRequestError's and JournalCursorError's codes (indexer/journal/)
_JOURNAL_ERROR_CODES = ("invalid_journal_request", "invalid_journal_cursor")
_MCP_NAME_RE = re.compile(r"\bfromDate\b|\bthroughDate\b|\btimeZone\b|\{cursor\}|^limit\b")


@cli.command("journal")
@click.argument("from_date", metavar="[FROM]", required=False)
@click.argument("through_date", metavar="[THROUGH]", required=False)
@click.option(
    "--tz",
    "time_zone",
    default=None,
    metavar="ZONE",
    help="IANA zone FROM and THROUGH are local dates in (e.g. Europe/Amsterdam). Default: the vault's "
    "own zone (memory.timeZone in its config); never the machine's.",
)
@click.option("--limit", type=int, default=None, help="Entries per page: default 10, at most 25.")
@click.option(
    "--cursor",
    default=None,
    help="Continue from a previous page's cursor (give nothing else: range and limit are fixed).",
)
@click.option("--all", "all_pages", is_flag=True, help="Print every page of the snapshot (up to 1,000 entries).")
@json_option
@click.pass_context
def journal_command(
    ctx: click.Context,
    from_date: str | None,
    through_date: str | None,
    time_zone: str | None,
    limit: int | None,
    cursor: str | None,
    all_pages: bool,
    json_: bool,
) -> None:
    """List curated memories from FROM through THROUGH (inclusive local dates in --tz), oldest first.

    FROM and THROUGH are YYYY-MM-DD; without --tz they are dates in the vault's configured zone.
    Without THROUGH the range is the one day FROM (`memvault journal 2026-09-01`).

    Continue with --cursor alone (cursors are kept in the vault for 15 minutes, single-use).
    """
    if cursor is None and through_date is None:
        through_date = from_date  # one day needs its date once
    with open_store(ctx, sync=False, engine=True) as store:
        if time_zone is None and cursor is None:
            time_zone = store.time_zone  # the vault's explicit zone, as configured: still never guessed
        arguments = {"fromDate": from_date, "throughDate": through_date, "timeZone": time_zone, "limit": limit,
                     "cursor": cursor}  # fmt: skip
        service = store.journal_service(persistent=True)
        with _cli_names():
            pages = [service.query(arguments)]
            while all_pages and pages[-1].cursor:
                pages.append(service.query({"cursor": pages[-1].cursor}))
    kept = service.snapshots.persistent
    if json_:
        emit_json(_merged(pages) if all_pages else _single(pages[0], kept))
        return
    _print(pages, kept)


@contextmanager
def _cli_names():
    """A refused request is told in this command's words (FROM, --tz), not MemoryJournal's (fromDate)."""

    try:
        yield
    except VaultError as exc:  # by code: through an owner the error arrives as a VaultError with its code
        if exc.code not in _JOURNAL_ERROR_CODES:
            raise
        translated = _MCP_NAME_RE.sub(lambda m: _CLI_NAMES.get(m.group(0), "--limit"), str(exc))
        renamed = type(exc)(translated)
        renamed.code = exc.code
        raise renamed from None


def _single(page, kept: bool) -> dict:
    body = page.to_json()
    if not kept and body["cursor"]:
        body["cursor"] = None
        body["cursorNote"] = "the vault is read-only, so no cursor can be kept between calls: use --all"
    return body


def _merged(pages) -> dict:
    body = pages[-1].to_json()
    body["entries"] = [entry for page in pages for entry in page.entries]
    body["page"] = {"pages": len(pages), "count": len(body["entries"]), "limit": pages[0].page["limit"]}
    return body


def _print(pages, kept: bool) -> None:
    first = pages[0]
    span = first.range
    click.echo(
        f"{span['fromDate']} .. {span['throughDate']} in {span['timeZone']}  [{span['utcStart']}, {span['utcEnd']})"
    )
    if first.no_data:
        click.echo("No memories in this range (noData).")
        return
    for page in pages:
        for entry in page.entries:
            state = "" if entry["state"] == "valid" else f"  ({entry['state']})"
            click.echo(f"{entry['local'][:10]} {entry['local'][11:16]}  {entry['text']}  {entry['source']}{state}")
    last = pages[-1]
    shown = last.page["offset"] + last.page["count"]
    click.echo(f"-- {shown} of {last.page['snapshotEntries']} entries", err=True)
    if last.cursor:
        hint = f"memvault journal --cursor {last.cursor}" if kept else "--all (the vault is read-only: no cursor kept)"
        click.echo(f"more: {hint}", err=True)
    _print_coverage(last.coverage)


def _print_coverage(coverage: dict) -> None:
    if coverage["stoppedBy"]:
        cap = "1,000-entry" if coverage["stoppedBy"] == "entry_cap" else "2 MiB"
        click.echo(
            f"incomplete: the scan stopped at the {cap} snapshot cap; ask again from"
            f" {coverage['resumeFromDate']} for the rest",
            err=True,
        )
    if coverage["incompleteNotes"]:
        click.echo(
            f"incomplete: notes that could not be read whole: {', '.join(coverage['incompleteNotes'])}"
            " (run `memvault health`)",
            err=True,
        )
