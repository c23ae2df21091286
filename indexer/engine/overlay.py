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


def pending_record(relpath: str, block_id: str, fact: str, wall_time: str | None, note_zone: str) -> MemoryRecord | None:
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
    return MemoryRecord(id=block_id, path=relpath, kind=NOTE_KINDS[folder], day=day, at=bullet_instant(day, wall_time, tz),
                        text=text, content_hash=content_hash(fact), line=0, heading=None, explicit_id=True)  # fmt: skip


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
        return cls(record, document_of(record), Counter(_terms(record.text)), Counter(_terms(record.context)),
                   Counter(cjk_bigrams(record.text)), version)

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
        wanted = set(hashes)
        for row in self._rows.values():
            if row.record.kind == kind and row.record.content_hash in wanted:
                found.setdefault(row.record.content_hash, set()).add(row.record.source)
        return {digest: sorted(sources) for digest, sources in found.items()}

    def find_by_content_hash(self, digest: str, kind: str = "curated"):
        hits = [row_of(row.document) for row in self._rows.values()
                if row.record.kind == kind and row.record.content_hash == digest]  # fmt: skip
        committed = self._base.find_by_content_hash(digest, kind)
        if committed is not None:
            hits.append(committed)
        return min(hits, key=lambda hit: hit.key) if hits else None

    # --- scoring -------------------------------------------------------------------------------

    def _scores(self, query: str, kinds: tuple[str, ...]) -> list[tuple[str, float]]:
        rows = [row for row in self._rows.values() if row.record.kind in kinds]
        if not rows:
            return []
        words = [term for word in query_words(query) for term in _terms(word)]
        grams = query_bigrams(query)
        if not words and not grams:
            return []
        scored = []
        fields = (("text", "text_terms", 1.0, words), ("ctx", "ctx_terms", CONTEXT_BOOST, words),
                  ("cjk", "cjk_terms", 1.0, grams))  # fmt: skip
        weights = [self._field_weights(rows, name, attribute, terms) for name, attribute, _, terms in fields]
        for row in rows:
            score = 0.0
            for (_, attribute, boost, terms), (idf, average) in zip(fields, weights):
                counts = getattr(row, attribute)
                length = sum(counts.values())
                for term in terms:
                    tf = counts.get(term, 0)
                    if tf:
                        norm = K1 * (1 - B + B * length / average)
                        score += boost * idf[term] * (1 + K1) * tf / (tf + norm)
            if score > 0:
                scored.append((row.key, score))
        return scored

    def _field_weights(self, rows: list[PendingRow], name: str, attribute: str, terms: list[str]):
        """Each term's idf over committed and pending rows together, and the pending rows' mean length."""
        if not terms:
            return {}, 1.0
        total, frequencies = self._base.doc_freqs(name, terms)
        total += len(self._rows)
        idf = {}
        for term in set(terms):
            frequency = frequencies.get(term, 0) + sum(1 for row in rows if getattr(row, attribute).get(term))
            idf[term] = math.log(1 + (total - frequency + 0.5) / (frequency + 0.5))
        average = max(1.0, sum(sum(getattr(row, attribute).values()) for row in rows) / len(rows))
        return idf, average


def overlay_of(base, rows: dict[str, PendingRow]):
    """The committed index alone while nothing is pending (no cost for an idle owner)."""
    return base if not rows else OverlayBm25(base, rows)
