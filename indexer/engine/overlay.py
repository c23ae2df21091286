"""Near-real-time reads: memories acknowledged but not yet in the committed index, searched beside it.

The owner acknowledges a Remember once its daily note is durable and commits the index later,
on a timer (indexer/engine/deferred.py). Until that commit, the memory's row lives here, in
memory, and every read through the owner searches it beside the committed index (as Lucene's
near-real-time readers and Elasticsearch's refresh do), so reads never wait for an index commit
and still see every acknowledged write, whichever client wrote it.

`OverlayBm25` has the read methods recall uses (`search_docs`, `docs_by_keys`, `get_by_keys`,
`sources_by_content_hash`, `find_by_content_hash`) and answers them from both: a pending row
shadows a committed row with the same key (the commit in flight may already hold it), and
pending rows are scored by BM25 with the committed index's document frequencies and row count
plus their own (Tantivy's formula, k1 1.2, b 0.75, the same field boosts), so a fresh memory
ranks among committed ones as it will once committed. Field lengths are averaged over the
pending rows (Tantivy does not expose its totals), and a pending row's neighbour context is
empty until the commit: two small differences, for well under a second.

Vectors for pending rows arrive with the commit (the semantic queue follows committed deltas);
BM25 alone finds a pending memory meanwhile. The overlay is never the only copy of anything:
the note is durable first, and a restarted owner's sync indexes what a crash left uncommitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from memvault.indexer.search.bm25 import (
    CONTEXT_BOOST,
    cjk_bigrams,
    document_of,
    query_bigrams,
    query_words,
    record_key,
    row_of,
    stemmed_terms,
)
from memvault.vault.clock import bullet_instant, zone
from memvault.vault.errors import InvalidRecord
from memvault.vault.ids import content_hash
from memvault.vault.layout import NOTE_KINDS, parse_note_relpath
from memvault.vault.plaintext import plain_text
from memvault.vault.records import MemoryRecord

#: Tantivy's BM25 constants
K1, B = 1.2, 0.75


def _terms(text: str) -> list[str]:
    return stemmed_terms(text) if text else []


def pending_record(
    relpath: str, block_id: str, fact: str, wall_time: str | None, note_zone: str
) -> MemoryRecord | None:
    """The row a just-written bullet will have once committed (context aside), or None for a
    path that is not a note."""
    parsed = parse_note_relpath(relpath)
    if parsed is None:
        return None
    folder, day = parsed
    try:
        tz = zone(note_zone)
    except InvalidRecord:
        return None
    text = plain_text(fact)
    if not text:
        return None
    return MemoryRecord(id=block_id, path=relpath, kind=NOTE_KINDS[folder], day=day,
                        at=bullet_instant(day, wall_time, tz), text=text, content_hash=content_hash(fact),
                        heading=None, explicit_id=True)  # fmt: skip


@dataclass(frozen=True)
class PendingRow:
    """One pending record with what scoring it needs, computed once when it is added."""

    record: MemoryRecord
    document: object  # the stored document `row_of` reads
    text_terms: Counter = field(default_factory=Counter)
    ctx_terms: Counter = field(default_factory=Counter)
    cjk_terms: Counter = field(default_factory=Counter)
    version: int = 0  # the deferred set's version when it was added

    @classmethod
    def of(cls, record: MemoryRecord, version: int = 0) -> PendingRow:
        return cls(
            record,
            document_of(record),
            Counter(_terms(record.text)),
            Counter(_terms(record.context)),
            Counter(cjk_bigrams(record.text)),
            version,
        )

    @classmethod
    def again(cls, before: PendingRow | None, record: MemoryRecord, version: int) -> PendingRow:
        """`of`, keeping `before`'s terms when its record has the same words (a line that moved)."""
        if before is None or before.record.text != record.text or before.record.context != record.context:
            return cls.of(record, version)
        return dataclasses.replace(before, record=record, document=document_of(record), version=version)

    @property
    def key(self) -> str:
        return record_key(self.record.path, self.record.id)


class OverlayBm25:
    """The committed BM25 index with the pending rows beside it (read methods only; anything
    else is the committed index's own)."""

    def __init__(self, base, rows: dict[str, PendingRow]):
        self._base = base
        self._rows = rows  # a snapshot: the deferred set replaces its dict, never changes it

    def __getattr__(self, name: str):
        return getattr(self._base, name)

    def search_docs(self, query: str, limit: int, kinds: Iterable[str] = ("curated",)):
        kinds = tuple(kinds)
        keys, docs = self._base.search_docs(query, limit, kinds)
        merged = {key: score for key, score in keys if key not in self._rows}
        for key, score in self._scores(query, kinds):
            merged[key] = score
            docs[key] = self._rows[key].document
        ranked = sorted(merged.items(), key=lambda hit: (-hit[1], hit[0]))[: max(limit, 0)]
        return ranked, {key: docs[key] for key, _ in ranked}

    def search_keys(self, query: str, limit: int, kinds: Iterable[str] = ("curated",)):
        return self.search_docs(query, limit, kinds)[0]

    def search(self, query: str, limit: int, kinds: Iterable[str] = ("curated",)):
        keys, docs = self.search_docs(query, limit, kinds)
        return [row_of(docs[key], score) for key, score in keys]

    def docs_by_keys(self, keys: list[str]) -> dict:
        found = self._base.docs_by_keys([key for key in keys if key not in self._rows])
        found.update({key: self._rows[key].document for key in keys if key in self._rows})
        return found

    def get_by_keys(self, keys: list[str]) -> dict:
        return {key: row_of(doc) for key, doc in self.docs_by_keys(keys).items()}

    def sources_by_content_hash(self, hashes: list[str], kind: str = "curated") -> dict[str, list[str]]:
        found = {digest: set(sources) for digest, sources in self._base.sources_by_content_hash(hashes, kind).items()}
        by_hash = _snapshot(self._rows).by_hash
        for digest in set(hashes):
            for row in by_hash.get(digest, ()):
                if row.record.kind == kind:
                    found.setdefault(digest, set()).add(row.record.source)
        return {digest: sorted(sources) for digest, sources in found.items()}

    def find_by_content_hash(self, digest: str, kind: str = "curated"):
        hits = [
            row_of(row.document) for row in _snapshot(self._rows).by_hash.get(digest, ()) if row.record.kind == kind
        ]
        committed = self._base.find_by_content_hash(digest, kind)
        if committed is not None:
            hits.append(committed)
        return min(hits, key=lambda hit: hit.key) if hits else None

    # --- scoring -------------------------------------------------------------------------------

    def _scores(self, query: str, kinds: tuple[str, ...]) -> list[tuple[str, float]]:
        """BM25 of the pending rows of these kinds that hold a query term, in the rows' order.
        Only the rows in a term's postings are visited; each row's terms are added in the same
        order as a loop over every row would add them, so the sums are the same to the bit."""
        fields = _snapshot(self._rows).fields(kinds)
        if fields is None:
            return []
        words = [term for word in query_words(query) for term in _terms(word)]
        grams = query_bigrams(query)
        if not words and not grams:
            return []
        rows, postings_by_field = fields
        scores = [0.0] * len(rows)
        for (name, boost, terms), (postings, lengths, total) in zip(
            (("text", 1.0, words), ("ctx", CONTEXT_BOOST, words), ("cjk", 1.0, grams)), postings_by_field, strict=True
        ):
            if not terms:
                continue
            committed, frequencies = self._base.doc_freqs(name, terms)
            count = committed + len(self._rows)
            idf = {}
            for term in set(terms):  # over committed and pending rows together
                frequency = frequencies.get(term, 0) + len(postings.get(term, ()))
                idf[term] = math.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
            average = max(1.0, total / len(rows))
            for term in terms:
                for position, tf in postings.get(term, ()):
                    norm = K1 * (1 - B + B * lengths[position] / average)
                    scores[position] += boost * idf[term] * (1 + K1) * tf / (tf + norm)
        return [(row.key, score) for row, score in zip(rows, scores, strict=True) if score > 0]


class _Snapshot:
    """What reads need of one set of pending rows, made once per set (the deferred set replaces
    its dict on every change, never edits it): the rows by content hash, and per kinds asked the
    rows' term postings, so a search visits the rows holding its terms, not every pending row."""

    _FIELDS = ("text_terms", "ctx_terms", "cjk_terms")

    def __init__(self, rows: dict[str, PendingRow]):
        by_hash: dict[str, list[PendingRow]] = {}
        for row in rows.values():
            by_hash.setdefault(row.record.content_hash, []).append(row)
        self.by_hash = by_hash
        self._rows = rows
        self._fields: dict[tuple[str, ...], tuple | None] = {}

    def fields(self, kinds: tuple[str, ...]):
        """(rows of these kinds, per field (postings term → [(row position, tf)], row lengths,
        their total)), or None when no row is of these kinds."""
        if kinds not in self._fields:
            rows = [row for row in self._rows.values() if row.record.kind in kinds]
            self._fields[kinds] = (rows, [_postings(rows, attribute) for attribute in self._FIELDS]) if rows else None
        return self._fields[kinds]


def _postings(rows: list[PendingRow], attribute: str):
    postings: dict[str, list[tuple[int, int]]] = {}
    lengths = []
    for position, row in enumerate(rows):
        counts = getattr(row, attribute)
        lengths.append(sum(counts.values()))
        for term, tf in counts.items():
            if tf:
                postings.setdefault(term, []).append((position, tf))
    return postings, lengths, sum(lengths)


#: the snapshot of the newest pending rows: (those rows, their snapshot), replaced as one
_latest: tuple[dict, _Snapshot] | None = None


def _snapshot(rows: dict[str, PendingRow]) -> _Snapshot:
    global _latest
    latest = _latest
    if latest is not None and latest[0] is rows:
        return latest[1]
    made = _Snapshot(rows)
    _latest = (rows, made)
    return made


def overlay_of(base, rows: dict[str, PendingRow]):
    """The committed index alone while nothing is pending (no cost for an idle owner)."""
    return base if not rows else OverlayBm25(base, rows)
