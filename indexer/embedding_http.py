"""Embeddings over HTTP (Ollama, LM Studio, OpenAI-compatible) with the standard library only.

`post_json` is the shared transport (chat providers use it too): one bounded POST that never
follows redirects, goes direct for loopback hosts, enforces an overall deadline and a response
size cap, and turns every failure into `ProviderUnavailable` naming the server and the fix.
"""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from ipaddress import ip_address
from typing import Any, Sequence
from urllib.parse import urlsplit

import numpy as np

from indexer.embeddings import OLLAMA, EmbeddingIdentity, clean_text, normalize_rows
from vault.errors import ProviderUnavailable

MAX_RESPONSE_BYTES = 64 * 1024 * 1024
BATCH_SIZE = 32
_READ_CHUNK = 1024 * 1024
_EXCERPT_CHARS = 200
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class HttpTarget:
    """Who is being called, for error messages: what it is, which config key sets its URL, and
    how an operator starts it."""

    name: str  # "ollama embeddings (model nomic-embed-text:v1.5)"
    config_key: str  # "memory.embeddings.endpoint"
    start_hint: str  # "start Ollama (`ollama serve`)"
    not_found_hint: str  # what an HTTP 404 most likely means for this server


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # a redirect would resend the body (and the API key) somewhere the operator did not name
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


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
    if _is_loopback(urlsplit(url).hostname):
        # a local model server is never behind the operator's HTTP proxy
        return urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)
    return urllib.request.build_opener(_NoRedirect)


def _excerpt(raw: bytes) -> str:
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


def post_json(
    url: str,
    payload: Any,
    *,
    target: HttpTarget,
    timeout_s: float,
    headers: dict[str, str] | None = None,
    max_bytes: int | None = None,
) -> Any:
    """POST `payload` as JSON and return the parsed JSON answer.

    The whole exchange must finish within about `timeout_s` (each socket wait is bounded by
    the time left, so a server that trickles bytes cannot hold a caller much longer).
    """
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
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProviderUnavailable(
            f"{where}: answered malformed JSON ({exc}; starts {_excerpt(raw)!r}): "
            f"check that {target.config_key} points at the right kind of server"
        ) from None


def _read_bounded(
    response: Any, limit: int, deadline: float, where: str, target: HttpTarget
) -> bytes:
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
    try:
        raw = exc.read(_EXCERPT_CHARS * 4) if exc.fp is not None else b""
    except (OSError, http.client.HTTPException):
        raw = b""
    finally:
        exc.close()
    detail = f": {_excerpt(raw)!r}" if raw else ""
    return ProviderUnavailable(
        f"{where}: HTTP {exc.code} {exc.reason}{detail}: {_status_fix(exc.code, target)}"
    )


def _connect_error(reason: Any, where: str, target: HttpTarget, timeout_s: float) -> ProviderUnavailable:
    if isinstance(reason, ConnectionRefusedError):
        return ProviderUnavailable(
            f"{where}: connection refused: {target.start_hint}, or fix {target.config_key}"
        )
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
# embeddings on top of the transport

# Models trained with task prefixes; without them, query/document similarity is much worse.
_TASK_PREFIXES = (("nomic-embed-text", "search_query: ", "search_document: "),)


def task_prefixes(model: str) -> tuple[str, str]:
    """(query prefix, document prefix) the model was trained with; empty for most models."""
    lowered = model.lower()
    for marker, query_prefix, document_prefix in _TASK_PREFIXES:
        if marker in lowered:
            return query_prefix, document_prefix
    return "", ""


class HttpEmbeddingProvider:
    """Ollama (`POST {endpoint}/api/embed`) or OpenAI-style (`POST {endpoint}/embeddings`)."""

    def __init__(
        self,
        identity: EmbeddingIdentity,
        endpoint: str,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self.identity = identity
        self.endpoint = endpoint.rstrip("/")
        self.timeout_s = timeout_s
        self.batch_size = max(1, min(batch_size, BATCH_SIZE))
        self._api_key = api_key
        self._ollama = identity.provider == OLLAMA
        self.url = self.endpoint + ("/api/embed" if self._ollama else "/embeddings")
        self._query_prefix, self._document_prefix = task_prefixes(identity.model)
        self._target = HttpTarget(
            name=f"{identity.provider} embeddings (model {identity.model})",
            config_key="memory.embeddings.endpoint",
            start_hint=_START_HINTS[identity.provider],
            not_found_hint=(
                f"is the model pulled? run `ollama pull {identity.model}`"
                if self._ollama
                else "check memory.embeddings.endpoint (it usually ends in /v1) and the model name"
            ),
        )

    def __repr__(self) -> str:  # never shows the API key
        return f"HttpEmbeddingProvider({self.identity.describe()} at {self.url})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed([self._document_prefix + clean_text(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([self._query_prefix + clean_text(text)])[0]

    def _embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.identity.dim), dtype=np.float32)
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            out[start : start + len(batch)] = self._embed_batch(batch)
        return normalize_rows(out)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        answer = post_json(
            self.url,
            {"model": self.identity.model, "input": batch},
            target=self._target,
            timeout_s=self.timeout_s,
            headers=headers,
        )
        rows = _ollama_rows(answer, self._fail) if self._ollama else _openai_rows(answer, self._fail)
        return self._matrix(rows, len(batch))

    def _fail(self, problem: str, fix: str | None = None) -> ProviderUnavailable:
        fix = fix or f"check that {self.url} serves {self.identity.provider} embeddings for this model"
        return ProviderUnavailable(f"{self._target.name} at {self.url}: {problem}: {fix}")

    def _matrix(self, rows: list[Any], count: int) -> np.ndarray:
        if len(rows) != count:
            raise self._fail(f"returned {len(rows)} vectors for {count} texts")
        dim = self.identity.dim
        for row in rows:
            if not isinstance(row, list):
                raise self._fail(f"an embedding is a {type(row).__name__}, not a list of numbers")
            if len(row) != dim:
                raise ProviderUnavailable(
                    f"{self.identity.provider} model {self.identity.model} at {self.url} returned "
                    f"{len(row)}-dim vectors but memory.embeddings.dim is {dim}: "
                    f"set dim to {len(row)} and run `memvault rebuild`"
                )
            if not {type(value) for value in row} <= {float, int}:
                raise self._fail("an embedding holds something other than numbers")
        matrix = np.array(rows, dtype=np.float64)
        # beyond float32's range a value would turn into infinity in the index
        if not (np.abs(matrix) <= _FLOAT32_MAX).all():  # also false for NaN
            raise self._fail("an embedding holds non-finite numbers (NaN or infinity)")
        return matrix.astype(np.float32)


_START_HINTS = {
    "ollama": "start Ollama (`ollama serve`)",
    "lmstudio": "start the LM Studio server (`lms server start`) and load the embedding model",
    "openai": "check the OpenAI-compatible server is running",
}


def _ollama_rows(answer: Any, fail: Any) -> list[Any]:
    if isinstance(answer, dict) and "embeddings" in answer:
        rows = answer["embeddings"]
        if isinstance(rows, list):
            return rows
        raise fail('"embeddings" is not a list')
    if isinstance(answer, dict) and isinstance(answer.get("error"), str):
        raise fail(f"answered error {answer['error'][:_EXCERPT_CHARS]!r}")
    raise fail(
        'the answer has no "embeddings" field',
        "check memory.embeddings.endpoint points at Ollama 0.3.4 or newer (POST /api/embed)",
    )


def _openai_rows(answer: Any, fail: Any) -> list[Any]:
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, list):
        if isinstance(answer, dict) and answer.get("error"):
            raise fail(f"answered error {_excerpt(json.dumps(answer['error']).encode())!r}")
        raise fail('the answer has no "data" list')
    by_index: dict[int, Any] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if isinstance(index, bool) or not isinstance(index, int) or "embedding" not in item:
            raise fail('an item in "data" lacks an integer "index" or an "embedding"')
        if index in by_index:
            raise fail(f'"data" holds index {index} twice')
        by_index[index] = item["embedding"]
    if sorted(by_index) != list(range(len(by_index))):
        raise fail(f'"data" indexes are not 0..{len(by_index) - 1}')
    return [by_index[i] for i in range(len(by_index))]
