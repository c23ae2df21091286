"""The pending rows' BM25 (indexer/engine/overlay.py) visits only the rows holding a query term:
its scores must equal, to the bit, Tantivy's formula summed over every pending row as written out
here, and its content-hash lookups must equal a scan of every row."""

from __future__ import annotations

import math
import random

import pytest

from memvault.indexer.engine.overlay import K1, B
from memvault.indexer.search.bm25 import CONTEXT_BOOST, query_bigrams, query_words, stemmed_terms
from memvault.vault.ids import content_hash
from tests.intake_helpers import make_vault as make_local_vault

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

WORDS = [
    "harbour",
    "pier",
    "ledger",
    "flour",
    "dinghy",
    "green",
    "captain",
    "cook",
    "stored",
    "painted",
    "港口",
    "船长",
    "the",
    "a",
    "log",
    "eastern",
]


def reference_scores(overlay, query: str, kinds: tuple[str, ...]) -> list[tuple[str, float]]:
    rows = [row for row in overlay._rows.values() if row.record.kind in kinds]
    words = [term for word in query_words(query) for term in stemmed_terms(word)]
    grams = query_bigrams(query)
    fields = (
        ("text", "text_terms", 1.0, words),
        ("ctx", "ctx_terms", CONTEXT_BOOST, words),
        ("cjk", "cjk_terms", 1.0, grams),
    )
    weights = []
    for name, attribute, _, terms in fields:
        if not terms:
            weights.append(({}, 1.0))
            continue
        total, frequencies = overlay._base.doc_freqs(name, terms)
        total += len(overlay._rows)
        idf = {}
        for term in set(terms):
            frequency = frequencies.get(term, 0) + sum(1 for row in rows if getattr(row, attribute).get(term))
            idf[term] = math.log(1 + (total - frequency + 0.5) / (frequency + 0.5))
        weights.append((idf, max(1.0, sum(sum(getattr(row, attribute).values()) for row in rows) / len(rows))))
    scored = []
    for row in rows:
        score = 0.0
        for (_, attribute, boost, terms), (idf, average) in zip(fields, weights, strict=True):
            counts = getattr(row, attribute)
            length = sum(counts.values())
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += boost * idf[term] * (1 + K1) * tf / (tf + K1 * (1 - B + B * length / average))
        if score > 0:
            scored.append((row.key, score))
    return scored


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", range(4))
def test_pending_rows_score_as_a_scan_of_every_row_would(tmp_path, seed):
    from memvault import MemoryStore

    rng = random.Random(seed)
    root = make_local_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.remember_many([" ".join(rng.choices(WORDS, k=rng.randint(3, 9))) + f" {n}." for n in range(40)])
        store.defers_index_commits = True
        facts = [" ".join(rng.choices(WORDS, k=rng.randint(1, 12))) + f" p{n}." for n in range(60)]
        for fact in facts:
            store.remember(fact)
        overlay = store._deferred.view(store.serving_index().bm25)
        assert len(overlay._rows) >= 50
        scored = 0
        for _ in range(25):
            query = " ".join(rng.choices(WORDS, k=rng.randint(1, 5)))
            expected = reference_scores(overlay, query, ("curated",))
            assert overlay._scores(query, ("curated",)) == expected
            scored += len(expected)
        assert scored > 100  # the queries found pending rows: the comparison is not of empty lists
        assert overlay._scores("harbour", ("audit",)) == []
        digests = [content_hash(fact) for fact in rng.sample(facts, 5)] + ["0" * 64]
        scanned = {
            d: sorted(r.record.source for r in overlay._rows.values() if r.record.content_hash == d) for d in digests
        }
        found = overlay.sources_by_content_hash(digests)
        assert {d: found[d] for d in digests if d in found} == {d: s for d, s in scanned.items() if s}
        for digest in digests[:5]:
            assert overlay.find_by_content_hash(digest).content_hash == digest
        assert overlay.find_by_content_hash("0" * 64) is None


@pytest.mark.both_backends
def test_a_save_that_moves_pending_lines_keeps_their_terms_and_scores_as_a_scan_would(tmp_path):
    """A person's save of the day's note hands its pending rows to the deferred set again (their
    lines moved): a row whose words and neighbours are the same keeps the terms counted when it
    was added (a save at 15 Hz counted every pending row's words again), one whose text changed
    is counted afresh, and scores still equal a scan of every row."""
    from memvault import MemoryStore

    root = make_local_vault(tmp_path, mode="journal")
    with MemoryStore.open(root, engine=False) as store:
        store.remember_many([f"stored flour in the eastern log {n}." for n in range(10)])
        store.defers_index_commits = True
        for n in range(8):
            store.remember(f"harbour pier {n} ledger")
        [path] = {row.record.path for row in store._deferred.rows.values()}
        note = root / path
        note.write_text(note.read_text() + "- 08:30 a person's own line\n")
        store.sync([path], defer=True)  # the rows as read from the note, their neighbours with them
        before = dict(store._deferred.rows)
        lines = note.read_text().splitlines(keepends=True)
        first = next(i for i, line in enumerate(lines) if line.startswith("- "))
        lines.insert(first, "- 08:00 the captain painted the dinghy green\n")  # every line below moves
        lines = [line.replace("harbour pier 7 ledger", "harbour pier 7 ledger cook") for line in lines]
        note.write_text("".join(lines))
        store.sync([path], defer=True)
        after = store._deferred.rows
        kept = [
            key
            for key, row in before.items()
            if after[key].record.text == row.record.text and after[key].record.context == row.record.context
        ]
        assert len(kept) >= 4  # moved a line down: rows hold no line, so they are as they were
        assert all(after[key].text_terms is before[key].text_terms for key in kept)
        [edited] = [row for row in after.values() if row.record.text.startswith("harbour pier 7")]
        assert edited.text_terms["cook"] == 1
        overlay = store._deferred.view(store.serving_index().bm25)
        for query in ("harbour pier", "cook ledger", "captain dinghy", "pier 7"):
            assert overlay._scores(query, ("curated",)) == reference_scores(overlay, query, ("curated",))
