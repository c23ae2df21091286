"""`memvault --remote NAME <command>`: a vault on the index server, from a machine without its files.

search, journal, remember and health are the local commands themselves (`open_store` returns a
ConnectedStore, with the same API: cli/remote_store.py, which they load instead of this module);
admit, inspect, engine status and mcp have their remote forms here, with the same output shapes;
serve and engine stop run and stop this machine's resident connection (cli/remote_serve.py).
Every other command needs the vault's folder and says so.
"""

import dataclasses
import os
import sys

import click

from memvault.cli.errors import EXIT_ERROR, JSON_META_KEY, emit_json, json_option
from memvault.cli.remote_serve import remote_engine_stop, remote_serve, resident_line, resident_report
from memvault.cli.remote_store import connected_store
from memvault.indexer.team.ledger import CLAIMED
from memvault.vault.errors import VaultError
from memvault.vault.intake.admission import AdmissionResult
from memvault.vault.intake.turn_json import MAX_TURN_JSON_BYTES, TurnJsonError, parse_turn_json

#: how long `admit --wait` waits for the owner to project the turn (as a local `admit --wait`)
ADMIT_WAIT_SECONDS = 10.0


@click.command("admit")
@click.option(
    "--wait",
    "wait",
    is_flag=True,
    help="Answer once the vault's owner holds the turn in its files (at most 10 s), for scripts "
    "that search right after.",
)
@click.pass_context
def remote_admit(ctx: click.Context, wait: bool) -> None:
    """Admit one completed turn (JSON on stdin) to the vault's run ledger on the index server.

    The same checks as a local admit run here first (skip rules, cron hygiene, size caps,
    credential refusal); the server answers admitted / duplicate / conflict with one statement,
    and the vault's owner projects the turn into its files ("worker": null; with --wait,
    "drained" once it has, or why not yet). Exit 1 only when the turn was NOT saved.
    """

    ctx.meta[JSON_META_KEY] = True
    try:
        turn = parse_turn_json(sys.stdin.buffer.read(MAX_TURN_JSON_BYTES + 1))
    except TurnJsonError as exc:
        emit_json({**AdmissionResult("failed", reason=exc.category, message=str(exc)).to_json(), "worker": None})
        sys.exit(EXIT_ERROR)
    worker = None
    with connected_store(ctx, probe=False) as store:  # an unreachable server is the result's failure category
        result = store.persist_completed_turn(**turn)
        if wait and result.ok and result.status != "skipped":
            result, worker = _wait_for_owner(store, result)
    emit_json({**result.to_json(), "worker": worker})
    if not result.ok and result.status != "skipped":
        sys.exit(EXIT_ERROR)


def _wait_for_owner(store, result):
    """(the result, with state claimed_by_owner once projected; what the owner did with it)."""

    try:
        if store.wait_projected(result.id, ADMIT_WAIT_SECONDS):
            return dataclasses.replace(result, state=CLAIMED), "drained"
        running = store.server.owner_alive()
    except VaultError as exc:  # the turn is saved: only the wait failed
        return result, f"saved; could not wait for the owner: {exc}"
    if not running:
        return (
            result,
            "no owner runs for this vault: the turn waits on the server (start `memvault serve` on its home machine)",
        )
    return result, f"the owner is still working on it after {ADMIT_WAIT_SECONDS:g} s; the turn waits on the server"


@click.command("inspect")
@json_option
@click.pass_context
def remote_inspect(ctx: click.Context, json_: bool) -> None:
    """Count what waits on the index server for the vault's owner (no content), and name the owner."""
    with connected_store(ctx) as store:
        report = store.intake_snapshot()
    if json_:
        emit_json(report)
        return
    remote, owner = report["remote"], report["owner"]
    oldest = "" if remote["oldestWaitingSeconds"] is None else f" (oldest {remote['oldestWaitingSeconds']:g} s)"
    projected = f"{remote['turnsProjected']} projected"
    if remote.get("turnsRefused"):
        projected += f", {remote['turnsRefused']} refused (not records memvault wrote)"
    click.echo(f"vault {report['vault']} on the index server: {remote['turnsWaiting']} turn(s) waiting for the owner"
               f"{oldest}, {projected}; {remote['factsWaiting']} fact(s) waiting")  # fmt: skip
    click.echo(_owner_line(owner, report["ownerRunning"]))


def _owner_line(owner: dict | None, running: bool) -> str:
    if owner is None:
        return "owner: none registered yet (start `memvault serve` on the vault's home machine)"
    state = "running" if running else "not running"
    return f"owner: pid {owner['pid']} on host {owner['host']}, since {owner['startedAt']} ({state})"


@click.group("engine")
def remote_engine() -> None:
    """The vault's owner, as the index server knows it, and this machine's resident connection."""


@remote_engine.command("status")
@json_option
@click.pass_context
def remote_engine_status(ctx: click.Context, json_: bool) -> None:
    """Whether the vault's owner runs (it holds the server's owner lock), and where, and whether this
    machine keeps a resident connection to it (`memvault --remote NAME serve`); exit 1 when no owner runs."""
    resident = resident_report(ctx.obj["remote"])
    with connected_store(ctx) as store:
        report = store.intake_snapshot()
    body = {"running": report["ownerRunning"], "owner": report["owner"], "vault": report["vault"],
            "resident": resident}  # fmt: skip
    if json_:
        emit_json(body)
    else:
        click.echo(_owner_line(report["owner"], report["ownerRunning"]))
        click.echo(resident_line(ctx.obj["remote"], resident))
    if not body["running"]:
        ctx.exit(1)


remote_engine.add_command(remote_engine_stop)


@click.command("mcp")
@click.pass_context
def remote_mcp(ctx: click.Context) -> None:
    """Serve MemoryRecall, MemoryJournal and Remember of a vault on the index server over stdio.

    Register `memvault --remote NAME mcp` in the agent's MCP config on any machine; set
    MEMVAULT_INDEX_DSN (or a libpq service) for the connection.
    """
    from memvault.cli.mcp_remote import serve_remote

    serve_remote(ctx.obj["remote"], dict(os.environ))


REMOTE_FORM_COMMANDS = {
    "admit": remote_admit,
    "inspect": remote_inspect,
    "engine": remote_engine,
    "mcp": remote_mcp,
    "serve": remote_serve,
}
