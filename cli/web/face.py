"""The web pages as a face of the vault's owner: `memvault serve --face web`.

The owner runs `web_face(owner, stop)` on a thread of its own: the pages read through the
owner's own store (no second process, no client hop), listen on loopback only, and stop when
the owner stops. `memvault serve --face web --web-port N` picks the port. The URL with its
per-start token is printed on stdout, as `memvault web` does.
"""

from __future__ import annotations

import os
import threading

import click

from memvault.cli.foreground_owner import register_face


def web_face(owner, stop: threading.Event, options: dict) -> None:
    from memvault.cli.web.app import build_app
    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.security import new_token
    from memvault.cli.web.server import bind_loopback, serve

    bound = bind_loopback(options.get("web_port", 8765))
    token = new_token()
    app = build_app(VaultReader(owner.store, env=dict(os.environ)), token=token, port=bound.port)
    url = f"http://127.0.0.1:{bound.port}/?token={token}"

    def started() -> None:
        click.echo(f"memvault serve: web pages at {url}")

    try:
        serve(app, bound, on_started=started, until=stop)
    finally:
        bound.close()


register_face("web", web_face)
