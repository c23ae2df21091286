"""The one base view: a page's data as a dict, rendered as HTML or, at `<path>.json`, as JSON.

A view subclass names its path and template and implements `data(args, reader)`; it never
builds a response. `routes()` registers both twins (`/status` and `/status.json`), reads the
query string (and a POST form), runs `data` in a worker thread (the library is synchronous),
and turns library errors into an error page or `{"error": {"code", "message"}}` with a status
that fits. The JSON twin carries exactly the data the template sees, so tests and scripts read
what people see.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping
from datetime import date

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from memvault.vault.errors import (
    IndexUnavailable,
    InvalidConfig,
    InvalidRecord,
    ProviderUnavailable,
    UnsafePath,
    VaultError,
)

log = logging.getLogger("memvault.web")
MAX_PARAM_CHARS = 2_000
#: a POST form (agent search) is one short question; the body past this is refused with 413
MAX_FORM_BYTES = 64 * 1024
#: how much of a refused body is read and dropped so the 413 reaches the browser; past it, hang up
DRAIN_BYTES = 16 * 1024 * 1024
_STATUS = [("not_found", 404), ("method_not_allowed", 405), ("payload_too_large", 413), (UnsafePath, 403),
           (IndexUnavailable, 503), (ProviderUnavailable, 502), (InvalidConfig, 500), (InvalidRecord, 400)]  # fmt: skip


class BadRequest(InvalidRecord):
    """A query parameter is malformed; the message names it and what it takes."""


class FormTooLarge(VaultError):
    code = "payload_too_large"


class Args:
    """A page's parameters (query string, POST form, path), read with bounds and clear errors."""

    def __init__(self, values: Mapping[str, str]):
        self.values = dict(values)

    def text(self, name: str, default: str = "", *, max_chars: int = MAX_PARAM_CHARS) -> str:
        value = self.values.get(name, default)
        if len(value) > max_chars:
            raise BadRequest(f"{name} is {len(value)} characters; it takes at most {max_chars}")
        if "\x00" in value:
            raise BadRequest(f"{name} contains a NUL character: remove it")
        return value.strip()

    def choice(self, name: str, options: tuple[str, ...], default: str) -> str:
        value = self.values.get(name) or default
        if value not in options:
            raise BadRequest(f"{name} must be one of {', '.join(options)} (got {value[:40]!r})")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self.values.get(name, "")
        if raw == "":
            return default
        if not re.fullmatch(r"[0-9]{1,6}", raw) or not low <= int(raw) <= high:
            raise BadRequest(f"{name} must be a whole number from {low} to {high} (got {raw[:40]!r})")
        return int(raw)

    def day(self, name: str) -> date | None:
        raw = self.values.get(name, "").strip()
        if not raw:
            return None
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw):
                raise ValueError
            return date.fromisoformat(raw)
        except ValueError:
            raise BadRequest(f"{name} must be a date as YYYY-MM-DD (got {raw[:40]!r})") from None

    def flag(self, name: str) -> bool:
        return self.values.get(name, "") not in ("", "0", "false", "off")


class View:
    #: the route (Starlette syntax); the JSON twin is the same path + ".json"
    path = "/"
    template = "base.html"
    #: the navigation tab this page belongs to
    section = ""
    methods: tuple[str, ...] = ("GET",)

    def data(self, args: Args, reader) -> dict:
        raise NotImplementedError

    def title(self, data: dict) -> str:
        return self.section


def routes(views, reader, templates) -> list[Route]:
    """Both twins of every view; the `.json` route first (a path parameter would swallow it)."""
    out = []
    for view in views:
        out.append(
            Route(view.path + ".json", _endpoint(view, reader, templates, as_json=True), methods=list(view.methods))
        )
        out.append(Route(view.path, _endpoint(view, reader, templates, as_json=False), methods=list(view.methods)))
    return out


def _endpoint(view: View, reader, templates, *, as_json: bool):
    async def endpoint(request: Request) -> Response:
        try:
            values = dict(request.query_params)
            if request.method == "POST":
                values.update(await bounded_form(request))
            values.update(request.path_params)
            args = Args(values)
            data = await run_in_threadpool(view.data, args, reader)
            status = 200
        except VaultError as exc:
            return error_response(templates, exc, as_json=as_json, request=request)
        except Exception as exc:  # a bug: the server log gets the traceback, the person a plain page
            log.exception("web page %s failed", request.url.path)
            print(f"memvault web: {request.url.path} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return error_response(templates, None, as_json=as_json, request=request)
        if as_json:
            return json_response(data, status)
        context = {"request": request, "page": view, "data": data, "title": view.title(data)}
        return templates.TemplateResponse(request, view.template, context, status_code=status)

    endpoint.__name__ = f"{type(view).__name__}{'_json' if as_json else ''}"
    return endpoint


async def bounded_form(request: Request) -> dict[str, str]:
    """The POST form's text fields, read with a bound. A body over MAX_FORM_BYTES is refused
    (413) after it is read to its end (up to DRAIN_BYTES, kept nowhere): a server that answers
    and hangs up while the browser is still sending makes the browser show a connection reset
    instead of the answer."""
    declared = request.headers.get("content-length", "")
    received, kept = 0, []
    if not (declared.isdigit() and int(declared) > DRAIN_BYTES):
        async for chunk in request.stream():
            received += len(chunk)
            if received <= MAX_FORM_BYTES:
                kept.append(chunk)
            elif received > DRAIN_BYTES:
                break
    size = max(received, int(declared) if declared.isdigit() else 0)
    if size > MAX_FORM_BYTES:
        raise FormTooLarge(f"the form is {size:,} bytes; this page takes at most {MAX_FORM_BYTES // 1024} KiB "
                           "(a question of at most 1,000 characters): shorten it")  # fmt: skip
    body = b"".join(kept)

    async def replay():
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=0, max_fields=32, max_part_size=MAX_FORM_BYTES)
    except HTTPException as exc:  # a torn or oversized multipart body
        raise BadRequest(f"the form could not be read ({exc.detail}): post it from this server's pages") from None
    return {k: v for k, v in form.items() if isinstance(v, str)}


def json_response(data: object, status: int = 200) -> Response:
    body = json.dumps(data, ensure_ascii=False, default=str, indent=1).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json")


def status_of(exc: VaultError) -> int:
    for kind, status in _STATUS:
        if (isinstance(kind, str) and exc.code == kind) or (isinstance(kind, type) and isinstance(exc, kind)):
            return status
    return 500


def error_response(templates, exc: VaultError | None, *, as_json: bool, request: Request) -> Response:
    if exc is None:
        code, message, status = (
            "internal_error",
            "The page failed inside memvault; the server's log has the details.",
            500,
        )
    else:
        code, message, status = exc.code, str(exc), status_of(exc)
    if as_json:
        return json_response({"error": {"code": code, "message": message}}, status)
    context = {
        "request": request,
        "page": None,
        "data": {},
        "title": "Error",
        "error": {"code": code, "message": message},
    }
    try:
        return templates.TemplateResponse(request, "error.html", context, status_code=status)
    except Exception:  # the error page itself must not fail
        return HTMLResponse("<!doctype html><title>Error</title><p>The page failed.</p>", status_code=status)
