"""A scripted HTTP server on 127.0.0.1 for provider tests (embeddings, and later chat models).

    with LoopbackServer() as server:
        server.route("/api/embed", lambda req: (200, {"embeddings": [[1.0, 0.0]]}))
        server.route("/v1/embeddings", status=500, body="model crashed")
        server.route("/slow", delay=2.0, json={"ok": True})
        ... call server.url + "/api/embed" ...
        assert server.requests[0].json["model"] == "nomic-embed-text:v1.5"

A handler gets the request's parsed JSON (None when the body is not JSON) and returns
`(status, body)`, `(status, body, headers)` or a `Reply`. A body is bytes, str, or any other
value, which is sent as JSON (`float("nan")` is written as `NaN`, as a sloppy server would).
A `Reply` can also wait before answering (`delay`) or stream its body in `chunks` (NDJSON for
Ollama's streaming chat, or a slow trickle). Unknown paths answer 404. Every request is recorded.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


@dataclass
class Reply:
    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before the status line: simulates a hung server
    chunks: Sequence[Any] | None = None  # sent one by one, flushed, without Content-Length
    chunk_delay: float = 0.0  # seconds between chunks


Handler = Callable[[Any], Any]


def sequence(*replies: Any) -> Handler:
    """A handler answering with each reply in turn, then repeating the last one (for retries)."""
    queue = list(replies)
    lock = threading.Lock()

    def handler(_request_json: Any) -> Any:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return handler


def _encode(body: Any) -> tuple[bytes, str]:
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode("utf-8"), "text/plain; charset=utf-8"
    return json.dumps(body).encode("utf-8"), "application/json"


def _as_reply(result: Any) -> Reply:
    if isinstance(result, Reply):
        return result
    if isinstance(result, tuple) and len(result) in (2, 3):
        return Reply(result[0], result[1], dict(result[2]) if len(result) == 3 else {})
    raise TypeError(f"a loopback handler must return (status, body[, headers]) or Reply, not {result!r}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, owner: LoopbackServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up mid-answer (the timeout tests) is expected, not news


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self._serve()

    do_GET = do_PUT = do_DELETE = do_PATCH = do_POST

    def _serve(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request = RecordedRequest(
            self.command, parts.path, parts.query, {k.lower(): v for k, v in self.headers.items()}, body
        )
        owner._record(request)
        reply = owner._reply_for(request)
        if reply.delay and owner._stopping.wait(reply.delay):
            return
        try:
            self._send(reply)
        except OSError:
            pass  # the client gave up (timeout tests)

    def _send(self, reply: Reply) -> None:
        self.send_response(reply.status)
        if reply.chunks is None:
            payload, content_type = _encode(reply.body)
            self._headers(reply, content_type, len(payload))
            self.wfile.write(payload)
            return
        self._headers(reply, "application/x-ndjson", None)
        for index, chunk in enumerate(reply.chunks):
            if index and reply.chunk_delay and self.server.owner._stopping.wait(reply.chunk_delay):
                return
            self.wfile.write(_encode(chunk)[0])
            self.wfile.flush()

    def _headers(self, reply: Reply, content_type: str, length: int | None) -> None:
        headers = {"Content-Type": content_type, **reply.headers}
        if length is not None:
            headers.setdefault("Content-Length", str(length))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1, port chosen by the OS; use as a context manager."""

    def __init__(self, routes: dict[str, Handler | Reply] | None = None) -> None:
        self._routes: dict[str, Handler | Reply] = dict(routes or {})
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._requests: list[RecordedRequest] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -----------------------------------------------------------------------------
    def route(
        self,
        path: str,
        handler: Handler | None = None,
        *,
        status: int = 200,
        body: Any = b"",
        json: Any = None,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Answer `path` with `handler(request_json)`, or with a fixed reply built from the rest."""
        if handler is None:
            handler_or_reply: Handler | Reply = Reply(
                status, body if json is None else json, dict(headers or {}), delay
            )
        elif delay:
            inner = handler
            handler_or_reply = lambda request_json: _delayed(_as_reply(inner(request_json)), delay)  # noqa: E731
        else:
            handler_or_reply = handler
        with self._lock:
            self._routes[path] = handler_or_reply

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        return [request for request in self.requests if request.path == path]

    # -- lifecycle -----------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the loopback server is not running")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LoopbackServer:
        self._stopping.clear()
        self._server = _Server(self)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes delayed handlers so they end at once
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- called from request threads -------------------------------------------------------------
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _reply_for(self, request: RecordedRequest) -> Reply:
        with self._lock:
            route = self._routes.get(request.path)
        if route is None:
            return Reply(404, {"error": f"no route for {request.path}"})
        if isinstance(route, Reply):
            return route
        try:
            return _as_reply(route(request.json))
        except Exception as exc:  # a broken test handler shows up as a 500, not a hang
            return Reply(500, f"loopback handler failed: {type(exc).__name__}: {exc}")


def _delayed(reply: Reply, delay: float) -> Reply:
    return Reply(reply.status, reply.body, reply.headers, delay, reply.chunks, reply.chunk_delay)


def closed_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def ndjson(objects: Iterable[Any]) -> list[bytes]:
    """Chunks for a streaming reply: one JSON object per line, as Ollama streams chat."""
    return [json.dumps(obj).encode("utf-8") + b"\n" for obj in objects]
