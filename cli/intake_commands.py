"""Durable intake commands: admit, inspect, retry, resolve.

`inspect` never shows summaries, capture text or run ids: only intake ids (SHA-256 of the run
id), states, timestamps, attempts, due flags, failure categories and counts. `retry` and
`resolve` need a stopped agent (they are refused while a live process holds the vault).
"""

import os
import sys
from pathlib import Path

import click

from memvault.cli.app import cli, open_store, require_no_owner
from memvault.cli.errors import EXIT_ERROR, JSON_META_KEY, emit_json, json_option
from memvault.vault.errors import VaultError
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

_ID_HELP = "the 64-hex intake id `memvault inspect` shows"


def _vault_root(ctx: click.Context) -> Path:
    from memvault.indexer.engine.locate import locate_vault  # light: inspect stays a fast command

    return locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())


def _check_id(_ctx, _param, value: str | None) -> str | None:
    from memvault.vault.intake.files import is_intake_id

    if value is not None and not is_intake_id(value):
        raise click.BadParameter(f"{value!r} is not an intake id: use {_ID_HELP}")
    return value


def _now():
    from memvault.vault.clock import utc_now

    return utc_now()


@cli.command("admit")
@click.option(
    "--wait",
    "wait",
    is_flag=True,
    help="With an owner running: answer once the turn is projected (at most 10 s), for scripts "
    "that search right after.",
)
@click.pass_context
def admit_command(ctx: click.Context, wait: bool) -> None:
    """Admit one completed turn read as JSON on stdin; print the result as JSON.

    Input: {"runId": "...", "answer": "...", "captureText": "..." (optional),
    "trigger": "user" | "cron" | "webhook", "completedAt": ISO-8601 (optional)}.
    Prints {"status": admitted | duplicate | skipped | failed, "id", "reason", "message",
    "state", "worker"}; exit 1 only when the turn was NOT saved. The turn is saved by this process
    (a locked, fsynced intake record) before anything else. While an owner runs (serve, watch,
    mcp) it answers then and the owner projects the turn within about a second (`--wait`: once it
    has); an owner that does not answer changes only "worker". With no owner, this process
    projects it, bounded by a 10 s drain.
    """
    from memvault.indexer.engine.protocol import EngineStuck
    from memvault.vault.intake.admission import AdmissionResult, intake_id_for
    from memvault.vault.intake.turn_json import MAX_TURN_JSON_BYTES, TurnJsonError, parse_turn_json

    ctx.meta[JSON_META_KEY] = True
    try:
        turn = parse_turn_json(sys.stdin.buffer.read(MAX_TURN_JSON_BYTES + 1))
    except TurnJsonError as exc:
        emit_json({**AdmissionResult("failed", reason=exc.category, message=str(exc)).to_json(), "worker": None})
        sys.exit(EXIT_ERROR)
    try:
        store = open_store(ctx, sync=False, engine=True)
    except EngineStuck as stuck:  # an owner holds the vault but does not answer: admit here, durably
        result, worker = _admit_beside_stuck_owner(ctx, turn, stuck)
        root = _vault_root(ctx)
    else:
        with store:
            if hasattr(store, "admit_turn"):  # a live owner projects it (docs/engine.md)
                result, worker = store.admit_turn(**turn, wait=wait)
            else:
                result = store.persist_completed_turn(**turn)
                worker = _drain(store) if result.ok else None
            root = store.layout.root
    body = {**result.to_json(), "worker": worker}
    if result.ok:
        body["state"] = _state_of(root, intake_id_for(turn["run_id"]))
        problem = _projection_failure(root, intake_id_for(turn["run_id"]))
        if problem:
            body["problem"] = problem  # durably admitted, but its projection failed: say so now
    emit_json(body)
    if not result.ok and result.status != "skipped":
        sys.exit(EXIT_ERROR)


def _admit_beside_stuck_owner(ctx: click.Context, turn: dict, stuck: Exception):
    """Admission is a file write any process may make: the stuck owner projects it once it
    answers again, or the next owner does (`memvault engine stop --force` names the fix)."""
    from memvault.indexer.engine.remote import admit_here, owner_not_answering
    from memvault.vault.config import load_config

    root = _vault_root(ctx)
    result = admit_here(root, load_config(root, dict(os.environ)), **turn)
    return result, (owner_not_answering(stuck) if result.status == "admitted" else None)


def _drain(store) -> str:
    """Project now when this process may own the vault; otherwise leave it to the live owner."""

    try:
        store.start_intake(serve=False)  # one short drain: this process is not a resident owner
    except VaultError as exc:
        return f"deferred: {exc}"
    report = store.stop()  # the spec's shutdown deadline (vault/limits.py)
    if report is None or report.drained:
        return "drained"
    return f"aborted after {SHUTDOWN_DRAIN_SECONDS:g} s; the turn stays pending"


def _projection_failure(root: Path, intake_id: str) -> str | None:
    """Why an admitted turn's projection failed (its note, its text), or None when it did not."""
    from memvault.vault.config import load_config
    from memvault.vault.intake.files import PENDING, IntakeDirs
    from memvault.vault.intake.projection import projection_problem
    from memvault.vault.intake.state import read_record
    from memvault.vault.layout import VaultLayout

    dirs = IntakeDirs(root)
    try:
        record = read_record(dirs, PENDING, intake_id)
        if not record.failure:
            return None
        found = projection_problem(VaultLayout(root), record, load_config(root, dict(os.environ)).memory.time_zone)
    except (VaultError, OSError, ValueError):
        return None
    why = f": {found[0]}. Fix: {found[1]}" if found else ""
    return (
        f"admitted, but projecting it failed ({record.failure}){why}; it is retried by itself "
        f"(`memvault health` reports it until it is projected)"
    )


def _state_of(root: Path, intake_id: str) -> str:
    from memvault.vault.intake.files import IntakeDirs
    from memvault.vault.intake.snapshot import inspect_run

    return inspect_run(IntakeDirs(root), intake_id, _now())["entries"][0]["state"]


@cli.command("inspect")
@click.argument("intake_id", metavar="[ID]", required=False, callback=_check_id)
@json_option
@click.pass_context
def inspect_command(ctx: click.Context, intake_id: str | None, json_: bool) -> None:
    """Show the durable intake (or one run by ID) without any turn content."""
    from memvault.vault.capture.stats import summarize
    from memvault.vault.intake.files import IntakeDirs
    from memvault.vault.intake.snapshot import inspect_intake, inspect_run

    dirs = IntakeDirs(_vault_root(ctx))
    report = inspect_run(dirs, intake_id, _now()) if intake_id else inspect_intake(dirs, _now())
    if not intake_id:
        report["capture"] = summarize(dirs.root)  # what recent captures produced, counts only
    if json_:
        emit_json(report)
        return
    if intake_id:
        for entry in report["entries"]:
            _print_entry(entry)
        click.echo(f"ledger: {'committed' if report['ledgerCommitted'] else 'not committed'}")
        return
    counts, ledger = report["counts"], report["ledger"]
    click.echo(
        f"intake: {counts['pending']} pending ({counts['due']} due), {counts['awaitingCapture']} awaiting capture, "
        f"{counts['dead']} dead, {counts['resolved']} resolved, {counts['invalid']} invalid"
    )
    if ledger["ok"]:
        click.echo(f"ledger: ok, {ledger['entries']} entries in {ledger['shards']} shards")
    else:
        click.echo(f"ledger: FAILED CLOSED: {ledger['problem']}")
    click.echo(_capture_line(report["capture"]))
    for entry in report["records"]:
        _print_entry(entry)


def _capture_line(capture: dict) -> str:
    if capture["problem"]:
        return f"capture: {capture['problem']}"
    return (
        f"capture (last {capture['runs']} runs): {capture['added']} added, {capture['updated']} updated, "
        f"{capture['superseded']} superseded, {capture['noops']} no-op; {capture['emptyExtractions']} empty "
        f"extractions ({capture['emptySubstantive']} of substantive turns); {capture['calls']} model calls, "
        f"{capture['repairs']} repairs"
    )


def _print_entry(entry: dict) -> None:
    details = [entry["state"]]
    if entry.get("invalidOutputAttempts"):
        details.append(f"invalid-output attempts {entry['invalidOutputAttempts']} of {entry['invalidOutputBudget']}")
    for key in ("attempts", "nextAttemptAt", "failure", "outcome", "resolvedAt", "reason", "projection", "problem"):
        if entry.get(key) not in (None, ""):
            details.append(f"{key} {entry[key]}")
    if entry.get("due"):
        details.append("due")
    click.echo(f"{entry['id']}  " + "  ".join(str(d) for d in details))


@cli.command("retry")
@click.argument("intake_id", metavar="[ID]", required=False, callback=_check_id)
@json_option
@click.pass_context
def retry_command(ctx: click.Context, intake_id: str | None, json_: bool) -> None:
    """Make dead or delayed intake work due at the next start (agent must be stopped)."""
    from memvault.vault.intake.operator import retry_runs

    results = retry_runs(require_no_owner(ctx, "memvault retry"), intake_id, _now())
    if json_:
        emit_json({"retried": results})
        return
    if not results:
        click.echo("Nothing to retry: no dead or delayed intake records.")
    for row in results:
        click.echo(f"{row['id']}: {row['outcome']}")


@cli.command("resolve")
@click.argument("intake_id", metavar="ID", callback=_check_id)
@click.argument("reason", metavar="REASON-SLUG")
@json_option
@click.pass_context
def resolve_command(ctx: click.Context, intake_id: str, reason: str, json_: bool) -> None:
    """Accept the loss of one intake run: records operator_resolved, keeps duplicate protection.

    The turn is not projected or captured afterwards; a retry of the same run id stays a
    duplicate for ever. REASON-SLUG: 1-64 of a-z, 0-9 and '-'. The agent must be stopped.
    """
    from memvault.vault.intake.operator import resolve_run_as_operator

    result = resolve_run_as_operator(require_no_owner(ctx, "memvault resolve"), intake_id, reason, _now())
    if json_:
        emit_json(result)
    else:
        click.echo(f"{result['id']}: {result['outcome']}")
