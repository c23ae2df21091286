"""The owner's end of the channel: a Unix socket (0600, in a 0700 folder) answering one JSON line
per request. Each connection gets its own thread, so `hello` is answered at once even while a
long request runs; what a request does is the owner's business (`Owner.handle`).

A connection carries requests one after another (a client keeps it for its next call, as HTTP
keep-alive does: no connect, accept and thread per request), and news (`protocol.news`: a
request carried out and not answered, such as a client's `admitted`). It is closed when the client
closes it, after `IDLE_SECONDS` without a request, and after a line that is not a request (its
stream can no longer be trusted to start the next line where this one ended).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

from memvault.indexer.engine import protocol
from memvault.indexer.engine.address import ensure_socket_dir

Handler = Callable[[dict], dict]
#: how long a connection may wait for its next request line (or the rest of one) before it is closed
IDLE_SECONDS = 30.0


def _serve_connection(connection: socket.socket, handle_message: Handler) -> None:
    with connection, connection.makefile("rb") as reader:
        connection.settimeout(IDLE_SECONDS)
        while _serve_one(connection, reader, handle_message):
            pass


def _serve_one(connection: socket.socket, reader, handle_message: Handler) -> bool:
    """Answer the next request line; False once the connection is done."""
    try:
        line = reader.readline(protocol.MAX_MESSAGE_BYTES + 1)
    except (TimeoutError, OSError):
        return False  # idle too long, or a client that never finishes its line: dropped, not waited for
    if not line:
        return False
    whole = line.endswith(b"\n")
    try:
        message = protocol.decode(line.rstrip(b"\n"))
    except protocol.ProtocolError as exc:
        response, whole = protocol.failure(exc), False
    else:
        response = handle_message(message)
        if protocol.is_news(message):
            return whole  # carried out; its sender reads no answer
    try:
        data = protocol.encode(response)
    except protocol.ProtocolError as exc:
        data = protocol.encode(protocol.failure(exc))
    try:
        connection.sendall(data)
    except OSError:
        return False  # the client went away; its request was still carried out
    return whole


class ChannelServer:
    """Listens on `path` until `close()`. The socket is bound under a temporary name, made 0600 and
    then renamed into place, so it is never reachable with a wider mode."""

    def __init__(self, path: Path, handle_message: Handler):
        self.path = Path(path)
        self._handle = handle_message
        self._listener: socket.socket | None = None
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._open: set[socket.socket] = set()  # connections kept for their next request
        self._open_lock = threading.Lock()
        self.inode: int | None = None

    def start(self) -> None:
        ensure_socket_dir()
        self.path.unlink(missing_ok=True)  # a crashed owner's socket: the caller made sure nobody answers it
        temporary = self.path.with_name(f".{self.path.stem}.{os.getpid()}.tmp")
        temporary.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(os.fspath(temporary))
            os.chmod(temporary, 0o600)
            listener.listen(64)
            os.rename(temporary, self.path)
        except BaseException:
            listener.close()
            temporary.unlink(missing_ok=True)
            raise
        self._listener = listener
        self.inode = os.lstat(self.path).st_ino
        self._thread = threading.Thread(target=self._accept_loop, name="memvault-engine-channel", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        """Blocks in accept (no polling); `close` unblocks it by shutting the listener down."""
        while not self._closing.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                if self._closing.is_set():
                    return
                continue
            with self._open_lock:
                if self._closing.is_set():
                    connection.close()
                    return
                self._open.add(connection)
            threading.Thread(
                target=self._serve, args=(connection,), name="memvault-engine-connection", daemon=True
            ).start()

    def _serve(self, connection: socket.socket) -> None:
        try:
            _serve_connection(connection, self._handle)
        finally:
            with self._open_lock:
                self._open.discard(connection)

    def intact(self) -> bool:
        """True while the socket file at `path` is still the one this server listens on."""
        try:
            return os.lstat(self.path).st_ino == self.inode
        except OSError:
            return False

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is None:
            return
        self._closing.set()
        if self.intact():  # never remove a socket another owner put there after ours was deleted
            self.path.unlink(missing_ok=True)
        try:
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
        if self._thread is not None:
            self._thread.join(10)
        with self._open_lock:
            kept = list(self._open)
        for connection in kept:  # no next request is read; one in flight still sends its answer
            try:
                connection.shutdown(socket.SHUT_RD)
            except OSError:
                pass
