"""Content: the vault as files, read only. Daily notes by month, audit notes, documents (active and
archived), memory spaces, runtime hot memory, and one note rendered with an anchor per bullet.

This is the browse contract, not semantic recall: lists come from the folders, counts from the
serving index's manifest, text from the files as they are now. Edits stay in the editor.
"""

from __future__ import annotations

import calendar
import re
from datetime import date

from memvault.cli.web.markdown import note_url, render_markdown, render_note
from memvault.cli.web.reader import NotFound
from memvault.cli.web.views.base import Args, BadRequest, View
from memvault.vault.errors import VaultError
from memvault.vault.layout import AUDIT, DAILY, note_day, note_sort_key, parse_note_relpath

MAX_AUDIT_LISTED = 62
MAX_SPACE_NOTES_LISTED = 400


class ContentView(View):
    path = "/content"
    template = "content.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        rows = reader.indexed_rows()
        paths = sorted(reader.note_paths(), key=note_sort_key)
        daily: dict[date, list[str]] = {}  # a day may have a flat and a nested note: both count
        for path in paths:
            if (day := note_day(path, DAILY)) is not None:
                daily.setdefault(day, []).append(path)
        months: dict[str, dict] = {}
        for day, notes in daily.items():
            month = day.strftime("%Y-%m")
            entry = months.setdefault(month, {"month": month, "notes": 0, "memories": 0})
            entry["notes"] += len(notes)
            entry["memories"] += sum(rows.get(path, 0) for path in notes)
        chosen = _month(args, sorted(months)[-1] if months else None)
        audit = [p for p in reversed(paths) if note_day(p, AUDIT) is not None]
        return {
            "months": [months[m] for m in sorted(months, reverse=True)],
            "month": chosen,
            "calendar": _calendar(chosen, daily, rows) if chosen else [],
            "audit": [
                {"path": p, "day": note_day(p).isoformat(), "memories": rows.get(p, 0), "url": note_url(p)}
                for p in audit[:MAX_AUDIT_LISTED]
            ],  # fmt: skip
            "auditTotal": len(audit),
            "documents": _documents(reader),
            "spaces": _spaces(reader),
            "runtime": _runtime_summary(reader),
            "indexMd": reader.index_md() is not None,
        }


def _month(args: Args, default: str | None) -> str | None:
    raw = args.text("month", max_chars=7)
    if not raw:
        return default
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", raw):
        raise BadRequest(f"month must be YYYY-MM (got {raw!r})")
    return raw


def _calendar(month: str, daily: dict[date, list[str]], rows: dict[str, int]) -> list[list[dict | None]]:
    """The month's weeks; a day links to its note wherever the vault keeps it (flat or YYYY/MM/)."""
    year, number = int(month[:4]), int(month[5:])
    weeks = []
    for week in calendar.Calendar(firstweekday=0).monthdayscalendar(year, number):
        cells = []
        for day in week:
            if day == 0:
                cells.append(None)
                continue
            notes = daily.get(date(year, number, day), [])
            cells.append({"day": day, "date": date(year, number, day).isoformat(), "exists": bool(notes),
                          "memories": sum(rows.get(path, 0) for path in notes),
                          "url": note_url(notes[0]) if notes else None})  # fmt: skip
        weeks.append(cells)
    return weeks


def _documents(reader) -> dict:
    try:
        active = reader.documents()
        archived = reader.archived_documents()
        limit = reader.documents_limit()
    except VaultError as exc:
        return {"problem": str(exc), "active": [], "archived": [], "usedBytes": 0, "limitBytes": 0}
    return {
        "problem": None,
        "active": [
            {**doc.to_json(), "url": f"/documents/{doc.id}"} for doc in sorted(active, key=lambda d: d.title.casefold())
        ],
        "archived": [
            {"path": p, "name": p.rsplit("/", 1)[-1], "url": f"/archived/{p.rsplit('/', 1)[-1][:-3]}"} for p in archived
        ],
        "usedBytes": sum(doc.size for doc in active),
        "limitBytes": limit,
    }


def _spaces(reader) -> dict:
    try:
        spaces = reader.spaces()
    except VaultError as exc:
        return {"problem": str(exc), "spaces": []}
    rows = []
    for space in spaces:
        try:
            notes = reader.space_note_count(space.id)
        except VaultError:
            notes = None
        rows.append({**space.to_json(), "notes": notes, "url": f"/spaces/{space.id}"})
    return {"problem": None, "spaces": rows}


def _runtime_summary(reader) -> dict:
    try:
        view = reader.runtime()
    except VaultError as exc:
        return {"problem": str(exc), "targets": []}
    return {"problem": None, "revision": view.revision, "targets": _targets(view)}


def _targets(view) -> list[dict]:
    out = []
    for target in ("USER", "MEMORY"):
        used, limit = view.used(target), view.limits[target]
        out.append({"target": target, "file": f"runtime/{target}.md", "usedBytes": used, "limitBytes": limit,
                    "percent": 0 if not limit else min(100, round(100 * used / limit)), "state": view.files[target],
                    "entries": [e.to_json() for e in view.state.of(target)]})  # fmt: skip
    return out


class NoteView(View):
    path = "/notes/{folder}/{day:path}"  # daily/2026-11-30 or daily/2026/11/2026-11-30, as the file is named
    template = "note.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        note = reader.note(_note_relpath(args))
        return _note_page(note.relpath, note, reader.note_paths(), "/notes", None)

    def title(self, data: dict) -> str:
        return data["path"]


class SpaceView(View):
    """One memory space (itself a vault): its catalog entry and its notes, newest first."""

    path = "/spaces/{space_id}"
    template = "space.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        space = reader.space(args.text("space_id", max_chars=20))
        notes = sorted(reader.space_notes(space.id), key=note_sort_key, reverse=True)
        prefix = f"/spaces/{space.id}/notes"
        return {"space": space.to_json(), "total": len(notes),
                "notes": [{"path": p, "url": note_url(p, prefix=prefix)}
                          for p in notes[:MAX_SPACE_NOTES_LISTED]]}  # fmt: skip

    def title(self, data: dict) -> str:
        return data["space"]["title"]


class SpaceNoteView(View):
    path = "/spaces/{space_id}/notes/{folder}/{day:path}"
    template = "note.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        space_id, relpath = args.text("space_id", max_chars=20), _note_relpath(args)
        note = reader.space_note(space_id, relpath)
        space = reader.space(space_id).to_json()
        return _note_page(note.relpath, note, reader.space_notes(space_id), f"/spaces/{space_id}/notes", space)

    def title(self, data: dict) -> str:
        return f"{data['space']['title']}: {data['path']}"


def _note_relpath(args: Args) -> str:
    relpath = f"{args.text('folder', max_chars=10)}/{args.text('day', max_chars=30)}.md"
    if parse_note_relpath(relpath) is None:
        raise BadRequest(f"{relpath!r} is not a note: notes are daily/YYYY-MM-DD, daily/YYYY/MM/YYYY-MM-DD "
                         "or the same under audit/")  # fmt: skip
    return relpath


def _note_page(relpath: str, note, all_notes: list[str], prefix: str, space: dict | None) -> dict:
    html, parsed = render_note(note.text)
    folder, day = parse_note_relpath(relpath)
    siblings = sorted(
        (p for p in all_notes if note_day(p, folder) is not None), key=note_sort_key
    )  # by date, either layout
    position = siblings.index(relpath) if relpath in siblings else -1
    older = siblings[position - 1] if position > 0 else None
    newer = siblings[position + 1] if 0 <= position < len(siblings) - 1 else None

    def url(path: str, block: str | None = None) -> str:
        return note_url(path, block, prefix=prefix)

    return {
        "path": relpath, "bytes": note.size, "problem": note.problem, "html": html, "space": space,
        "bullets": [{"id": b.id, "time": b.time, "text": b.text, "line": start + 1,
                     "explicitId": b.has_explicit_id, "url": url(relpath, b.id)}
                    for b, start in zip(parsed.bullets, parsed.starts, strict=True)],
        "conflicts": len(parsed.conflicts), "duplicateIds": list(parsed.duplicate_ids),
        "older": older and {"path": older, "url": url(older)},
        "newer": newer and {"path": newer, "url": url(newer)},
        "month": day.strftime("%Y-%m") if folder == DAILY and space is None else None,
    }  # fmt: skip


class IndexMdView(View):
    """index.md, the living index consolidation regenerates, rendered (its wikilinks lead to notes)."""

    path = "/index-md"
    template = "document.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        note = reader.index_md()
        if note is None:
            raise NotFound("there is no index.md yet: `memvault consolidate` (or `memvault watch`) writes it")
        return {"title": "index.md", "path": "index.md", "summary": "", "revision": None, "updated": None,
                "bytes": note.size, "archived": False, "html": render_markdown(note.text),
                "problem": note.problem}  # fmt: skip

    def title(self, data: dict) -> str:
        return "index.md"


class DocumentView(View):
    path = "/documents/{doc_id}"
    template = "document.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        doc = reader.document(args.text("doc_id", max_chars=80))
        return {**doc.to_json(body=True), "archived": False, "html": render_markdown(doc.body)}

    def title(self, data: dict) -> str:
        return data["title"]


class ArchivedDocumentView(View):
    path = "/archived/{name}"
    template = "document.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        doc = reader.archived_document(args.text("name", max_chars=84))
        body = doc.to_json(body=True)
        body["path"] = f"documents/archived/{doc.id}.md"
        return {**body, "archived": True, "html": render_markdown(doc.body)}

    def title(self, data: dict) -> str:
        return data["title"]


class RuntimeView(View):
    path = "/runtime"
    template = "runtime.html"
    section = "Content"

    def data(self, args: Args, reader) -> dict:
        view = reader.runtime()
        return {"revision": view.revision, "targets": _targets(view)}

    def title(self, data: dict) -> str:
        return "Runtime memory"
