"""`memvault web`: open the vault, serve the web pages on loopback, print the URL with its token.

Thin: the pages are `build_app(VaultReader(store))`; this command only opens the store (a client
of the vault's owner while one runs), takes the intake when no other process owns the vault (so
admitted turns are projected while the pages are open, as under `watch`), binds loopback
sockets and runs uvicorn.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from memvault.cli.app import cli, open_store
from memvault.vault.errors import VaultError


@cli.command("web")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8765,
    show_default=True,
    help="Port on 127.0.0.1 and [::1] (0: any free port). The pages never listen elsewhere.",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the URL with its access token to this file (mode 0600), for scripts.",
)
@click.pass_context
def web_command(ctx: click.Context, port: int, token_file: Path | None) -> None:
    """Serve the Recall, Entities, Content and Status pages on loopback until interrupted.

    Prints the URL with a fresh access token (a new one every start); open it in a browser. Reads
    only: nothing on the pages changes the vault. While no other process owns the vault, this one
    drains the durable intake too.
    """
    from memvault.cli.web.app import build_app
    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.security import new_token
    from memvault.cli.web.server import bind_loopback, serve
    from memvault.vault.fsio import atomic_write

    store = open_store(ctx, engine=True)  # a client of the live owner, if one runs (docs/engine.md)
    try:
        try:
            store.start_intake()
        except VaultError as exc:  # another process owns the vault and drains it; the pages still read
            click.echo(f"memvault web: reading through the vault's owner: {exc}", err=True)
        bound = bind_loopback(port)
        token = new_token()
        url = f"http://127.0.0.1:{bound.port}/?token={token}"
        app = build_app(VaultReader(store, env=dict(os.environ)), token=token, port=bound.port)
        for note in bound.notes:
            click.echo(f"memvault web: {note}", err=True)

        def started() -> None:
            if token_file is not None:
                atomic_write(token_file, (url + "\n").encode(), mode=0o600)
            click.echo(f"memvault web: serving {store.layout.root} at {url}")
            click.echo("memvault web: Ctrl-C to stop", err=True)
            sys.stdout.flush()

        try:
            serve(app, bound, on_started=started)
        finally:
            bound.close()
    finally:
        store.close()
    click.echo("memvault web: stopped", err=True)
