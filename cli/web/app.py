"""`build_app(reader, token=..., port=...)`: the Starlette app of the web pages.

One module per page kind under `views/`, templates in `templates/`, the stylesheet in
`static/`. Every template is autoescaped; the only markup passed through unescaped is what
`memvault.cli.web.markdown` rendered with raw HTML disabled. The guard (`security.py`) wraps
everything, static files included.
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.applications import Starlette
from starlette.responses import RedirectResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from memvault.cli.web.reader import NotFound
from memvault.cli.web.security import Guard
from memvault.cli.web.views.base import routes
from memvault.cli.web.views.content import (
    ArchivedDocumentView,
    ContentView,
    DocumentView,
    IndexMdView,
    NoteView,
    RuntimeView,
    SpaceNoteView,
    SpaceView,
)
from memvault.cli.web.views.entities import EntitiesView, EntityView
from memvault.cli.web.views.recall import AgentView, JournalView, RecallView
from memvault.cli.web.views.status import StatusView
from memvault.vault.errors import VaultError

HERE = Path(__file__).resolve().parent
SECTIONS = (("Recall", "/recall"), ("Entities", "/entities"), ("Content", "/content"), ("Status", "/status"))
VIEWS = (RecallView(), AgentView(), JournalView(), EntitiesView(), EntityView(), ContentView(), NoteView(),
         DocumentView(), ArchivedDocumentView(), RuntimeView(), SpaceView(), SpaceNoteView(), IndexMdView(),
         StatusView())  # fmt: skip


def templates_for(reader) -> Jinja2Templates:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,  # a template naming missing data fails loudly in the tests
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.globals.update(sections=SECTIONS, vault_name=reader.root.name, vault_mode=reader.mode)
    environment.filters.update(bytes=_human_bytes, age=_human_age)
    return Jinja2Templates(env=environment)


def build_app(reader, *, token: str, port: int) -> Guard:
    """The app over `reader` (a VaultReader), guarded for 127.0.0.1/[::1]:`port` and `token`."""
    templates = templates_for(reader)
    app = Starlette(
        routes=[
            Route("/", lambda request: RedirectResponse("/recall", status_code=303)),
            *routes(VIEWS, reader, templates),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={404: _not_routed(templates), 405: _not_routed(templates)},
    )
    app.state.reader = reader
    return Guard(app, token=token, port=port)


def _not_routed(templates):
    """Unknown paths and wrong methods answer like every other error: a page, or JSON for `.json`."""

    async def handler(request, exc):
        from memvault.cli.web.views.base import error_response

        if exc.status_code == 405:
            error = MethodRefused(
                f"{request.method} is not accepted here: pages are read with GET, agent search is a POST form"
            )
        else:
            error = NotFound(f"there is no page at {request.url.path[:200]}: start from /recall")
        return error_response(templates, error, as_json=request.url.path.endswith(".json"), request=request)

    return handler


class MethodRefused(VaultError):
    code = "method_not_allowed"


def _human_bytes(value) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover


def _human_age(seconds) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    for unit, span in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= span:
            return f"{seconds // span} {unit}"
    return f"{seconds} s"
