"""Serving the app with uvicorn on loopback only: 127.0.0.1 and, where the host has it, ::1.

The sockets are bound here, never from a host name, so no option or environment variable can
put the pages on another interface. Port 0 asks the OS for a free port; ::1 then gets the same
one (or is skipped, and the caller is told, when it is taken or IPv6 is off).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memvault.vault.errors import VaultError


class PortUnavailable(VaultError):
    code = "port_unavailable"


@dataclass(frozen=True)
class Bound:
    sockets: tuple[socket.socket, ...]
    port: int
    notes: tuple[str, ...]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def bind_loopback(port: int) -> Bound:
    v4 = _listen(socket.AF_INET, "127.0.0.1", port)
    actual = v4.getsockname()[1]
    notes: list[str] = []
    try:
        v6 = _listen(socket.AF_INET6, "::1", actual)
    except OSError as exc:
        notes.append(f"not listening on [::1]:{actual} ({exc.strerror or exc}); 127.0.0.1 only")
        return Bound((v4,), actual, tuple(notes))
    return Bound((v4, v6), actual, tuple(notes))


def _listen(family: int, host: str, port: int) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # uvicorn serving pre-bound sockets does not set TCP_NODELAY on what it accepts (asyncio does
        # so only for sockets it knows are TCP); accepted sockets inherit it from the listener, and
        # without it every answer written in two parts waits ~40 ms for a delayed ACK
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        if family == socket.AF_INET:
            raise PortUnavailable(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick another --port, "
                                  "or 0 for any free one") from None  # fmt: skip
        raise
    return sock


def serve(app, bound: Bound, *, on_started: Callable[[], None] | None = None,
          until: threading.Event | None = None) -> None:  # fmt: skip
    """Run uvicorn on the bound sockets until SIGINT/SIGTERM, or, given `until`, until it is set.

    With `until` (a face inside the vault's owner, on a thread of its own) no signal handler is
    touched: the owner has its own, and sets the event when it stops."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", server_header=False,
                            date_header=False, limit_concurrency=64, timeout_keep_alive=5)  # fmt: skip
    server = uvicorn.Server(config)
    if until is None:
        server.capture_signals = lambda: _stop_on_signals(server)
    else:
        server.capture_signals = contextlib.nullcontext
        threading.Thread(target=lambda: (until.wait(), setattr(server, "should_exit", True)), daemon=True,
                         name="memvault-web-stop").start()  # fmt: skip
    if on_started is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets=sockets)
            on_started()

        server.startup = startup
    server.run(sockets=list(bound.sockets))


@contextlib.contextmanager
def _stop_on_signals(server) -> Iterator[None]:
    """SIGINT/SIGTERM end the server gracefully and return to the caller.

    uvicorn's own handling re-raises the signal once it has shut down, which kills the process
    before the caller's cleanup runs (draining the intake, releasing the fence, closing the store).
    """
    previous = {sig: signal.signal(sig, server.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
