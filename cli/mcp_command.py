"""`memvault mcp`: the command that starts the MCP server, over stdio (`cli/mcp_server.py`) or,
with --http, over streamable HTTP on loopback (`cli/mcp_http.py`)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from memvault.cli import mcp_http
from memvault.cli.app import cli
from memvault.cli.mcp_server import serve
from memvault.vault.errors import VaultError


@cli.command("mcp")
@click.option(
    "--http",
    "http",
    is_flag=True,
    help="Serve streamable HTTP on loopback (for hosts that connect by URL) instead of stdio.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help=f"With --http: the port (default {mcp_http.DEFAULT_PORT}; 0 picks a free one).",
)
@click.option(
    "--host",
    "host",
    default=None,
    metavar="ADDRESS",
    help="With --http: 127.0.0.1, ::1 or localhost (the default: both). Nothing else is accepted.",
)
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --http: read the bearer token (16+ visible characters) from this file instead of "
                   "making one.")  # fmt: skip
@click.pass_context
def mcp_command(ctx: click.Context, http: bool, port: int | None, host: str | None, token_file: Path | None) -> None:
    """Serve the vault to an MCP client over stdio: memory tools, the Wake snapshot, the protocol.

    Launched by the client, not by hand: register `memvault mcp` (with --vault PATH or
    MEMVAULT_MEMORY_PATH) in the client's MCP server config. Which tools are offered follows the
    vault's memory.recallTool, memory.rememberTool, memory.runtime.writeEnabled and
    tools.allowedTools / deniedTools. A host names each agent turn in a request's
    _meta["memvault/turnId"] (see docs/mcp.md).

    With --http the same server runs by hand and listens on http://127.0.0.1:PORT/mcp (loopback
    only): each request needs the header `Authorization: Bearer TOKEN`, with the token printed once
    on stderr at start (or the one in --token-file). Ctrl-C or SIGTERM stops it.
    """
    if not http:
        given = [name for name, value in (("--port", port), ("--host", host), ("--token-file", token_file)) if value]
        if given or port == 0:
            raise click.UsageError(f"{', '.join(given) or '--port'} needs --http: stdio has no port or token")
        serve(ctx.obj["vault_path"], dict(os.environ), Path.cwd())
        return
    try:
        addresses = mcp_http.addresses_for(host)
    except VaultError as exc:
        raise click.BadParameter(str(exc), param_hint="--host") from None
    try:
        token = None if token_file is None else mcp_http.read_token_file(token_file)
    except mcp_http.TokenFileProblem as exc:
        raise click.BadParameter(str(exc), param_hint="--token-file") from None
    port = mcp_http.DEFAULT_PORT if port is None else port
    mcp_http.serve_http(ctx.obj["vault_path"], dict(os.environ), Path.cwd(), addresses=addresses, port=port,
                        token=token)  # fmt: skip
