"""`DocumentStore`: create / update / archive documents under the documents lock.

Writes are compare-and-swap on the file's bytes (`replace_if_unchanged`), so a person saving the
same document in an editor is never overwritten: the write fails with Conflict instead. The
budget loop archives at most one document per round and re-plans from the files each time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memvault.vault.clock import utc_now
from memvault.vault.credentials import refuse_credentials
from memvault.vault.documents.format import (
    ARCHIVED_DIR,
    DEFAULT_DOCUMENTS_LIMIT,
    DOCUMENTS_DIR,
    ID_RE,
    MAX_DOCUMENT_BYTES,
    MAX_SUMMARY,
    MAX_TITLE,
    ArchivedDocument,
    ColdIndexer,
    ColdReference,
    Document,
    DocumentReceipt,
    capacity_plan,
    clean_body,
    clean_line,
    parse_document,
    render_document,
    slug,
)
from memvault.vault.errors import Conflict, InvalidRecord
from memvault.vault.fsio import fsync_dir, read_bytes_nofollow
from memvault.vault.locks import VaultLock, replace_if_unchanged
from memvault.vault.paths import is_ignored_name, resolve_inside
from memvault.vault.runtime.commit import ensure_folder
from memvault.vault.runtime.entries import CapacityExceeded, iso_utc

#: more documents than this in documents/ is not a working set; refuse rather than scan forever
MAX_ACTIVE_DOCUMENTS = 4096


@dataclass(frozen=True)
class _Draft:
    """A create or update, re-planned against the files on every budget round."""

    doc_id: str
    title: str | None
    summary: str | None
    body: str | None
    expected_revision: int | None
    create: bool


class DocumentStore:
    def __init__(
        self,
        root: Path,
        *,
        limit_bytes: int = DEFAULT_DOCUMENTS_LIMIT,
        max_document_bytes: int = MAX_DOCUMENT_BYTES,
        clock: Callable[[], datetime] = utc_now,
        lock_timeout: float = 30.0,
        boundary: Callable[[str], None] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        #: crash tests: called at each stage of a document's write ("document.written", …)
        self._boundary = boundary
        self.limit = limit_bytes
        self.max_document_bytes = min(max_document_bytes, limit_bytes)
        self._clock = clock
        self._lock_timeout = lock_timeout

    # --- reads ---------------------------------------------------------------------------------

    def list(self) -> list[Document]:
        """Active documents, least recently updated first (the archival order)."""
        docs = [self._read(doc_id) for doc_id in self._active_ids()]
        return sorted(docs, key=lambda doc: (doc.updated, doc.id))

    def list_archived(self) -> list[str]:
        folder = resolve_inside(self.root, ARCHIVED_DIR)
        if not folder.is_dir():
            return []
        return sorted(f"{ARCHIVED_DIR}/{p.name}" for p in folder.iterdir() if p.suffix == ".md" and p.is_file())

    def read(self, doc_id: str) -> Document:
        return self._read(self._check_id(doc_id))

    def used_bytes(self) -> int:
        return sum(doc.size for doc in self.list())

    # --- writes --------------------------------------------------------------------------------

    def create(
        self, title: str, body: str, summary: str = "", *, indexer: ColdIndexer | None = None
    ) -> DocumentReceipt:
        title = clean_line(title, "title", MAX_TITLE, required=True)
        draft = _Draft(slug(title), title, clean_line(summary, "summary", MAX_SUMMARY, required=False),
                       clean_body(body), None, True)  # fmt: skip
        return self._write(draft, indexer)

    def update(
        self,
        doc_id: str,
        body: str | None = None,
        *,
        title: str | None = None,
        summary: str | None = None,
        expected_revision: int | None = None,
        indexer: ColdIndexer | None = None,
    ) -> DocumentReceipt:
        draft = _Draft(
            self._check_id(doc_id),
            None if title is None else clean_line(title, "title", MAX_TITLE, required=True),
            None if summary is None else clean_line(summary, "summary", MAX_SUMMARY, required=False),
            None if body is None else clean_body(body),
            expected_revision,
            False,
        )
        return self._write(draft, indexer)

    def archive(
        self, doc_id: str, *, expected_revision: int | None = None, indexer: ColdIndexer | None = None
    ) -> DocumentReceipt:
        """Manual archive, on the same "index first, move second" path as overflow archival."""
        doc_id = self._check_id(doc_id)
        with self._exclusive():
            victim = self._read(doc_id)
            _check_revision(victim, expected_revision)
            planned = self._planned_path(victim)
        moved = self._archive(victim, planned, indexer)
        if moved is None:
            raise InvalidRecord(f"{victim.path} was archived or removed meanwhile: see `memvault doc list --archived`")
        return DocumentReceipt("archived", doc_id, planned, victim.revision, self.used_bytes(), self.limit, (moved,))

    # --- the budget loop -----------------------------------------------------------------------

    def _write(self, draft: _Draft, indexer: ColdIndexer | None) -> DocumentReceipt:
        archived: list[ArchivedDocument] = []
        for _round in range(MAX_ACTIVE_DOCUMENTS + 1):
            with self._exclusive():
                active = self.list()
                existing, candidate, data = self._candidate(draft, active)
                plan = capacity_plan(active, candidate, self.limit)
                if plan.fits:
                    return self._commit(draft, existing, candidate, data, plan.used_after, archived)
                if plan.victim is None:
                    raise CapacityExceeded(
                        f"{candidate.path} alone ({candidate.size} bytes) exceeds the documents budget"
                    )
                victim, planned = plan.victim, self._planned_path(plan.victim)
            # index first, move second; the lock is not held while a memory space is written
            moved = self._archive(victim, planned, indexer)
            if moved is not None:  # None: another writer archived it first; plan again
                archived.append(moved)
        raise CapacityExceeded("the documents budget could not be met")  # pragma: no cover

    def _candidate(self, draft: _Draft, active: list[Document]) -> tuple[Document | None, Document, bytes]:
        existing = next((doc for doc in active if doc.id == draft.doc_id), None)
        now = iso_utc(self._clock())
        if draft.create:
            if existing is not None or resolve_inside(self.root, f"{DOCUMENTS_DIR}/{draft.doc_id}.md").exists():
                raise Conflict(
                    f"a document {draft.doc_id!r} already exists ({DOCUMENTS_DIR}/{draft.doc_id}.md):"
                    " update it with `memvault doc update`, or choose another title"
                )
            title, summary, body, revision, created = draft.title, draft.summary, draft.body, 1, now
        else:
            if existing is None:
                raise InvalidRecord(f"no active document {draft.doc_id!r}: see `memvault doc list`")
            _check_revision(existing, draft.expected_revision)
            title = existing.title if draft.title is None else draft.title
            summary = existing.summary if draft.summary is None else draft.summary
            body = existing.body if draft.body is None else draft.body
            revision, created = existing.revision + 1, existing.created
        for text, what in ((title, "the document title"), (summary, "the document summary"), (body, "the document")):
            refuse_credentials(text or "", what)
        data = render_document(title or "", summary or "", body or "", revision, created, now)
        if len(data) > self.max_document_bytes:
            raise CapacityExceeded(
                f"the rendered document is {len(data)} bytes; one document holds at most {self.max_document_bytes}:"
                " split it into several documents"
            )
        return existing, parse_document(draft.doc_id, data, now), data

    def _commit(self, draft, existing, candidate, data, used, archived) -> DocumentReceipt:
        same = existing is not None and (existing.title, existing.summary, existing.body) == (
            candidate.title, candidate.summary, candidate.body,
        )  # fmt: skip
        if same:
            used = used - candidate.size + existing.size
            return DocumentReceipt(
                "unchanged", existing.id, existing.path, existing.revision, used, self.limit, tuple(archived)
            )
        ensure_folder(self.root, DOCUMENTS_DIR)
        path = resolve_inside(self.root, candidate.path)
        old = None if existing is None else read_bytes_nofollow(path)
        if old is not None and hashlib.sha256(old).hexdigest() != existing.sha256:
            raise Conflict(f"{candidate.path} changed while it was being updated: re-read it and retry")
        replace_if_unchanged(path, old, data, mode=0o644, boundary=self._stage)
        status = "created" if draft.create else "updated"
        return DocumentReceipt(
            status, candidate.id, candidate.path, candidate.revision, used, self.limit, tuple(archived)
        )

    # --- archiving -----------------------------------------------------------------------------

    def _archive(self, victim: Document, planned: str, indexer: ColdIndexer | None) -> ArchivedDocument | None:
        if indexer is not None:
            reference = ColdReference(victim.id, victim.title, victim.summary, planned, victim.sha256, victim.revision)
            indexer(reference)  # raises on failure: the document stays active
        with self._exclusive():
            source = resolve_inside(self.root, victim.path)
            try:
                current = hashlib.sha256(read_bytes_nofollow(source)).hexdigest()
            except FileNotFoundError:
                return None  # a concurrent writer archived it first
            if current != victim.sha256:
                raise Conflict(
                    f"{victim.path} changed while it was being archived; it stays active"
                    f"{' (its cold reference stays as a safe duplicate)' if indexer else ''}. Fix: retry"
                )
            target = resolve_inside(self.root, planned)
            if target.exists():
                raise Conflict(
                    f"{planned} appeared while {victim.path} was being archived; it stays active. Fix: retry"
                )
            folder = ensure_folder(self.root, ARCHIVED_DIR)
            os.rename(source, target)
            fsync_dir(folder)
            fsync_dir(source.parent)
        return ArchivedDocument(victim.id, planned, indexer is not None)

    def _stage(self, name: str) -> None:
        if self._boundary is not None:
            self._boundary(f"document.{name}")

    def _planned_path(self, doc: Document) -> str:
        plain = f"{ARCHIVED_DIR}/{doc.id}.md"
        if not resolve_inside(self.root, plain).exists():
            return plain
        return f"{ARCHIVED_DIR}/{doc.id}-{doc.sha256[:8]}.md"

    # --- helpers -------------------------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with VaultLock(self.root, "documents", timeout=self._lock_timeout):
            yield

    def _active_ids(self) -> list[str]:
        folder = resolve_inside(self.root, DOCUMENTS_DIR)
        if not folder.is_dir():
            return []
        ids = []
        for entry in os.scandir(folder):
            stem, dot, ext = entry.name.rpartition(".")
            if (
                dot
                and ext == "md"
                and ID_RE.fullmatch(stem)
                and not is_ignored_name(entry.name)
                and entry.is_file(follow_symlinks=False)
            ):
                ids.append(stem)
                if len(ids) > MAX_ACTIVE_DOCUMENTS:
                    raise InvalidRecord(f"{folder} holds more than {MAX_ACTIVE_DOCUMENTS} documents: archive some")
        return sorted(ids)

    def _read(self, doc_id: str) -> Document:
        path = resolve_inside(self.root, f"{DOCUMENTS_DIR}/{doc_id}.md")
        try:
            raw = read_bytes_nofollow(path)
            mtime = os.stat(path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            raise InvalidRecord(f"no active document {doc_id!r}: see `memvault doc list`") from None
        return parse_document(doc_id, raw, iso_utc(datetime.fromtimestamp(mtime, UTC)))

    @staticmethod
    def _check_id(doc_id: object) -> str:
        if not isinstance(doc_id, str) or not ID_RE.fullmatch(doc_id):
            raise InvalidRecord(
                f"{doc_id!r} is not a document id (lowercase letters, digits and '-'): see `memvault doc list`"
            )
        return doc_id


def _check_revision(doc: Document, expected: int | None) -> None:
    if expected is not None and doc.revision != expected:
        raise Conflict(
            f"{doc.path} is at revision {doc.revision}, not {expected}: it changed since you read it; nothing was"
            " written. Fix: re-read it (`memvault doc list`) and retry"
        )
