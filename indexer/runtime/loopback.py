"""Listening on loopback only, behind a per-start token: what every memvault HTTP face shares.

The web pages (`cli/web/`), `memvault mcp --http` (`cli/mcp_http.py`) and the per-turn MemoryRecall
endpoint of a Python host (`indexer/runtime/turn_endpoint.py`) all serve through this module:

* `bind_loopback(port)`: the sockets are bound here, to 127.0.0.1 and, where the host has it,
  ::1, never from a host name, so no option or environment variable can put a face on another
  interface. An address that is not loopback is refused (`NotLoopback`). Port 0 asks the OS for
  a free port; ::1 then gets the same one (or is skipped, and the caller is told).
* `LoopbackPolicy`: the Host names (`127.0.0.1:<port>`, `localhost:<port>`, `[::1]:<port>`: a
  DNS-rebinding page that reaches the port under another name is refused), the same-origin
  Origins, and a constant-time token comparison. The web pages' `Guard` adds cookies on top.
* `BearerGuard`: the ASGI middleware for a machine face (MCP): the policy's Host check, any
  Origin header must be this server's own, and `Authorization: Bearer <token>` on every request.
* `serve(app, bound, ...)`: uvicorn on the bound sockets, until SIGINT/SIGTERM or an event.
* `LoopbackThread`: the same on a thread of its own, started and stopped by the caller (a turn).
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memvault.vault.errors import VaultError
from memvault.vault.limits import SHUTDOWN_DRAIN_SECONDS

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1")
MIN_TOKEN_CHARS = 16


class PortUnavailable(VaultError):
    code = "port_unavailable"


class NotLoopback(VaultError):
    code = "not_loopback"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """A token a face may use: at least 16 visible ASCII characters, no spaces."""
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"an access token must be at least {MIN_TOKEN_CHARS} characters")
    if not all("!" <= ch <= "~" for ch in token):
        raise ValueError("an access token must be visible ASCII characters without spaces")
    return token


# --- binding ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    sockets: tuple[socket.socket, ...]
    port: int
    notes: tuple[str, ...]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def bind_loopback(port: int, addresses: tuple[str, ...] = LOOPBACK_ADDRESSES) -> Bound:
    """Listening sockets on `addresses` (loopback ones only), all on one port; the first must bind."""
    for address in addresses:
        require_loopback(address)
    first, *rest = addresses
    family = socket.AF_INET6 if ":" in first else socket.AF_INET
    primary = _listen(family, first, port, required=True)
    actual = primary.getsockname()[1]
    sockets, notes = [primary], []
    for address in rest:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            sockets.append(_listen(family, address, actual, required=False))
        except OSError as exc:
            shown = f"[{address}]" if ":" in address else address
            notes.append(f"not listening on {shown}:{actual} ({exc.strerror or exc}); {first} only")
    return Bound(tuple(sockets), actual, tuple(notes))


def require_loopback(address: str) -> None:
    try:
        loopback = ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise NotLoopback(
            f"{address[:80]!r} is not a loopback address: memvault listens on 127.0.0.1 and ::1 only"
            " (put a reverse proxy with its own authentication in front to reach it from elsewhere)"
        )


def _listen(family: int, host: str, port: int, *, required: bool) -> socket.socket:
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
        if required:
            raise PortUnavailable(f"cannot listen on {host}:{port} ({exc.strerror or exc}): pick another --port, "
                                  "or 0 for any free one") from None  # fmt: skip
        raise
    return sock


# --- the checks ------------------------------------------------------------------------------


class LoopbackPolicy:
    """Who may talk to a face on 127.0.0.1/[::1]:`port`: its own Host names and Origins, and `token`."""

    def __init__(self, *, token: str, port: int) -> None:
        self.token = check_token(token)
        self.port = port
        self.hosts = {f"{name}:{port}".encode() for name in LOOPBACK_NAMES}
        self.origins = {f"http://{name}:{port}".encode() for name in LOOPBACK_NAMES}

    def host_ok(self, headers: dict) -> bool:
        return headers.get(b"host", b"").lower() in self.hosts

    def origin_ok(self, headers: dict) -> bool:
        """No Origin (not a browser), or this server's own."""
        origin = headers.get(b"origin")
        return origin is None or origin.lower() in self.origins

    def token_ok(self, candidate: str) -> bool:
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())

    def bearer_ok(self, headers: dict) -> bool:
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = auth.partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())


class BearerGuard:
    """ASGI middleware for a machine face: loopback Host, own Origin, `Authorization: Bearer`.

    Refusals are small JSON bodies `{"error": {"code", "message"}}` naming the fix; `paths`
    (when given) are the only ones served, anything else is 404 before the app sees it."""

    def __init__(self, app, *, token: str, port: int, paths: tuple[str, ...] = (), name: str = "memvault") -> None:
        self.app = app
        self.policy = LoopbackPolicy(token=token, port=port)
        self.paths = paths
        self.name = name

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            return  # no websockets
        headers = dict(scope.get("headers") or [])
        if not self.policy.host_ok(headers):
            await refuse(send, 400, "wrong_host",
                         f"{self.name} answers only on 127.0.0.1, localhost or [::1] with its own port")  # fmt: skip
            return
        if not self.policy.origin_ok(headers):
            await refuse(
                send, 403, "foreign_origin", "cross-origin request refused: web pages may not call this server"
            )
            return
        if not self.policy.bearer_ok(headers):
            await refuse(send, 401, "unauthorized",
                         f"send the access token {self.name} was started with as `Authorization: Bearer <token>`",
                         [(b"www-authenticate", b'Bearer realm="memvault"')])  # fmt: skip
            return
        if self.paths and scope.get("path") not in self.paths:
            await refuse(send, 404, "not_found", f"nothing here: the MCP endpoint is {self.paths[0]}")
            return
        await self.app(scope, receive, send)


MACHINE_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]


async def refuse(send, status: int, code: str, message: str, extra: list | None = None) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *MACHINE_HEADERS, *(extra or [])]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


# --- serving ---------------------------------------------------------------------------------


def serve(
    app,
    bound: Bound,
    *,
    on_started: Callable[[], None] | None = None,
    until: threading.Event | None = None,
    lifespan: str = "off",
    graceful_seconds: float | None = None,
) -> None:
    """Run uvicorn on the bound sockets until SIGINT/SIGTERM, or, given `until`, until it is set.

    With `until` (a face inside the vault's owner, or a turn's endpoint, on a thread of its own)
    no signal handler is touched: the caller sets the event when it stops."""
    server = _uvicorn(app, lifespan, graceful_seconds)
    if until is None:
        server.capture_signals = lambda: _stop_on_signals(server)
    else:
        server.capture_signals = contextlib.nullcontext
        threading.Thread(target=lambda: (until.wait(), setattr(server, "should_exit", True)), daemon=True,
                         name="memvault-loopback-stop").start()  # fmt: skip
    if on_started is not None:
        original = server.startup

        async def startup(sockets=None):
            await original(sockets=sockets)
            if server.started:  # not when the lifespan failed
                on_started()

        server.startup = startup
    server.run(sockets=list(bound.sockets))


def _uvicorn(app, lifespan: str, graceful_seconds: float | None):
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan=lifespan, server_header=False,
                            date_header=False, limit_concurrency=64, timeout_keep_alive=5,
                            timeout_graceful_shutdown=graceful_seconds)  # fmt: skip
    return uvicorn.Server(config)


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


class LoopbackThread:
    """`app` served on its own thread over `bound` until `stop()`; `start()` returns once it
    listens, or raises why it could not (the sockets are closed then)."""

    def __init__(self, app, bound: Bound, *, name: str, lifespan: str = "on", start_timeout: float = 30.0) -> None:
        self.bound = bound
        self.name = name
        self._app, self._lifespan, self._timeout = app, lifespan, start_timeout
        self._stop = threading.Event()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            serve(self._app, self.bound, on_started=self._started.set, until=self._stop, lifespan=self._lifespan,
                  graceful_seconds=SHUTDOWN_DRAIN_SECONDS)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - reported to the thread that started it
            self._error = exc
        finally:
            self.bound.close()
            self._started.set()  # wake a start() still waiting

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(self._timeout):
            self.stop()
            raise PortUnavailable(f"the loopback server did not start within {self._timeout:.0f} s")
        if self._error is not None or not self._thread.is_alive():
            self.stop()
            reason = self._error or "it stopped during start-up"
            raise PortUnavailable(f"the loopback server could not start ({type(reason).__name__}: {reason})"
                                  if isinstance(reason, BaseException)
                                  else f"the loopback server could not start: {reason}")  # fmt: skip

    def stop(self, timeout: float = SHUTDOWN_DRAIN_SECONDS) -> None:
        """Stop listening at once; a request in flight gets up to the spec's drain deadline."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self.bound.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()
