"""The thin client of a vault's owner. Standard library only (plus vault.errors), so a CLI call
that finds an owner never imports tantivy, hnswlib, wordllama, numpy or the MCP SDK.

`find_owner(root)` tells three cases apart, as dmypy and watchman do:

* no socket file, or nobody listening on it (a crashed owner's leftover): None. The caller
  works in-process; the next owner removes the stale socket.
* an owner answers `hello`: an `EngineClient` for it.
* something is connected but does not answer: `EngineStuck`, never a silent second writer.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

from memvault.indexer.engine import protocol
from memvault.indexer.engine.address import socket_path
from memvault.indexer.engine.protocol import EngineStuck, ProtocolError

#: a live owner answers hello from a thread of its own, whatever else it is doing
PROBE_TIMEOUT_SECONDS = 10.0
#: the longest one request may take (a strict health of a large vault, a rebuild's wait for the lock)
REQUEST_TIMEOUT_SECONDS = 300.0
#: how long `tell` waits for the owner's socket to take a request (its backlog full: a stuck owner)
TELL_TIMEOUT_SECONDS = 1.0
_STOP_HINT = "`memvault engine stop --force`"
#: idle connections a client keeps for its next calls (one per thread calling at the same moment)
_KEPT_CONNECTIONS = 8


class EngineClient:
    """Requests to one owner: each call is one request line and one response line, on a
    connection kept for the next call (thread-safe: a call takes an idle connection or opens
    one). A kept connection the owner closed meanwhile (idle too long, or stopped) is noticed
    before use, or by its first read, and the call goes once more on a new connection: the
    owner closes a connection only before it reads a request, or when it dies (then nothing
    answers the new connection either)."""

    def __init__(self, path: Path, hello: dict):
        self.path = path
        self.hello = hello  # the owner's pid, start time, vault, protocol, version
        self._idle: list[socket.socket] = []
        self._idle_lock = threading.Lock()
        self._idle_pid = os.getpid()  # a forked child never shares its parent's connections

    @property
    def pid(self) -> int | None:
        return self.hello.get("pid")

    @property
    def is_this_process(self) -> bool:
        return self.pid == os.getpid()

    def call(self, op: str, args: dict | None = None, *, timeout: float = REQUEST_TIMEOUT_SECONDS) -> object:
        """Send one request; return its result or raise the owner's error as the same class."""
        try:
            response = self._exchange(protocol.encode(protocol.request(op, args)), timeout)
        except (ConnectionRefusedError, FileNotFoundError, BrokenPipeError, ConnectionResetError) as exc:
            raise EngineStuck(
                f"the engine (pid {self.pid}) went away during {op!r} ({exc.__class__.__name__}): "
                "retry; if it keeps failing run `memvault engine status`"
            ) from None
        except TimeoutError:
            raise EngineStuck(
                f"the engine (pid {self.pid}) did not answer {op!r} within {timeout:g} s: it is stuck. "
                f"Fix: {_STOP_HINT}"
            ) from None
        if response.get("ok") is True:
            return response.get("result")
        protocol.raise_error(response.get("error"))
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Close the kept connections (a later call opens a new one)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def _exchange(self, data: bytes, timeout: float, *, answered: bool = True) -> dict | None:
        sock, kept = self._take(timeout)
        try:
            try:
                response = _send(sock, data, timeout, answered)
            except (BrokenPipeError, ConnectionResetError):
                if not kept:
                    raise
                sock.close()  # closed by the owner before it read the request: once more, afresh
                sock, kept = _connect(self.path, timeout), False
                response = _send(sock, data, timeout, answered)
        except BaseException:
            sock.close()  # a timeout or an error mid-answer: the stream is out of step
            raise
        self._give_back(sock)
        return response

    def _take(self, timeout: float) -> tuple[socket.socket, bool]:
        """An idle kept connection the owner has not closed, or a new one; and whether it was kept."""
        with self._idle_lock:
            if self._idle_pid != os.getpid():
                self._idle, self._idle_pid = [], os.getpid()
            while self._idle:
                sock = self._idle.pop()
                if _still_open(sock):
                    return sock, True
                sock.close()
        return _connect(self.path, min(timeout, PROBE_TIMEOUT_SECONDS)), False

    def _give_back(self, sock: socket.socket) -> None:
        with self._idle_lock:
            if self._idle_pid == os.getpid() and len(self._idle) < _KEPT_CONNECTIONS:
                self._idle.append(sock)
                return
        sock.close()

    def tell(self, op: str, args: dict | None = None, *, timeout: float = TELL_TIMEOUT_SECONDS) -> None:
        """Send one request and do not wait for its answer: it is in the owner's socket once this
        returns, and the owner handles it when it reads it. For news the owner acts on by itself
        (`admitted`), so a client never queues behind a busy owner. On a kept connection when the
        owner takes news there (`protocol.news`), else on a connection of its own whose answer
        goes unread. Raises EngineStuck when nothing listens or the socket does not take it."""
        try:
            if self.hello.get("unanswered") is True:
                self._exchange(protocol.encode(protocol.news(op, args)), timeout, answered=False)
                return
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(timeout)
                sock.connect(os.fspath(self.path))
                sock.sendall(protocol.encode(protocol.request(op, args)))
                sock.shutdown(socket.SHUT_WR)
        except (ConnectionRefusedError, FileNotFoundError, BrokenPipeError, ConnectionResetError, TimeoutError) as exc:
            raise EngineStuck(
                f"the engine (pid {self.pid}) did not take {op!r} ({exc.__class__.__name__}): "
                "retry; if it keeps failing run `memvault engine status`"
            ) from None


def find_owner(vault_root: Path, *, timeout: float = PROBE_TIMEOUT_SECONDS) -> EngineClient | None:
    """The vault's live owner, or None when none listens. Raises EngineStuck for a silent one."""
    path = socket_path(vault_root)
    try:
        hello = _exchange(path, protocol.request("hello"), timeout)
    except (FileNotFoundError, ConnectionRefusedError):
        return None  # no owner, or a crashed owner's socket that nobody listens on
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        raise EngineStuck(f"an engine listens on {path} but does not answer: it is stuck. Fix: {_STOP_HINT}") from None
    if not hello.get("ok"):
        protocol.raise_error(hello.get("error"))
    result = hello.get("result")
    if not isinstance(result, dict):
        raise ProtocolError(f"the engine on {path} answered hello without its identity")
    return EngineClient(path, result)


def _exchange(path: Path, message: dict, timeout: float) -> dict:
    """One request on a connection of its own (a probe: `hello`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        sock.sendall(protocol.encode(message))
        sock.shutdown(socket.SHUT_WR)
        return protocol.decode(_read_line(sock))


def _connect(path: Path, timeout: float) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
    except BaseException:
        sock.close()
        raise
    return sock


def _send(sock: socket.socket, data: bytes, timeout: float, answered: bool) -> dict | None:
    """Send one request line; its answer (None for news, which has none)."""
    sock.settimeout(timeout)
    sock.sendall(data)
    return protocol.decode(_read_line(sock)) if answered else None


def _still_open(sock: socket.socket) -> bool:
    """False when the owner closed this idle connection (its end reads as closed, or sent anything)."""
    try:
        sock.settimeout(0)  # a look, never a wait (the call sets its own timeout again)
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True  # nothing to read: open, and quiet as an idle connection is
    except OSError:
        return False
    return False


def _read_line(sock: socket.socket) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > protocol.MAX_MESSAGE_BYTES + 1:
            raise ProtocolError(f"the engine's answer exceeds the {protocol.MAX_MESSAGE_BYTES}-byte limit")
        if chunk.endswith(b"\n"):
            break
    data = b"".join(chunks)
    if not data:
        raise ConnectionResetError("the engine closed the connection without answering")
    return data.rstrip(b"\n")
