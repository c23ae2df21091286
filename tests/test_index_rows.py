"""The rows a DerivedIndex knows of a note after applying it (indexer/maintenance/derived.py
`rows_of`, kept per BM25 reader) are the rows Tantivy holds, through appends, edits by hand
and another process's commits."""

import subprocess
import sys
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from memvault import MemoryStore
from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.vault.layout import VaultLayout
from tests import postgres_helpers

AT = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Europe/Amsterdam"))
NOTE = "daily/2026-11-30.md"


def _as_tantivy_holds(root) -> dict:
    """The note's rows as the index holds them, read by a new object: from Tantivy, or from the
    server by another store's connection."""
    if postgres_helpers.TEST_BACKEND == "local":
        return DerivedIndex.open_current(VaultLayout(root)).rows_of(NOTE)
    with MemoryStore.open(root, sync=False) as other:
        return other.serving_index().rows_of(NOTE)


@pytest.mark.both_backends
def test_the_rows_known_after_each_change_are_the_rows_tantivy_holds(new_vault):
    with MemoryStore.open(new_vault) as store:

        def check():
            known = store.writable_index().rows_of(NOTE)
            assert known == _as_tantivy_holds(new_vault)
            return known

        for n in range(4):
            store.remember(f"Memory number {n} about the quince harvest.", at=AT)
            check()
        note = new_vault / NOTE
        note.write_text(note.read_text().replace("number 1 ", "number one ").replace("number 2 ", "number two "))
        store.sync([NOTE])
        rows = check()
        assert {row.text for row in rows.values()} == {
            f"Memory number {n} about the quince harvest." for n in ("0", "one", "two", "3")
        }
        # another process commits to the same index; the next read here sees its rows
        subprocess.run(
            [
                sys.executable,
                "-m",
                "memvault",
                "--vault",
                str(new_vault),
                "remember",
                "--at",
                "2026-11-30T10:00:00+01:00",
                "A memory from another process.",
            ],
            check=True,
            capture_output=True,
        )
        store.sync([NOTE])
        rows = check()
        assert "A memory from another process." in {row.text for row in rows.values()}
        store.remember("Memory number 5 after it.", at=AT)
        assert len(check()) == 6


@pytest.mark.both_backends
def test_a_records_row_is_made_once_and_always_equals_one_made_afresh(new_vault, monkeypatch):
    from dataclasses import replace

    from memvault.indexer.maintenance import sync
    from memvault.indexer.maintenance.derived import read_note_records
    from memvault.indexer.maintenance.sync import Row

    with MemoryStore.open(new_vault) as store:
        for n in range(5):
            store.remember(f"Memory number {n} about the quince harvest.", at=AT)
        records = read_note_records(VaultLayout(new_vault), NOTE, "Europe/Amsterdam").records
    fresh = Row._made_of
    made = []
    monkeypatch.setattr(Row, "_made_of", lambda record: made.append(record) or fresh(record))
    sync._ROWS_MADE.clear()
    for _ in range(3):
        assert [Row.of_record(record) for record in records] == [fresh(record) for record in records]
    assert made == records  # each record's row was made once, then found by its record
    monkeypatch.setattr(sync, "_ROWS_MADE_MOST", 2)  # emptied whenever it fills: still exact
    for _ in range(3):
        assert [Row.of_record(record) for record in records] == [fresh(record) for record in records]
    edited = replace(records[0], text="Memory number zero about the quince harvest.", neighbours=("x",))
    assert Row.of_record(edited) == fresh(edited) != Row.of_record(records[0])
