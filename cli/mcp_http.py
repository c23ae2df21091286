"""`memvault mcp --http`: the same MCP server as stdio, over the SDK's streamable-HTTP transport.

For hosts and IDEs that connect to an MCP server by URL. The tools, schemas, results, errors,
resources and prompt are `cli/mcp_server.py`'s (`build_server`), over the same `VaultSession`,
so the server is the vault's owner when none runs and a client of the owner otherwise.

Who may talk to it (`indexer/runtime/loopback.py`): the sockets are bound to 127.0.0.1 and ::1
only (another address is refused before anything listens); Host must name this server on a
loopback name and any Origin must be its own (a web page cannot reach it by DNS rebinding);
every request carries `Authorization: Bearer <token>`, a token made at each start and printed
once on stderr, or read from `--token-file`. SIGTERM, SIGINT and `memvault engine stop` end it
cleanly: requests in flight get up to the spec's drain deadline, then the store drains and the
fence is released.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from memvault.cli.mcp_server import build_server
from memvault.cli.mcp_tools import VaultSession
from memvault.indexer.runtime.loopback import (
    LOOPBACK_ADDRESSES,
    BearerGuard,
    NotLoopback,
    bind_loopback,
    check_token,
    new_token,
    require_loopback,
    serve,
)
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

DEFAULT_PORT = 8766
MCP_PATH = "/mcp"


class TokenFileProblem(ValueError):
    """A --token-file that cannot be used; the message names the file and the fix."""


def read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileProblem(f"cannot read the token file {str(path)!r} ({exc}): give a readable file") from None
    try:
        return check_token(text.strip())
    except ValueError as exc:
        raise TokenFileProblem(f"the token file {str(path)!r} does not hold a usable token: {exc}") from None


def serve_http(vault_path, env: dict, cwd: Path, *, addresses: tuple[str, ...], port: int,
               token: str | None) -> None:  # fmt: skip
    """Serve until SIGTERM/SIGINT or the owner is asked to stop. `token`: None makes one."""
    bound = bind_loopback(port, addresses)  # PortUnavailable / NotLoopback before anything starts
    session = VaultSession(vault_path, env, cwd)
    stop = threading.Event()
    threading.Thread(target=_prepare, args=(session, stop), name="memvault-mcp-prepare", daemon=True).start()
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
    shown = token is None
    token = token or new_token()
    try:
        app = build_server(session).streamable_http_app(streamable_http_path=MCP_PATH)
        guarded = BearerGuard(app, token=token, port=bound.port, paths=(MCP_PATH,), name="memvault mcp")
        serve(guarded, bound, until=stop, lifespan="on", graceful_seconds=SHUTDOWN_DRAIN_SECONDS,
              on_started=lambda: _announce(bound, token if shown else None))  # fmt: skip
    finally:
        bound.close()
        session.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    _say("stopped")


def _prepare(session: VaultSession, stop: threading.Event) -> None:
    session.prepare()
    for note in session.notes:
        _say(note)
    owner = None if session.attached is None else session.attached.owner
    if owner is not None:  # `memvault engine stop` asks the owner to go: this server then stops
        owner.stop_requested.wait()
        stop.set()


def _announce(bound, token: str | None) -> None:
    for note in bound.notes:
        _say(note)
    _say(f"serving MCP over streamable HTTP at http://127.0.0.1:{bound.port}{MCP_PATH}")
    if token is not None:  # printed once: the client's config holds it from now on
        _say(f"bearer token (send as 'Authorization: Bearer <token>'): {token}")
    else:
        _say("bearer token: the one in --token-file")


def _say(text: str) -> None:
    print(f"memvault mcp: {text}", file=sys.stderr, flush=True)


def addresses_for(host: str | None) -> tuple[str, ...]:
    """The addresses `--host` names: localhost (the default) is both 127.0.0.1 and ::1.
    Anything else raises NotLoopback, naming the three that work."""
    if host is None or host.lower() == "localhost":
        return LOOPBACK_ADDRESSES
    if host.strip("[]") in LOOPBACK_ADDRESSES:
        return (host.strip("[]"),)
    require_loopback(host)  # a loopback address but not one of ours falls through to the message below
    raise NotLoopback(f"{host[:80]!r}: memvault mcp --http listens on 127.0.0.1, ::1 or localhost only")
