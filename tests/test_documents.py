"""Documents on real files: budget on rendered bytes, LRU archival "index first, move second"."""

import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest

from memvault.indexer.runtime.service import RuntimeService
from memvault.vault.config import load_config
from memvault.vault.documents import (
    ColdReference,
    Document,
    DocumentStore,
    capacity_plan,
    parse_document,
    render_document,
    slug,
)
from memvault.vault.errors import Conflict, CredentialRefused, InvalidRecord, ProviderUnavailable, UnsafePath
from memvault.vault.runtime import CapacityExceeded


class Clock:
    def __init__(self):
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self):
        self.now += timedelta(minutes=1)
        return self.now


@pytest.fixture
def store(tmp_path):
    return DocumentStore(tmp_path / "v", limit_bytes=1000, clock=Clock())


def body(n: int, char="x") -> str:
    return char * n


def active(store) -> list[str]:
    return [doc.id for doc in store.list()]


# --- pure parts ------------------------------------------------------------------------------


def test_render_parse_round_trip_and_byte_size():
    data = render_document(
        'Deploy: "runbook"', "How we ship", "Step 1\n\nStep 2\n", 3, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    )
    doc = parse_document("deploy-runbook", data, "2026-05-05T00:00:00Z")
    assert (doc.title, doc.summary, doc.body, doc.revision) == (
        'Deploy: "runbook"',
        "How we ship",
        "Step 1\n\nStep 2",
        3,
    )
    assert doc.size == len(data) and doc.sha256 == hashlib.sha256(data).hexdigest()
    assert render_document(doc.title, doc.summary, doc.body, doc.revision, doc.created, doc.updated) == data


def test_parse_tolerates_hand_written_files():
    doc = parse_document("notes", b"# Just notes\n\nno frontmatter\n", "2026-05-05T00:00:00Z")
    assert (doc.title, doc.revision, doc.updated, doc.body) == (
        "notes",
        0,
        "2026-05-05T00:00:00Z",
        "# Just notes\n\nno frontmatter",
    )
    odd = parse_document("odd", b"---\nrevision: lots\ntitle: [x\n---\nbody\n", "T")
    assert (odd.revision, odd.title) == (0, "[x")


def test_slug_is_safe_for_any_title():
    assert slug("Deploy Runbook (v2)!") == "deploy-runbook-v2"
    assert slug("../../etc/passwd") == "etc-passwd"
    assert slug("東京").startswith("doc-")
    assert len(slug("a" * 500)) <= 60


def test_capacity_plan_counts_rendered_bytes_and_picks_the_least_recently_updated():
    def doc(doc_id, size, updated):
        return Document(doc_id, doc_id, "", "", 1, "T", updated, size, "0" * 64)

    docs = [doc("b", 300, "2026-01-02"), doc("a", 300, "2026-01-01"), doc("c", 300, "2026-01-03")]
    assert capacity_plan(docs, doc("new", 100, "z"), 1000).fits
    plan = capacity_plan(docs, doc("new", 200, "z"), 1000)
    assert (plan.fits, plan.used_after, plan.victim.id) == (False, 1100, "a")
    assert capacity_plan(docs, doc("a", 500, "z"), 1000).victim.id == "b"  # the updated one is never its own victim


# --- create / update -------------------------------------------------------------------------


def test_create_update_with_revisions(store):
    receipt = store.create("Deploy runbook", "Step 1", summary="How we ship")
    assert (receipt.status, receipt.id, receipt.revision) == ("created", "deploy-runbook", 1)
    assert store.update("deploy-runbook", "Step 1\nStep 2", expected_revision=1).revision == 2
    assert store.update("deploy-runbook", "Step 1\nStep 2").status == "unchanged"
    with pytest.raises(Conflict, match="revision 2, not 1"):
        store.update("deploy-runbook", "Step 3", expected_revision=1)
    assert store.read("deploy-runbook").body == "Step 1\nStep 2"
    with pytest.raises(Conflict, match="already exists"):
        store.create("Deploy Runbook", "dup")


def test_a_person_editing_the_file_meanwhile_is_never_overwritten(store):
    store.create("Notes", "original")
    path = store.root / "documents/notes.md"
    path.write_text(path.read_text().replace("original", "edited by hand"))
    assert store.read("notes").body == "edited by hand"
    store.update("notes", summary="now with a summary")
    assert store.read("notes").body == "edited by hand"  # the update kept the person's body


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda s: s.create("", "x"), InvalidRecord),
        (lambda s: s.create("t" * 200, "x"), InvalidRecord),
        (lambda s: s.create("Title", "bell \x07"), InvalidRecord),
        (lambda s: s.create("Title", 42), InvalidRecord),
        (lambda s: s.create("Title", "password: hunter2-Secret9"), CredentialRefused),
        (lambda s: s.create("Title", "x" * 2000), CapacityExceeded),
        (lambda s: s.update("../escape", "x"), InvalidRecord),
        (lambda s: s.update("missing", "x"), InvalidRecord),
        (lambda s: s.archive("UPPER"), InvalidRecord),
    ],
)
def test_malformed_hostile_and_oversize_input_is_refused(store, call, error):
    with pytest.raises(error):
        call(store)
    assert not (store.root / "documents").exists() or active(store) == []


def test_a_symlinked_document_is_refused(store, tmp_path):
    store.create("Notes", "x")
    outside = tmp_path / "outside.md"
    outside.write_text("secret")
    (store.root / "documents/notes.md").unlink()
    (store.root / "documents/notes.md").symlink_to(outside)
    with pytest.raises(UnsafePath):
        store.read("notes")


# --- overflow and archiving ------------------------------------------------------------------


def test_overflow_archives_the_least_recently_used_then_commits(store):
    store.create("First", body(250))
    store.create("Second", body(250))
    store.update("first", body(251))  # now "second" is the least recently updated
    receipt = store.create("Third", body(300))
    assert [a.id for a in receipt.archived] == ["second"] and not receipt.archived[0].indexed
    assert active(store) == ["first", "third"]
    assert store.list_archived() == ["documents/archived/second.md"]
    assert receipt.used_bytes <= 1000


def test_archival_indexes_first_with_title_summary_path_and_sha(store):
    store.create("First", body(400), summary="the first one")
    original = (store.root / "documents/first.md").read_bytes()
    seen: list[ColdReference] = []

    def indexer(reference):
        assert (store.root / "documents/first.md").exists()  # index first, move second
        seen.append(reference)

    store.create("Second", body(700), indexer=indexer)
    (ref,) = seen
    assert (ref.title, ref.summary, ref.planned_path) == ("First", "the first one", "documents/archived/first.md")
    assert ref.sha256 == hashlib.sha256(original).hexdigest()
    assert (store.root / "documents/archived/first.md").read_bytes() == original
    assert all(part in ref.text() for part in ("First", "the first one", ref.planned_path, ref.sha256))


def test_a_failed_index_keeps_the_document_active_and_the_mutation_unapplied(store):
    store.create("First", body(400))

    def failing(_reference):
        raise ProviderUnavailable("space unreachable")

    with pytest.raises(ProviderUnavailable):
        store.create("Second", body(700), indexer=failing)
    assert active(store) == ["first"] and store.list_archived() == []


def test_a_revision_conflict_during_archival_keeps_the_active_original(store):
    store.create("First", body(400))

    def person_edits_meanwhile(_reference):
        path = store.root / "documents/first.md"
        path.write_text(path.read_text() + "\nlate edit")

    with pytest.raises(Conflict, match="stays active"):
        store.create("Second", body(700), indexer=person_edits_meanwhile)
    assert active(store) == ["first"] and store.read("first").body.endswith("late edit")


def test_manual_archive_uses_the_same_path_and_avoids_name_clashes(store):
    store.create("Notes", "v1")
    store.archive("notes", expected_revision=1)
    store.create("Notes", "v2")
    with pytest.raises(Conflict):
        store.archive("notes", expected_revision=5)
    receipt = store.archive("notes")
    assert receipt.archived[0].path.startswith("documents/archived/notes-")
    assert len(store.list_archived()) == 2 and active(store) == []


def test_a_document_bigger_than_the_whole_budget_is_refused(tmp_path):
    small = DocumentStore(tmp_path / "v", limit_bytes=300, max_document_bytes=10_000, clock=Clock())
    with pytest.raises(CapacityExceeded, match="holds at most 300"):  # one document never exceeds the budget
        small.create("Big", body(400))


def test_concurrent_creates_never_exceed_the_budget_or_lose_a_document(tmp_path):
    store = DocumentStore(tmp_path / "v", limit_bytes=2000)
    errors = []

    def worker(n):
        try:
            store.create(f"Doc {n}", body(300, chr(ord("a") + n)))
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.used_bytes() <= 2000
    assert len(active(store)) + len(store.list_archived()) == 8


# --- through the service, with a memory space ------------------------------------------------


def test_overflow_writes_a_verified_cold_reference_to_a_space(new_vault):
    (new_vault / "memvault.json").write_text(json.dumps({"memory": {"mode": "lite"}}))
    service = RuntimeService(new_vault, load_config(new_vault, {}), documents_limit=1000, clock=Clock())
    service.create_space("Work")
    service.create_document("Deploy runbook", body(600), "How we ship")
    receipt = service.create_document("Incident log", body(600, "y"))
    assert receipt.archived[0].indexed
    hits = service.recall("Archived document Deploy runbook").hits
    assert any("documents/archived/deploy-runbook.md" in hit.text for hit in hits)
    receipt = service.archive_document("incident-log")
    assert receipt.archived[0].indexed and service.documents.list() == []
