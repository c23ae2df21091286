"""Documents, the pure half (records, rendering, capacity plan); `store.py` does the I/O.

Project records live in `documents/<id>.md`, cold ones in `documents/archived/`.

A document is Markdown with a small frontmatter memvault writes (title, summary, revision,
created, updated) and a body people may edit freely. Active documents share one byte budget,
measured on the rendered UTF-8 bytes (`capacity_plan`). When a create or update would overflow
it, the least-recently-updated active document is archived "index first, move second":

    snapshot the victim (bytes, SHA-256, revision)      [documents lock]
    write + verify a cold reference in a memory space   [no lock: the caller's `ColdIndexer`]
    re-read the victim; changed -> Conflict, keep it    [documents lock]
    move it to documents/archived/, then retry the original create/update

Without a `ColdIndexer` (no memory space can take the index) the file moves without one. A
failed index or a revision conflict keeps the document active; a reference already written is
left in place as a safe duplicate, so the active original text is never lost.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

from memvault.vault.errors import InvalidRecord

DOCUMENTS_DIR, ARCHIVED_DIR = "documents", "documents/archived"
DEFAULT_DOCUMENTS_LIMIT = 64 * 1024
MAX_DOCUMENT_BYTES = 16 * 1024
ID_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,79}")
_FIELDS = ("title", "summary", "revision", "created", "updated")
MAX_TITLE, MAX_SUMMARY = 160, 400


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    summary: str
    body: str
    revision: int
    created: str
    updated: str
    size: int  # rendered UTF-8 bytes: what the budget counts
    sha256: str  # of the file's bytes as read

    @property
    def path(self) -> str:
        return f"{DOCUMENTS_DIR}/{self.id}.md"

    def to_json(self, body: bool = False) -> dict:
        data = {"id": self.id, "title": self.title, "summary": self.summary, "revision": self.revision,
                "created": self.created, "updated": self.updated, "bytes": self.size, "path": self.path}  # fmt: skip
        if body:
            data["body"] = self.body
        return data


@dataclass(frozen=True)
class ColdReference:
    """The concise index of an archived document that goes to a memory space before the move."""

    document_id: str
    title: str
    summary: str
    planned_path: str
    sha256: str
    revision: int

    def text(self) -> str:
        summary = f" Summary: {self.summary}" if self.summary else ""
        return (
            f'Archived document "{self.title}" (revision {self.revision}) is at {self.planned_path},'
            f" sha256 {self.sha256}.{summary}"
        )


ColdIndexer = Callable[[ColdReference], None]


@dataclass(frozen=True)
class ArchivedDocument:
    id: str
    path: str
    indexed: bool

    def to_json(self) -> dict:
        return {"id": self.id, "path": self.path, "indexed": self.indexed}


@dataclass(frozen=True)
class DocumentReceipt:
    status: str  # created | updated | unchanged | archived
    id: str
    path: str
    revision: int
    used_bytes: int
    limit_bytes: int
    archived: tuple[ArchivedDocument, ...] = ()

    def to_json(self) -> dict:
        return {"status": self.status, "id": self.id, "path": self.path, "revision": self.revision,
                "usedBytes": self.used_bytes, "limitBytes": self.limit_bytes,
                "archived": [a.to_json() for a in self.archived]}  # fmt: skip


@dataclass(frozen=True)
class CapacityPlan:
    fits: bool
    used_after: int
    limit: int
    victim: Document | None  # the least-recently-used active document to archive, if it overflows


def capacity_plan(active: list[Document], candidate: Document, limit: int) -> CapacityPlan:
    """Does `candidate` (new, or replacing the active document with its id) fit the budget?"""
    others = [doc for doc in active if doc.id != candidate.id]
    used = sum(doc.size for doc in others) + candidate.size
    if used <= limit:
        return CapacityPlan(True, used, limit, None)
    victim = min(others, key=lambda doc: (doc.updated, doc.id), default=None)
    return CapacityPlan(False, used, limit, victim)


# --- rendering and parsing (pure) ----------------------------------------------------------------


def render_document(title: str, summary: str, body: str, revision: int, created: str, updated: str) -> bytes:
    head = [f"{key}: {json.dumps(value, ensure_ascii=False) if isinstance(value, str) else value}"
            for key, value in zip(_FIELDS, (title, summary, revision, created, updated), strict=True)]  # fmt: skip
    text = "---\n" + "\n".join(head) + "\n---\n\n" + body.rstrip("\n") + "\n"
    return text.encode("utf-8")


def parse_document(doc_id: str, raw: bytes, fallback_time: str) -> Document:
    """Tolerant of hand edits: missing or odd frontmatter falls back to the file name and time."""
    text = raw.decode("utf-8", "replace")
    fields: dict[str, object] = {}
    body = text
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            fields = _frontmatter(text[4:end])
            body = text[end + 5 :].lstrip("\n")
    revision = fields.get("revision")
    return Document(
        id=doc_id,
        title=str(fields.get("title") or doc_id),
        summary=str(fields.get("summary") or ""),
        body=body.rstrip("\n"),
        revision=revision if isinstance(revision, int) and not isinstance(revision, bool) and revision >= 0 else 0,
        created=str(fields.get("created") or fallback_time),
        updated=str(fields.get("updated") or fallback_time),
        size=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
    )


def _frontmatter(block: str) -> dict[str, object]:
    fields: dict[str, object] = {}
    for line in block.splitlines():
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in _FIELDS:
            continue
        value = value.strip()
        try:
            fields[key.strip()] = json.loads(value) if value[:1] in '"0123456789' else value
        except ValueError:
            fields[key.strip()] = value
    return fields


def slug(title: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    cleaned = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:60].strip("-")
    return cleaned or "doc-" + hashlib.sha256(title.encode("utf-8")).hexdigest()[:8]


def clean_line(value: object, what: str, limit: int, *, required: bool) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(f"the document {what} must be text, not {type(value).__name__}")
    cleaned = " ".join(value.split())
    if required and not cleaned:
        raise InvalidRecord(f"the document {what} is empty: give it a short {what}")
    if len(cleaned) > limit:
        raise InvalidRecord(f"the document {what} is {len(cleaned)} characters, over {limit}: shorten it")
    return cleaned


def clean_body(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(f"the document body must be text, not {type(value).__name__}")
    if any(unicodedata.category(ch) == "Cc" and ch not in "\t\n" for ch in value.replace("\r\n", "\n")):
        raise InvalidRecord("the document body contains control characters: remove them")
    return value.replace("\r\n", "\n").rstrip("\n")
