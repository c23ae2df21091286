"""The vault's owner run in the foreground of a command: `serve` and `watch` both call
`run_owner` (docs/engine.md). Extra faces of the owner (the web pages) register here with
`register_face` and run on their own threads inside `serve`.

`MEMVAULT_TEST_CRASH_AT=<boundary>[:<n>]` (read here, at the entry layer, and nowhere else)
SIGKILLs the process at the n-th time (default 1st) the library passes the named boundary:
`apply.committed`, `rebuild.built`, `rebuild.swapped`. Crash tests use it; nobody else should.
"""

import os
import signal
import sys
import threading
from collections.abc import Callable

import click

from memvault.cli.app import open_store

CRASH_ENV = "MEMVAULT_TEST_CRASH_AT"


def crash_hook_from_env(env=os.environ):
    """A boundary hook that kills this process with SIGKILL at the named point, or None."""
    spec = env.get(CRASH_ENV)
    if not spec:
        return None
    name, _, nth = spec.partition(":")
    target = int(nth) if nth.isdigit() else 1
    seen = {"count": 0}

    def hook(boundary: str) -> None:
        if boundary == name:
            seen["count"] += 1
            if seen["count"] == target:
                sys.stderr.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


#: name -> face(owner, stop_event, options); `serve` runs each on its own thread in the owner process
FACES: dict[str, Callable] = {}


def register_face(name: str, face: Callable) -> None:
    """Add a face that `memvault serve` runs inside the owner (e.g. the web pages)."""
    FACES[name] = face


def run_owner(
    ctx: click.Context,
    role: str,
    *,
    report=None,
    ready=None,
    debounce: float = 0.2,
    compact_after: float = 60.0,
    consolidate_every: float | None = 3600.0,
    faces=(),
    face_options: dict | None = None,
) -> None:
    """Own the vault in the foreground until Ctrl-C, SIGTERM or `memvault engine stop`."""
    from memvault.indexer.engine.owner import Owner
    from memvault.indexer.maintenance.collector import settle_for_a_resident_owner
    from memvault.indexer.maintenance.watch import Watcher

    store = open_store(ctx, sync=False)
    if not os.access(store.layout.root, os.W_OK):
        raise click.ClickException(f"{store.layout.root} is read-only: memvault {role} needs to write the index")
    hook = crash_hook_from_env()
    owner = Owner(
        store, role=role, log=lambda message: click.echo(f"memvault {role}: {message}", err=True), crash_hook=hook
    )
    try:
        owner.start()
    except BaseException:
        store.close()
        raise
    for name in faces:
        face = FACES[name]
        owner.add_face(
            lambda owner_, stop_, face=face: face(owner_, stop_, face_options or {}), name=f"memvault-face-{name}"
        )
    settle_for_a_resident_owner()
    on_ready = None if ready is None else (lambda: ready(store.layout.root))
    watcher = Watcher(
        store,
        debounce=debounce,
        compact_after=compact_after,
        on_batch=report,
        on_ready=on_ready,
        hook=hook,
        consolidate_every=consolidate_every,
    )
    stop = threading.Event()

    def request_stop(*_args) -> None:
        stop.set()
        watcher.queue.wake()

    threading.Thread(
        target=lambda: (owner.stop_requested.wait(), request_stop()), daemon=True, name="memvault-stop-request"
    ).start()
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        watcher.run(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        owner.stop()
        store.close()
