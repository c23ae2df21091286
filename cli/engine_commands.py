"""`memvault serve` and `memvault engine status|stop`: the vault's resident owner (docs/engine.md).

`serve` and `watch` both run an owner in the foreground (`foreground_owner.run_owner`): it drains
the intake, keeps the index and vectors in step with the files, compacts and consolidates, and
answers the other memvault commands over its socket. Extra faces of the owner (the web pages)
register with `foreground_owner.register_face` and run on their own threads inside `serve`.
"""

import os
import signal
import sys
import time
from pathlib import Path

import click

from memvault.cli.app import cli
from memvault.cli.errors import emit_json, json_option
from memvault.cli.foreground_owner import FACES, run_owner
from memvault.vault.errors import VaultError

_STOP_WAIT_SECONDS = 30.0
#: how long a forced stop waits for SIGTERM (and then for SIGKILL) to take effect
_KILL_GRACE_SECONDS = 10.0


@cli.command("serve")
@click.option(
    "--face",
    "faces",
    multiple=True,
    type=click.Choice(sorted(FACES)) if FACES else str,
    help="An extra face of the owner to run (registered by its module), e.g. web.",
)
@click.option(
    "--web-port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port of the web face on 127.0.0.1 and [::1] (0: any free port).",
)
@click.pass_context
def serve_command(ctx: click.Context, faces: tuple[str, ...], web_port: int) -> None:
    """Run the vault's owner in the foreground until interrupted (Ctrl-C / SIGTERM).

    The owner drains admitted turns, follows edits to the notes, keeps vectors complete, compacts
    and consolidates, and answers every other memvault command (search, remember, admit, journal,
    health) over a private socket, so they skip the start-up cost. `watch` does the same and logs
    each batch.
    """
    unknown = [name for name in faces if name not in FACES]
    if unknown:
        raise click.BadParameter(
            f"no face named {unknown[0]!r}; known: {', '.join(sorted(FACES)) or 'none'}", param_hint="--face"
        )

    def ready(root) -> None:
        click.echo(f"serving {root} (Ctrl-C to stop)", err=True)

    run_owner(ctx, "serve", ready=ready, faces=faces, face_options={"web_port": web_port})
    click.echo("stopped; the index is consistent", err=True)


@cli.group("engine")
def engine_group() -> None:
    """The vault's resident owner: see whether one runs, and stop it."""


@engine_group.command("status")
@json_option
@click.pass_context
def engine_status(ctx: click.Context, json_: bool) -> None:
    """Show the owner of the vault (pid, role, socket, intake); exit 1 when none runs.

    Exit status: 0 when an owner answers, 1 when no owner runs (not an error: every command then
    works in-process), so a script can ask `memvault engine status >/dev/null && ...`. With
    --json the answer is {"running": false, ...} and the exit status is still 1.
    """
    from memvault.indexer.engine.address import read_status, socket_path
    from memvault.indexer.engine.client import find_owner
    from memvault.indexer.engine.locate import locate_vault
    from memvault.vault.locks import fence_holder_pid, pid_alive

    root = locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())
    owner = find_owner(root)
    if owner is None:
        stale = read_status(root)
        holder = fence_holder_pid(root)  # a live owner whose socket was deleted still holds the vault
        body = {
            "running": False,
            "vault": str(root),
            "socket": str(socket_path(root)),
            "staleStatus": stale if stale and not pid_alive(stale.get("pid")) else None,
            "unreachableOwner": holder if holder is not None and pid_alive(holder) else None,
        }
        if json_:
            emit_json(body)
        elif body["unreachableOwner"]:
            click.echo(
                f"pid {holder} holds {root} but no engine answers on its socket: an owner binds it "
                "again within 5 s (if it does not: memvault engine stop --force)"
            )
        else:
            click.echo(f"no engine runs for {root}; commands work in-process (start one: memvault serve)")
            if body["staleStatus"]:
                click.echo(f"  a crashed owner (pid {stale.get('pid')}) left its status; the next owner cleans it")
        ctx.exit(1)
    status = owner.call("status")
    if json_:
        emit_json({"running": True, **status})
        return
    counts = status["intake"]["counts"]
    click.echo(f"engine pid {status['pid']} ({status['role']}) owns {status['vault']} since {status['startedAt']}")
    click.echo(f"  socket {status['socket']}, protocol {status['protocol']}, memvault {status['version']}")
    worker = status["intake"].get("worker") or {}
    click.echo(
        f"  intake: {counts['pending']} pending ({counts['due']} due), worker "
        f"{'running' if worker.get('running') else 'NOT running'}"
    )
    if status.get("vectors"):
        click.echo(f"  vectors: {status['vectors']}")
    for repair in status.get("repairs", []):
        click.echo(f"  repaired: {repair}")


@engine_group.command("stop")
@click.option(
    "--force", is_flag=True, help="If the owner does not answer or does not stop, kill it (SIGTERM, then SIGKILL)."
)
@json_option
@click.pass_context
def engine_stop(ctx: click.Context, force: bool, json_: bool) -> None:
    """Ask the vault's owner to stop (it drains the intake first); wait until it has."""
    from memvault.indexer.engine.address import read_status
    from memvault.indexer.engine.client import find_owner
    from memvault.indexer.engine.locate import locate_vault
    from memvault.indexer.engine.protocol import EngineStuck

    root = locate_vault(ctx.obj["vault_path"], dict(os.environ), Path.cwd())
    try:
        owner = find_owner(root)
    except EngineStuck:
        if not force:
            raise
        owner = None
        pid = _stuck_owner_pid(root, read_status(root))
    else:
        if owner is None:
            _say(json_, {"stopped": False, "running": False}, "no engine runs for this vault")
            return
        pid = owner.pid
        owner.call("stop")
        if _wait_gone(root, _STOP_WAIT_SECONDS):
            _say(json_, {"stopped": True, "pid": pid}, f"engine pid {pid} stopped")
            return
        if not force:
            raise click.ClickException(
                f"engine pid {pid} did not stop within {_STOP_WAIT_SECONDS:g} s: run `memvault engine stop --force`"
            )
    signal_used = _kill(pid)
    _clean_status(root, pid)
    _say(
        json_,
        {"stopped": True, "pid": pid, "forced": True, "signal": signal_used},
        f"engine pid {pid} killed ({signal_used}); admitted turns stay pending for the next owner",
    )


def _wait_gone(root: Path, timeout: float) -> bool:
    from memvault.indexer.engine.client import find_owner

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if find_owner(root, timeout=2.0) is None:
                return True
        except VaultError:
            pass
        time.sleep(0.2)
    return False


def _stuck_owner_pid(root: Path, status: dict | None) -> int | None:
    """The pid of an owner that does not answer: its status file, else the kernel's record of who
    holds the vault's ownership lock (the status file may have been deleted with `.locks/`)."""
    from memvault.vault.locks import fence_holder_pid, pid_alive

    pid = (status or {}).get("pid")
    if isinstance(pid, int) and pid_alive(pid):
        return pid
    return fence_holder_pid(root)


def _kill(pid) -> str:
    """SIGTERM, a grace of 10 s, then SIGKILL; returns the signal that ended the owner.

    A stopped process (SIGSTOP, a debugger's breakpoint) cannot act on SIGTERM before it is
    continued, so waiting out the grace would only delay the SIGKILL the operator asked for."""
    from memvault.vault.locks import pid_alive, process_stopped

    if not isinstance(pid, int) or not pid_alive(pid):
        raise click.ClickException(
            "the owner's pid is unknown (no live process named by .locks/engine.json "
            "or holding the vault's lock): find it with `ps` and stop it by hand"
        )
    if not process_stopped(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + _KILL_GRACE_SECONDS
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pid_alive(pid):
            return "SIGTERM"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _KILL_GRACE_SECONDS
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "SIGKILL"


def _clean_status(root: Path, pid: int) -> None:
    """Remove the killed owner's status notes (engine.json, live.json) when they name it: the kernel
    dropped its locks, and `engine status` should not show a dead owner as the vault's."""
    from memvault.indexer.engine.address import read_status, status_path
    from memvault.vault.locks import LivenessFence

    if (read_status(root) or {}).get("pid") == pid:
        status_path(root).unlink(missing_ok=True)
    fence = LivenessFence(root)
    if (fence.holder_info() or {}).get("pid") == pid:
        fence.info_path.unlink(missing_ok=True)


def _say(json_: bool, body: dict, line: str) -> None:
    if json_:
        emit_json(body)
    else:
        click.echo(line)
    sys.stdout.flush()
