"""The engine end to end on real files and a real Tantivy index: remember, recall, rebuild."""

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.vault.errors import CredentialRefused, InvalidRecord, NotAVault, UnsafePath
from memvault.vault.ids import memory_id
from tests.postgres_helpers import lose_the_index

AMS = ZoneInfo("Europe/Amsterdam")
QUERIES = [
    "deployment color",
    "Morgan",
    "peanuts allergy lunch",
    "09:14",
    "color:blue",
    '"unbalanced quote',
    "東京",
    "中文界面",
    "staging database",
    "AND OR NOT",
    "",
]


def snapshot(root: Path) -> dict[str, bytes]:
    """Every canonical byte of a vault (derived and lock state excluded)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not str(p.relative_to(root)).startswith((".index", ".locks"))
    }


def answers(store: MemoryStore) -> list:
    return [[(h.source, round(h.score, 5)) for h in store.recall(q, limit=10).hits] for q in QUERIES if q] + [
        store.recall("", limit=5).hits
    ]


@pytest.mark.both_backends
def test_fresh_vault_remember_then_search_finds_it(new_vault):
    with MemoryStore.open(new_vault) as store:
        receipt = store.remember(
            "Morgan chose blue as the deployment color.", at=datetime(2026, 11, 30, 14, 3, tzinfo=AMS)
        )
        result = store.recall("which color did we pick for deployment?")
    assert receipt.status == "added"
    assert receipt.source == f"daily/2026-11-30.md#^{memory_id('Morgan chose blue as the deployment color.')}"
    assert result.degraded is None
    top = result.hits[0]
    assert top.text == "Morgan chose blue as the deployment color."
    assert top.source == receipt.source
    assert top.at == datetime(2026, 11, 30, 13, 3, tzinfo=UTC)
    note = (new_vault / "daily/2026-11-30.md").read_text()
    assert note == f"# 2026-11-30\n\n- 14:03 Morgan chose blue as the deployment color. ^{receipt.id}\n"


@pytest.mark.both_backends
def test_remember_is_idempotent_by_content(new_vault):
    with MemoryStore.open(new_vault) as store:
        first = store.remember("Standup moved to 10:00.", at=datetime(2026, 11, 2, 9, 30, tzinfo=AMS))
        again = store.remember("  Standup   moved to 10:00. ", at=datetime(2026, 11, 5, 9, 30, tzinfo=AMS))
        assert store.recall("standup", limit=10).hits[0].source == first.source
        assert len(store.recall("standup", limit=10).hits) == 1
    assert (first.status, again.status) == ("added", "duplicate")
    assert again.source == first.source
    assert not (new_vault / "daily/2026-11-05.md").exists()


@pytest.mark.both_backends
def test_bullet_on_disk_without_index_row_is_completed_not_duplicated(new_vault):
    fact = "The pager rota changes on Monday."
    line = f"- 08:00 {fact} ^{memory_id(fact)}\n"
    with MemoryStore.open(new_vault) as store:
        store.remember("unrelated first fact", at=datetime(2026, 11, 30, 7, 0, tzinfo=AMS))
        # simulate a crash after the note write but before the index commit: the bullet is on
        # disk, the index (built before) does not have it, and the file stat still matches
        path = new_vault / "daily/2026-11-30.md"
        stat = path.stat()
        path.write_text(path.read_text() + line)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        os.truncate(path, path.stat().st_size)  # same content, size differs from manifest anyway
        receipt = store.remember(fact, at=datetime(2026, 11, 30, 8, 0, tzinfo=AMS))
    assert receipt.status in ("completed", "duplicate")
    assert (new_vault / "daily/2026-11-30.md").read_text().count(fact) == 1


@pytest.mark.both_backends
def test_completion_after_crash_uses_the_file_not_a_second_bullet(new_vault):
    fact = "Release 2.4 ships on Tuesday."
    with MemoryStore.open(new_vault) as store:
        store.remember("first", at=datetime(2026, 11, 30, 7, 0, tzinfo=AMS))
    path = new_vault / "daily/2026-11-30.md"
    path.write_text(path.read_text() + f"- 08:00 {fact} ^{memory_id(fact)}\n")
    with MemoryStore.open(new_vault, sync=False) as store:  # index does not know the bullet yet
        assert store.recall("Release 2.4").hits == ()
        receipt = store.remember(fact, at=datetime(2026, 11, 30, 8, 0, tzinfo=AMS))
        assert store.recall("Release 2.4").hits[0].source == receipt.source
    assert receipt.status == "completed"
    assert path.read_text().count(fact) == 1


@pytest.mark.both_backends
def test_credentials_are_refused_and_nothing_is_written(new_vault):
    before = snapshot(new_vault)
    with MemoryStore.open(new_vault) as store:
        for secret in (
            "the deploy key is AKIAIOSFODNN7EXAMPLE",
            "connect with postgres://admin:hunter2hunter2@db.internal/prod",
            "token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        ):
            with pytest.raises(CredentialRefused, match="nothing was written"):
                store.remember(secret)
    assert snapshot(new_vault) == before


@pytest.mark.parametrize(
    "bad, message",
    [("", "empty"), ("   \n\t ", "empty"), ("x" * 5000, "limit is 4096"), ("bell \x07 char", "control characters")],
)
@pytest.mark.both_backends
def test_bad_facts_are_refused_with_a_clear_error(new_vault, bad, message):
    before = snapshot(new_vault)
    with MemoryStore.open(new_vault) as store, pytest.raises(InvalidRecord, match=message):
        store.remember(bad)
    assert snapshot(new_vault) == before


@pytest.mark.both_backends
def test_naive_datetime_is_refused(new_vault):
    with MemoryStore.open(new_vault) as store, pytest.raises(InvalidRecord, match="timezone-aware"):
        store.remember("a fact", at=datetime(2026, 1, 1, 9, 0))


@pytest.mark.both_backends
def test_symlinked_daily_folder_is_refused(new_vault, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(new_vault / "daily")
    (new_vault / "daily").symlink_to(outside)
    with MemoryStore.open(new_vault) as store, pytest.raises(UnsafePath, match="symlink"):
        store.remember("should not escape", at=datetime(2026, 11, 30, 9, 0, tzinfo=AMS))
    assert list(outside.iterdir()) == []


def test_not_a_vault_names_the_fix(tmp_path):
    with pytest.raises(NotAVault, match="memvault init"):
        MemoryStore.open(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(NotAVault, match="memvault init"):
        MemoryStore.open(tmp_path / "plain")


@pytest.mark.both_backends
def test_vault_is_found_from_env_then_enclosing_folder(new_vault, monkeypatch):
    with MemoryStore.open(env={"MEMVAULT_MEMORY_PATH": str(new_vault)}) as store:
        assert store.layout.root == new_vault.resolve()
    (new_vault / "daily" / "deeper").mkdir()
    monkeypatch.chdir(new_vault / "daily" / "deeper")
    with MemoryStore.open() as store:
        assert store.layout.root == new_vault.resolve()


@pytest.mark.both_backends
def test_fixture_vault_search_respects_format(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        assert store.recall("東京").hits[0].source == "daily/2026-11-04.md#^m-tokyo0001"
        assert any("中文界面" in h.text for h in store.recall("中文界面").hits)
        # both sides of a conflict hunk stay memories (issue 44), and so does the rest of that file
        window = {h.text for h in store.recall("deployment window", limit=50).hits if "deployment window" in h.text}
        assert window == {"The deployment window is Tuesday evening.", "The deployment window is Wednesday morning."}
        assert store.recall("flaky export test").hits[0].source.startswith("daily/2026-11-05.md#^")
        # audit observations never appear in curated recall
        assert not any(h.source.startswith("audit/") for h in store.recall("host observation export", limit=50).hits)
        # code blocks are not memories; callout text is what a person reads, so it is (issue 14)
        callout = store.recall("callout").hits
        assert (
            callout and callout[0].text == "Obsidian callout A callout is read like prose, so this one is a memory too."
        )
        assert all(h.text != "not_a_bullet = True" for h in store.recall("not_a_bullet").hits)
        # hand-written bullets are found under derived ids, and the files are untouched
        hit = store.recall("office plants", limit=1).hits[0]
        assert "#^d-" in hit.source
        # DST: two bullets at 01:30 local on the night the clocks went back are an hour apart
        first, second = (store.recall("pager fired clocks", limit=10).hits[i] for i in (0, 1))
        assert abs((first.at - second.at).total_seconds()) == 3600


@pytest.mark.both_backends
def test_hostile_queries_never_raise(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        for query in QUERIES + ["*", "title:(", "a" * 10_000, "\x00\x01", "((((", "[1 TO", "~2^3"]:
            result = store.recall(query, limit=5)
            assert result.degraded is None
    with MemoryStore.open(fixture_vault) as store:
        for limit in (0, 101, -1, True, "5"):
            with pytest.raises(InvalidRecord):
                store.recall("x", limit=limit)
        with pytest.raises(InvalidRecord):
            store.recall("x", mode="psychic")


@pytest.mark.both_backends
def test_rebuild_from_files_alone_gives_identical_answers(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        store.remember("Priya booked the train to Berlin.", at=datetime(2026, 11, 20, 9, 0, tzinfo=AMS))
        before = answers(store)
    canonical = snapshot(fixture_vault)
    lose_the_index(fixture_vault)  # `.index/`, and on the server its tables
    with MemoryStore.open(fixture_vault, sync=False) as store:
        assert store.recall("Berlin").degraded is not None  # no index: said, not silently empty
        first = store.rebuild()
        after_first = answers(store)
        store.rebuild()
        after_second = answers(store)
    assert before == after_first == after_second
    assert first.problems == ("daily/2026-11-05.md: merge-conflict markers",)
    assert snapshot(fixture_vault) == canonical, "rebuild never touches canonical files"


@pytest.mark.both_backends
def test_rebuild_reports_invalid_utf8_and_keeps_going(fixture_vault):
    (fixture_vault / "daily/2026-11-07.md").write_bytes(b"- broken \xff\xfe bytes\n")
    with MemoryStore.open(fixture_vault, sync=False) as store:
        report = store.rebuild()
        assert any("2026-11-07.md: invalid UTF-8" in p for p in report.problems)
        assert store.recall("flaky export test").hits


@pytest.mark.both_backends
def test_hand_edit_is_picked_up_on_next_open(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        assert store.recall("zeppelin").hits == ()
    path = fixture_vault / "daily/2026-11-10.md"
    original = path.read_text()
    path.write_text(original + "- The team voted to name the mascot Zeppelin.\n")
    with MemoryStore.open(fixture_vault) as store:
        hit = store.recall("zeppelin").hits[0]
    assert hit.source.startswith("daily/2026-11-10.md#^d-")
    assert path.read_text() == original + "- The team voted to name the mascot Zeppelin.\n"


@pytest.mark.both_backends
def test_cjk_text_is_found_by_a_word_inside_its_run(new_vault):
    """CJK has no spaces: a query for a word inside a sentence finds it on either backend
    (the local engine indexes overlapping bigrams; the server's lexical list must too)."""
    with MemoryStore.open(new_vault) as store:
        store.remember("私は東京に住んでいます。", at=datetime(2026, 11, 30, 9, 0, tzinfo=UTC))
        store.remember("The billing service times out.", at=datetime(2026, 11, 30, 9, 1, tzinfo=UTC))
    with MemoryStore.open(new_vault, sync=False) as store:  # read from the committed index
        hits = store.recall("東京", limit=5).hits
    assert [hit.text for hit in hits][:1] == ["私は東京に住んでいます。"]
