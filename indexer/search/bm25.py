"""The Tantivy BM25 index of one generation: schema, analysis, writes and lenient search.

English text is stemmed (`en_stem`); CJK runs, which have no spaces to split on, are indexed
as overlapping character bigrams in a second field. User text never reaches Tantivy's query
grammar as-is: it is reduced to words first, so `09:14`, `color:blue` or an unbalanced quote
are searched as words and can never raise.
"""

import errno
import hashlib
import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import lru_cache
from pathlib import Path

import tantivy

from memvault.indexer.backend.analysis import (
    CJK_RUN_RE,
    CONTEXT_BOOST,
    MAX_QUERY_WORDS,
    STOPWORDS,
    WORD_RE,
    cjk_bigrams,
)
from memvault.indexer.search.bm25_snapshot import meta_stamp, needs_snapshot, take_snapshot
from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import MACHINE_DIR_MODE, make_dir, read_small, restrict_files
from memvault.vault.records import MemoryRecord
from memvault.vault.storage_errors import storage_error

#: 2: neighbour context field `ctx`; 3: `ctx` stored, for question coverage; 4: no `line` (rows
#: hold none: an index of 3 is rebuilt, never read as if its rows had none)
SCHEMA_VERSION = 4
_WRITER_HEAP_BYTES = 15_000_000  # small arena: most commits index one note
#: a commit of many rows (a rebuild's batch, an import) gets a larger arena: fewer, larger segments
#: to merge afterwards (issue 43)
_BULK_WRITER_HEAP_BYTES = 96_000_000
_BULK_ROWS = 2000
_QUERY_OPERATORS = {"AND", "OR", "NOT", "IN", "TO"}
KINDS = ("curated", "audit")


@dataclass(frozen=True)
class Bm25Hit:
    key: str
    id: str
    path: str
    kind: str
    day: date
    at: datetime
    text: str
    content_hash: str
    score: float
    context_hash: str = ""
    context: str = ""  # the note neighbours' text (`vault.records.MemoryRecord.context`)

    @property
    def source(self) -> str:
        return f"{self.path}#^{self.id}"


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for name in ("key", "id", "path", "kind", "day", "chash", "ctxh"):
        builder.add_text_field(name, stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("ctx", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("cjk", stored=False, tokenizer_name="whitespace")
    builder.add_integer_field("at", stored=True, indexed=False, fast=True)
    return builder.build()


@lru_cache(maxsize=1024)  # a record's context is hashed by each index that holds it, one after another
def context_hash(context: str) -> str:
    return hashlib.sha256(context.encode("utf-8")).hexdigest()[:16]


def record_key(path: str, memory_id: str) -> str:
    return f"{path}#{memory_id}"


def _meta_bytes(folder: Path) -> bytes | None:
    try:
        return read_small(folder / "meta.json")  # every refresh reads it: the fewest system calls
    except OSError:
        return None


class Bm25Index:
    """One Tantivy index folder. Writers must hold the vault lock (one writer across processes)."""

    def __init__(self, folder: Path, *, create: bool = False):
        self.folder = folder
        self.schema = _schema()
        try:
            if create:
                make_dir(folder, MACHINE_DIR_MODE, parents=True)
            elif not (folder / "meta.json").is_file():
                raise IndexUnavailable(f"no BM25 index at {folder}: run `memvault rebuild`")
            self._read_only = not create and needs_snapshot(folder)
            try:
                self._index = self._open_tantivy(folder, create)
            except ValueError as exc:  # a file system that went read-only still says "writable"
                if create or self._read_only or not _read_only_file_system(exc):
                    raise
                self._read_only = True
                self._index = self._open_tantivy(folder, create)
        except ValueError as exc:
            raise_storage_refusal(exc, folder)
            raise IndexUnavailable(f"BM25 index at {folder} cannot be opened ({exc}): run `memvault rebuild`") from exc
        self._searcher: tantivy.Searcher | None = None
        #: reads run on many threads at once (the owner's requests): the searcher is swapped whole
        self._searcher_lock = threading.Lock()
        #: meta.json as it was when the reader was last reloaded (`refresh`)
        self._reloaded_at: bytes | None = None

    def _open_tantivy(self, folder: Path, create: bool) -> tantivy.Index:
        if not self._read_only:
            index = tantivy.Index(self.schema, path=str(folder), reuse=not create)
            if create:
                restrict_files(folder)
            return index
        # a read-only vault: Tantivy cannot take its lock file here, so read a private copy
        self._snapshot_stamp = meta_stamp(folder)
        return tantivy.Index(self.schema, path=str(take_snapshot(folder, self)), reuse=True)

    # --- writing -----------------------------------------------------------------------------

    def writer(self, rows: int = 0) -> "Bm25Writer":
        """A writer for a batch of about `rows` rows."""
        return Bm25Writer(self, _BULK_WRITER_HEAP_BYTES if rows >= _BULK_ROWS else _WRITER_HEAP_BYTES)

    # --- reading -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """See commits made since the last search (by this or another process).

        Every commit rewrites Tantivy's meta.json (its opstamp grows): while its bytes stand, the
        searcher in hand is the current one and is kept (`reader`), with what callers read
        through it.
        """
        with self._searcher_lock:
            meta = _meta_bytes(self.folder)  # before the reload: a commit in between reloads again next time
            if meta is not None and meta == self._reloaded_at:
                return
            if self._read_only and meta_stamp(self.folder) != self._snapshot_stamp:
                self._index = self._open_tantivy(self.folder, create=False)  # committed elsewhere: copy again
            try:
                self._index.reload()
            except ValueError as exc:
                if not _read_only_file_system(exc):
                    raise
                return  # the file system went read-only under us: nobody can commit, the index we hold is current
            self._searcher = None
            self._reloaded_at = meta

    def _current_searcher(self) -> tantivy.Searcher:
        # under the lock: a searcher made from the index before a refresh is never kept after it
        with self._searcher_lock:
            if self._searcher is None:
                self._searcher = self._index.searcher()
            return self._searcher

    def doc_freqs(self, field: str, terms: Iterable[str]) -> tuple[int, dict[str, int]]:
        """(rows counted by BM25's statistics, deleted ones included; each term's document
        frequency in `field`): what a score computed outside Tantivy needs (indexer/engine/overlay.py)."""
        searcher = self._current_searcher()
        total = sum(searcher.doc_freq("kind", kind) for kind in KINDS)
        return total, {term: searcher.doc_freq(field, term) for term in set(terms)}

    def count(self) -> int:
        return self._current_searcher().num_docs

    def count_kind(self, kind: str) -> int:
        """Live rows of one kind ("curated" or "audit")."""
        query = tantivy.Query.term_query(self.schema, "kind", kind)
        return self._current_searcher().search(query, 1, count=True).count

    def search(self, query: str, limit: int, kinds: Iterable[str] = ("curated",)) -> list[Bm25Hit]:
        keys, docs = self.search_docs(query, limit, kinds)
        return [row_of(docs[key], score) for key, score in keys]

    def search_keys(self, query: str, limit: int, kinds: Iterable[str] = ("curated",)) -> list[tuple[str, float]]:
        """(row key, BM25 score), best first, ties by key; cheaper than full rows for fusion."""
        return self.search_docs(query, limit, kinds)[0]

    def search_docs(
        self, query: str, limit: int, kinds: Iterable[str] = ("curated",)
    ) -> tuple[list[tuple[str, float]], dict[str, tantivy.Document]]:
        """`search_keys`, plus each hit's stored document (read for its key anyway): `row_of` and
        `passage_of` turn one into a row or a (text, context) pair without another lookup.

        No search here counts its matches (`count=False`): tantivy-py counts by default, and a
        count visits every match, which defeats the top-k pruning (a sixth of a 100k-row search)."""
        parsed = self.build_query(query, kinds)
        if parsed is None or limit <= 0:
            return [], {}
        searcher = self._current_searcher()
        hits, docs = [], {}
        for score, address in searcher.search(parsed, limit, count=False).hits:
            doc = searcher.doc(address)
            key = doc["key"][0]
            hits.append((key, float(score)))
            docs[key] = doc
        return sorted(hits, key=lambda hit: (-hit[1], hit[0])), docs

    def find_by_content_hash(self, content_hash: str, kind: str = "curated") -> Bm25Hit | None:
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "chash", content_hash)),
                (tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "kind", kind)),
            ]
        )
        searcher = self._current_searcher()
        hits = [self._hit(searcher, 0.0, address) for _, address in searcher.search(query, 16, count=False).hits]
        return min(hits, key=lambda hit: hit.key) if hits else None

    def sources_by_content_hash(self, hashes: list[str], kind: str = "curated") -> dict[str, list[str]]:
        """Every row source (`daily/…md#^id`) holding each content hash, sorted; one query for all."""
        if not hashes:
            return {}
        query = tantivy.Query.boolean_query(
            [
                (tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "kind", kind)),
                (
                    tantivy.Occur.Must,
                    tantivy.Query.boolean_query(
                        [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "chash", h)) for h in set(hashes)]
                    ),
                ),
            ]
        )
        searcher = self._current_searcher()
        found: dict[str, list[str]] = {}
        stored = sum(searcher.doc_freq("chash", h) for h in set(hashes))  # counts deleted rows too: a bound
        for _, address in searcher.search(query, max(stored, 1), count=False).hits:
            row = row_of(searcher.doc(address))
            found.setdefault(row.content_hash, []).append(row.source)
        return {h: sorted(sources) for h, sources in found.items()}

    def get_by_keys(self, keys: list[str]) -> dict[str, Bm25Hit]:
        """Stored rows for these keys (absent keys are simply missing from the result)."""
        return {key: row_of(doc) for key, doc in self.docs_by_keys(keys).items()}

    def docs_by_keys(self, keys: list[str]) -> dict[str, tantivy.Document]:
        """Stored documents for these keys (absent keys are simply missing from the result)."""
        if not keys:
            return {}
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(self.schema, "key", key)) for key in keys]
        )
        searcher = self._current_searcher()
        docs = (searcher.doc(address) for _, address in searcher.search(query, len(keys), count=False).hits)
        return {doc["key"][0]: doc for doc in docs}

    def reader(self) -> tantivy.Searcher:
        """The searcher reads go through now: the same object until a commit is seen (`refresh`)."""
        return self._current_searcher()

    def hits_for_path(self, path: str, reader: tantivy.Searcher | None = None) -> list[Bm25Hit]:
        """Every live row of one note file (through `reader`, or the current searcher)."""
        searcher = reader if reader is not None else self._current_searcher()
        stored = searcher.doc_freq("path", path)  # counts deleted rows too: an upper bound
        if stored == 0:
            return []
        query = tantivy.Query.term_query(self.schema, "path", path)
        return [self._hit(searcher, 0.0, address) for _, address in searcher.search(query, stored, count=False).hits]

    def all_hits(self) -> list[Bm25Hit]:
        """Every live row (loads every stored document: for health and tests, not hot paths)."""
        searcher = self._current_searcher()
        if searcher.num_docs == 0:
            return []
        result = searcher.search(tantivy.Query.all_query(), searcher.num_docs, count=False)
        return [self._hit(searcher, 0.0, address) for _, address in result.hits]

    def term_counts(self, field: str, kind: str | None = None) -> dict[str, int]:
        """Live rows per value of a raw field (optionally of one kind), from the term dictionary:
        no document is loaded."""
        searcher = self._current_searcher()
        if searcher.num_docs == 0:
            return {}
        live = tantivy.Query.all_query() if kind is None else tantivy.Query.term_query(self.schema, "kind", kind)
        return {value: count for value, count in searcher.terms_with_prefix(field, "", filter_query=live) if count}

    def deleted_rows(self) -> int:
        """Rows deleted but still counted in BM25 statistics until Tantivy merges them away."""
        searcher = self._current_searcher()
        stored = sum(searcher.doc_freq("kind", kind) for kind in KINDS)
        return max(0, stored - searcher.num_docs)

    def build_query(self, text: str, kinds: Iterable[str]) -> tantivy.Query | None:
        content = query_words(text)
        should = tantivy.Occur.Should
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        if content:
            parsed, _errors = self._index.parse_query_lenient(
                " ".join(content), ["text", "ctx"], field_boosts={"text": 1.0, "ctx": CONTEXT_BOOST}
            )
            clauses.append((should, parsed))
        clauses += [(should, tantivy.Query.term_query(self.schema, "cjk", g)) for g in query_bigrams(text)]
        if not clauses:
            return None
        # excluding the other kinds (MustNot) keeps Tantivy's fast top-k path; a Must filter on a
        # term every document carries would not
        excluded = [kind for kind in KINDS if kind not in set(kinds)]
        clauses += [(tantivy.Occur.MustNot, tantivy.Query.term_query(self.schema, "kind", k)) for k in excluded]
        return tantivy.Query.boolean_query(clauses)

    def _hit(self, searcher: tantivy.Searcher, score: float, address) -> Bm25Hit:
        return row_of(searcher.doc(address), score)


_analyzers = threading.local()


def stemmed_terms(text: str) -> list[str]:
    """The terms `en_stem` makes of text, as Tantivy builds that tokenizer: simple tokenizer,
    words over 40 bytes dropped, lower-cased, English Snowball stemmer."""
    analyzer = getattr(_analyzers, "en_stem", None)
    if analyzer is None:  # one per thread: the analyzer keeps per-call state
        analyzer = (tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.remove_long(40))
                    .filter(tantivy.Filter.lowercase()).filter(tantivy.Filter.stemmer("english")).build())  # fmt: skip
        _analyzers.en_stem = analyzer
    return analyzer.analyze(text)


def query_words(text: str) -> list[str]:
    """The words of user text a BM25 query searches for (stopwords dropped when others remain)."""
    words = [w for w in WORD_RE.findall(text) if not CJK_RUN_RE.fullmatch(w)]
    content = [w for w in words if w.lower() not in STOPWORDS] or words
    return [w.lower() if w in _QUERY_OPERATORS else w for w in content][:MAX_QUERY_WORDS]


def query_bigrams(text: str) -> list[str]:
    """The CJK bigrams of user text a BM25 query searches for."""
    return cjk_bigrams(text)[:MAX_QUERY_WORDS]


def document_of(record: MemoryRecord) -> tantivy.Document:
    """The stored document of one record (what the writer adds; `row_of` reads it back)."""
    return tantivy.Document(
        key=record_key(record.path, record.id),
        id=record.id,
        path=record.path,
        kind=record.kind,
        day=record.day.isoformat(),
        chash=record.content_hash,
        text=record.text,
        ctx=record.context,
        ctxh=context_hash(record.context),
        cjk=" ".join(cjk_bigrams(record.text)),
        at=int(record.at.timestamp()),
    )


def row_of(doc: tantivy.Document, score: float = 0.0) -> Bm25Hit:
    """The row a stored document holds."""
    text, context = passage_of(doc)
    return Bm25Hit(
        key=doc["key"][0],
        id=doc["id"][0],
        path=doc["path"][0],
        kind=doc["kind"][0],
        day=date.fromisoformat(doc["day"][0]),
        at=datetime.fromtimestamp(doc["at"][0], UTC),
        text=text,
        content_hash=doc["chash"][0],
        score=float(score),
        context_hash=doc["ctxh"][0],
        context=context,
    )


def passage_of(doc: tantivy.Document) -> tuple[str, str]:
    """A stored document's (text, context); an empty context may be stored as no value at all."""
    return doc["text"][0], (doc.get_all("ctx") or [""])[0]


#: free space below which a writer that died of an unnamed I/O error is taken to have hit a full disk
_LOW_SPACE_BYTES = 1024 * 1024
_OS_ERROR_RE = re.compile(r"\(os error (\d{1,4})\)|\bOs \{ code: (\d{1,4}),")


def raise_storage_refusal(exc: ValueError, folder: Path) -> None:
    """Tantivy reports a full disk or a read-only folder as a ValueError whose text carries
    "(os error 28)" or "Os { code: 28, ...": raise it as the StorageError it is (naming the folder), else return."""
    found = _OS_ERROR_RE.search(str(exc))
    if found is not None:
        code = int(found.group(1) or found.group(2))
    elif "io" in str(exc).lower() and _disk_full(folder):  # "An index writer was killed ... io::Error"
        code = errno.ENOSPC
    else:
        return
    typed = storage_error(OSError(code, str(exc), str(folder)))
    if typed is not None:
        raise typed from exc


@contextmanager
def tantivy_refusals(folder: Path) -> Iterator[None]:
    """`raise_storage_refusal` for every Tantivy call inside the block."""
    try:
        yield
    except ValueError as exc:
        raise_storage_refusal(exc, folder)
        raise


def _disk_full(folder: Path) -> bool:
    """Tantivy's writer threads die without naming their errno; a device with (almost) no free
    block left is the cause a person can fix."""
    try:
        info = os.statvfs(folder)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < _LOW_SPACE_BYTES


class Bm25Writer:
    """Batch of adds/deletes committed together on `commit()` (or discarded on `rollback()`)."""

    def __init__(self, index: Bm25Index, heap_size: int = _WRITER_HEAP_BYTES):
        self._index = index
        try:
            self._writer = index._index.writer(heap_size=heap_size, num_threads=1)
        except ValueError as exc:
            raise_storage_refusal(exc, index.folder)
            raise IndexUnavailable(
                f"cannot open a writer on {index.folder} ({exc}): another process may be writing; retry"
            ) from exc

    def delete_key(self, key: str) -> None:
        with tantivy_refusals(self._index.folder):
            self._writer.delete_documents_by_term("key", key)

    def add(self, records: Iterable[MemoryRecord]) -> int:
        with tantivy_refusals(self._index.folder):
            return self._add(records)

    def _add(self, records: Iterable[MemoryRecord]) -> int:
        count = 0
        for record in records:
            self._writer.add_document(document_of(record))
            count += 1
        return count

    def commit(self) -> None:
        with tantivy_refusals(self._index.folder):
            self._writer.commit()
            self._writer.wait_merging_threads()
        restrict_files(self._index.folder)  # Tantivy creates its files with the umask's mode
        self._writer = None  # releases Tantivy's writer lock now, not at garbage collection
        self._index.refresh()

    def rollback(self) -> None:
        if self._writer is not None:
            self._writer.rollback()
            self._writer = None

    def __enter__(self) -> "Bm25Writer":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.rollback()


def _read_only_file_system(exc: ValueError) -> bool:
    """Tantivy reports an OS error as a ValueError carrying the Rust io::Error's kind."""
    return "ReadOnlyFilesystem" in str(exc) or "Read-only file system" in str(exc)
