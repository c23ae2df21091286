"""`memvault --remote NAME serve` and `engine stop`: the resident connection on an agent's machine.

A resident keeps the vault's connection, its settings and the embedder loaded, and answers the
other `memvault --remote NAME` search, journal, remember and health commands over a private
socket (indexer/engine/resident.py), so each of them costs what a local command costs with the
vault's owner up. Without one they connect in their own process, as before.
"""

import json
import os
import signal
import sys
import time

import click

from memvault.cli.errors import emit_json, json_option
from memvault.indexer.engine.address import resident_paths
from memvault.indexer.engine.resident_client import ResidentUnusable, find_resident
from memvault.vault.errors import VaultError
from memvault.vault.locks import pid_alive, process_stopped

#: how long `engine stop` waits for the resident to stop after it was asked
_STOP_WAIT_SECONDS = 15.0
#: how long a forced stop waits for SIGTERM (and then for SIGKILL) to take effect
_KILL_GRACE_SECONDS = 10.0


@click.command("serve")
@click.option(
    "--idle-exit",
    "idle_exit",
    type=click.IntRange(0, 7 * 24 * 3600),
    default=0,
    show_default=True,
    metavar="SECONDS",
    help="Stop after this many seconds without a command (0: never).",
)
@click.pass_context
def remote_serve(ctx: click.Context, idle_exit: int) -> None:
    """Keep a connection to the vault on the index server open on this machine, in the foreground
    until interrupted (Ctrl-C / SIGTERM, or `memvault --remote NAME engine stop`).

    While it runs, `memvault --remote NAME search|journal|remember|health` started with the same
    connection settings (MEMVAULT_INDEX_*, PG*) are its thin clients: they skip loading the
    database client, the embedder and the connection. Without it they work on their own.
    With MEMVAULT_REMOTE_RESIDENT=auto those commands start one themselves when none runs
    (`serve --idle-exit 900`, its output in the socket folder's remote-*.log).
    """
    from memvault.indexer.engine.resident import ResidentConnection  # psycopg, numpy: the resident only

    name = ctx.obj["remote"]
    resident = ResidentConnection(name, dict(os.environ), log=lambda m: click.echo(f"memvault serve: {m}", err=True))
    resident.start()

    def request_stop(*_args) -> None:
        resident.stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    click.echo(f"connected to vault {name}; answering on {resident.paths.socket} (Ctrl-C to stop)", err=True)
    try:
        why = resident.serve_forever(idle_exit)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        resident.stop()
    click.echo(f"stopped: {why}", err=True)


def resident_line(name: str, resident: dict | None) -> str:
    if resident is None:
        return f"this machine: no resident connection (start one: memvault --remote {name} serve)"
    if resident.get("problem"):
        return f"this machine: {resident['problem']}"
    pid, since, socket = resident["pid"], resident["startedAt"], resident["socket"]
    return f"this machine: a resident connection, pid {pid} since {since}, on {socket}"


def resident_report(name: str) -> dict | None:
    """This machine's resident connection for the vault (its hello), or None; one that cannot be
    used is reported by its error."""
    try:
        client = find_resident(name, os.environ)
    except VaultError as exc:
        return {"pid": None, "startedAt": None, "socket": None, "problem": str(exc)}
    if client is None:
        return None
    client.close()
    return {key: client.hello.get(key) for key in ("pid", "startedAt", "socket", "version", "protocol")}


@click.command("stop")
@click.option(
    "--force", is_flag=True, help="If the resident does not answer or does not stop, kill it (SIGTERM, then SIGKILL)."
)
@json_option
@click.pass_context
def remote_engine_stop(ctx: click.Context, force: bool, json_: bool) -> None:
    """Stop this machine's resident connection to the vault (`memvault --remote NAME serve`).

    The vault's owner runs on its home machine and is stopped there (`memvault engine stop`)."""
    name = ctx.obj["remote"]
    paths = resident_paths(name, os.environ)
    try:
        client = find_resident(name, os.environ)
    except ResidentUnusable:
        if not force:
            raise
        client, pid = None, _status_pid(paths.status)
    else:
        if client is None:
            _say(json_, {"stopped": False, "running": False}, f"no resident connection to vault {name} runs here")
            return
        pid = client.pid
        client.call("stop")
        client.close()
        if _wait_gone(name, _STOP_WAIT_SECONDS):
            _say(json_, {"stopped": True, "pid": pid}, f"resident connection pid {pid} stopped")
            return
        if not force:
            raise click.ClickException(
                f"the resident connection (pid {pid}) did not stop within {_STOP_WAIT_SECONDS:g} s: "
                f"run `memvault --remote {name} engine stop --force`"
            )
    signal_used = _kill(pid)  # SIGTERM, a grace, then SIGKILL: as for an owner
    if _status_pid(paths.status) == pid:
        paths.status.unlink(missing_ok=True)
    _say(json_, {"stopped": True, "pid": pid, "forced": True, "signal": signal_used},
         f"resident connection pid {pid} killed ({signal_used})")  # fmt: skip


def _kill(pid) -> str:
    """SIGTERM, a grace, then SIGKILL (at once for a stopped process, which cannot act on SIGTERM),
    as `memvault engine stop --force` ends an owner; the signal that ended it."""
    if not isinstance(pid, int) or not pid_alive(pid):
        raise click.ClickException("the resident's pid is unknown (its status file names no live process): "
                                   "find it with `ps` and stop it by hand")  # fmt: skip
    for sig in (() if process_stopped(pid) else (signal.SIGTERM,)) + (signal.SIGKILL,):
        os.kill(pid, sig)
        deadline = time.monotonic() + _KILL_GRACE_SECONDS
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not pid_alive(pid):
            return sig.name
    return "SIGKILL"


def _status_pid(path):
    try:
        pid = json.loads(path.read_bytes()[: 64 * 1024]).get("pid")
    except (OSError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


def _wait_gone(name: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if find_resident(name, os.environ, timeout=1.0) is None:
                return True
        except VaultError:
            pass
        time.sleep(0.1)
    return False


def _say(json_: bool, body: dict, line: str) -> None:
    if json_:
        emit_json(body)
    else:
        click.echo(line)
    sys.stdout.flush()
