"""JSON over HTTP to a model server, with the standard library only.

`post_raw` is the one transport embedding and chat providers share (`post_json` parses its
answer): one bounded POST that never follows redirects, goes direct for loopback hosts, enforces
an overall deadline and a response size cap, and turns every failure into `ProviderUnavailable`
naming the server and the fix.
"""

from __future__ import annotations

import functools
import json
import re
import time
import urllib.error
from dataclasses import dataclass
from ipaddress import ip_address
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from memvault.vault.errors import ProviderUnavailable

if TYPE_CHECKING:
    import urllib.error
    import urllib.request

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_READ_CHUNK = 1024 * 1024
_EXCERPT_CHARS = 200


@dataclass(frozen=True)
class HttpTarget:
    """Who is being called, for error messages: what it is, which config key sets its URL, and
    how an operator starts it."""

    name: str  # "ollama embeddings (model nomic-embed-text:v1.5)"
    config_key: str  # "memory.embeddings.endpoint"
    start_hint: str  # "start Ollama (`ollama serve`)"
    not_found_hint: str  # what an HTTP 404 most likely means for this server


@functools.cache
def _no_redirect() -> type:
    """A redirect handler that follows nothing: a redirect would resend the body (and the API
    key) somewhere the operator did not name. (urllib is imported when a request is made: it
    pulls in email, ssl and http, tens of milliseconds of every CLI call that never calls out.)"""
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return NoRedirect


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _opener(url: str) -> urllib.request.OpenerDirector:
    import urllib.request

    if _is_loopback(urlsplit(url).hostname):
        # a local model server is never behind the operator's HTTP proxy
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), _no_redirect())
    return urllib.request.build_opener(_no_redirect())


def excerpt(raw: bytes) -> str:
    text = raw[: _EXCERPT_CHARS * 4].decode("utf-8", "replace")
    text = re.sub(r"\s+", " ", re.sub(r"[\x00-\x1f\x7f]", " ", text)).strip()
    return text[:_EXCERPT_CHARS]


def _status_fix(status: int, target: HttpTarget) -> str:
    if 300 <= status < 400:
        return f"redirects are not followed: set {target.config_key} to the final URL"
    if status in (401, 403):
        return "check the API key"
    if status == 404:
        return target.not_found_hint
    if status == 429:
        return "the server is rate limiting: retry later"
    if status >= 500:
        return "the server failed: check its log, and that the model loads"
    return f"check {target.config_key} and the model name"


def post_json(url: str, payload: Any, *, target: HttpTarget, **options: Any) -> Any:
    """`post_raw` (the same options: `timeout_s`, `headers`, `max_bytes`), its answer parsed as JSON."""
    raw = post_raw(url, payload, target=target, **options)
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise malformed(raw, exc, f"{target.name} at {url}", target) from None


def malformed(raw: bytes, exc: BaseException, where: str, target: HttpTarget) -> ProviderUnavailable:
    return ProviderUnavailable(
        f"{where}: answered malformed JSON ({exc}; starts {excerpt(raw)!r}): "
        f"check that {target.config_key} points at the right kind of server"
    )


def post_raw(
    url: str,
    payload: Any,
    *,
    target: HttpTarget,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    max_bytes: int | None = None,
) -> bytes:
    """POST `payload` as JSON and return the answer's bytes, read to its end within the deadline.

    The whole exchange must finish within about `timeout_s` (each socket wait is bounded by
    the time left, so a server that trickles bytes cannot hold a caller much longer). A streamed
    answer (server-sent events, JSON lines) is read as it arrives; when the deadline
    passes the connection is closed, which is what makes a streaming model server stop generating.
    """
    import http.client
    import urllib.request

    limit = MAX_RESPONSE_BYTES if max_bytes is None else max_bytes
    where = f"{target.name} at {url}"
    body = json.dumps(payload, ensure_ascii=True).encode("ascii")  # \u-escapes: any str is safe
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Content-Type", "application/json")
    request.add_header("Accept", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    deadline = time.monotonic() + timeout_s
    try:
        with _opener(url).open(request, timeout=timeout_s) as response:
            raw = _read_bounded(response, limit, deadline, where, target)
    except ProviderUnavailable:
        raise
    except urllib.error.HTTPError as exc:
        raise _http_error(exc, where, target) from None
    except urllib.error.URLError as exc:
        raise _connect_error(exc.reason, where, target, timeout_s) from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise _connect_error(exc, where, target, timeout_s) from None
    return raw


def _read_bounded(response: Any, limit: int, deadline: float, where: str, target: HttpTarget) -> bytes:
    too_big = ProviderUnavailable(
        f"{where}: the answer is larger than {limit // (1024 * 1024) or limit} "
        f"{'MiB' if limit >= 1024 * 1024 else 'bytes'}: check that {target.config_key} "
        "points at the right server, or send fewer texts per request"
    )
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_big
    parts: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed while reading the answer")
        _limit_socket_wait(response, remaining)
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise too_big
        parts.append(chunk)


def _limit_socket_wait(response: Any, seconds: float) -> None:
    # http.client offers no public handle on the socket; without it each wait keeps timeout_s
    sock = getattr(getattr(getattr(response, "fp", None), "raw", None), "_sock", None)
    if sock is not None:
        sock.settimeout(max(seconds, 0.001))


def _http_error(exc: urllib.error.HTTPError, where: str, target: HttpTarget) -> ProviderUnavailable:
    import http.client

    try:
        raw = exc.read(_EXCERPT_CHARS * 4) if exc.fp is not None else b""
    except (OSError, http.client.HTTPException):
        raw = b""
    finally:
        exc.close()
    detail = f": {excerpt(raw)!r}" if raw else ""
    error = ProviderUnavailable(f"{where}: HTTP {exc.code} {exc.reason}{detail}: {_status_fix(exc.code, target)}")
    error.http_status = exc.code  # a chat client tells "this server rejects the schema" (400) from an outage
    return error


def _connect_error(reason: Any, where: str, target: HttpTarget, timeout_s: float) -> ProviderUnavailable:
    if isinstance(reason, ConnectionRefusedError):
        return ProviderUnavailable(f"{where}: connection refused: {target.start_hint}, or fix {target.config_key}")
    if isinstance(reason, TimeoutError):
        return ProviderUnavailable(
            f"{where}: no complete answer within {timeout_s:g} s: check that the server is "
            "healthy and the model is loaded, or raise the timeout"
        )
    return ProviderUnavailable(
        f"{where}: cannot complete the request ({type(reason).__name__}: {reason}): "
        f"check {target.config_key} and that the server is running"
    )


# ---------------------------------------------------------------------------------------------
