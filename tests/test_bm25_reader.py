"""The BM25 reader keeps its searcher while nothing is committed, and sees every commit made
by another process (indexer/search/bm25.py `refresh`)."""

import subprocess
import sys
from datetime import UTC, date, datetime

from memvault.indexer.search.bm25 import Bm25Index
from memvault.vault.ids import content_hash
from memvault.vault.records import MemoryRecord

NOTE = "daily/2026-11-30.md"

WRITER = """
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from memvault.indexer.search.bm25 import Bm25Index
from memvault.vault.ids import content_hash
from memvault.vault.records import MemoryRecord
index = Bm25Index(Path(sys.argv[1]))
for n in range(int(sys.argv[2]), int(sys.argv[3])):
    text = f"memory number {n} about quince jam"
    record = MemoryRecord(f"m-{n:04d}", "daily/2026-11-30.md", "curated", date(2026, 11, 30),
                          datetime(2026, 11, 30, 9, n % 60, tzinfo=timezone.utc), text,
                          content_hash(text), None, False)
    with index.writer() as writer:
        writer.add([record])
        writer.commit()
    print(n, flush=True)
"""


def _record(n: int) -> MemoryRecord:
    text = f"memory number {n} about quince jam"
    return MemoryRecord(
        f"m-{n:04d}",
        NOTE,
        "curated",
        date(2026, 11, 30),
        datetime(2026, 11, 30, 9, n % 60, tzinfo=UTC),
        text,
        content_hash(text),
        None,
        False,
    )


def _ids(index: Bm25Index) -> set[str]:
    return {hit.key.rpartition("#")[2] for hit in index.hits_for_path(NOTE)}


def test_a_refresh_with_nothing_committed_keeps_the_searcher_and_a_commit_elsewhere_is_seen(tmp_path):
    folder = tmp_path / "bm25"
    index = Bm25Index(folder, create=True)
    with index.writer() as writer:
        writer.add([_record(0)])
        writer.commit()
    index.refresh()
    assert _ids(index) == {"m-0000"}
    searcher = index._current_searcher()
    index.refresh()
    assert index._current_searcher() is searcher  # nothing committed: the reader is not rebuilt

    # another process commits one memory at a time; after each of its commits a refresh sees it
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), "1", "6"], stdout=subprocess.PIPE, text=True)
    seen = {"m-0000"}
    for line in writer.stdout:
        seen.add(f"m-{int(line):04d}")
        index.refresh()
        assert _ids(index) == seen
    assert writer.wait() == 0
    assert len(seen) == 6
    searcher = index._current_searcher()
    index.refresh()
    assert index._current_searcher() is searcher
