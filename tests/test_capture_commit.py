"""The capture commit: run-derived ids, retained plans, UPDATE/SUPERSEDE kept kind to people,
serialized captures, the refusals around plans, and the legacy direct-capture surfaces."""

import json
import threading
import time
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.capture.plan import plan_path, read_plan, retained_plan_ids
from memvault.vault.errors import Conflict, InvalidConfig
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.operator import resolve_run_as_operator
from memvault.vault.intake.snapshot import inspect_run
from memvault.vault.replay import read_sidecar
from tests.capture_helpers import (
    EMBED_PATH,
    OLLAMA_PATH,
    ChatScript,
    add_only,
    daily_text,
    extraction,
    hash_embeddings,
    make_capture_vault,
    memory,
)
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer


@pytest.fixture
def server():
    with LoopbackServer() as running:
        running.route(EMBED_PATH, hash_embeddings)
        yield running


def vault(tmp_path, server, extract, reconcile=None, name="v"):
    script = ChatScript(extract, reconcile)
    server.route(OLLAMA_PATH, script)
    root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url, name=name)
    return root, script


def capture(store, clock, run_id, text):
    store.persist_completed_turn(run_id, text, capture_text=text)
    IntakeWorker(store, clock=clock).process_due()


def state(root, run_id):
    [entry] = inspect_run(IntakeDirs(root), intake_id_for(run_id), Clock()())["entries"]
    return entry


def supersede_first(memories):
    return json.dumps({"decisions": [{"index": m["index"], "action": "SUPERSEDE", "target": m["candidates"][0]["id"],
                                      "text": m["text"]} for m in memories]})  # fmt: skip


def update_first(memories):
    return json.dumps({"decisions": [{"index": m["index"], "action": "UPDATE", "target": m["candidates"][0]["id"],
                                      "text": m["text"] + " It replaces the old note."}
                                     for m in memories]})  # fmt: skip


@pytest.mark.both_backends
def test_update_never_rewrites_a_persons_line_and_recall_shows_the_replacement(tmp_path, server):
    root, script = vault(
        tmp_path, server, lambda _t: extraction(memory("The standup is at 10:00 on Mondays.")), update_first
    )
    (root / "daily").mkdir(exist_ok=True)
    person = "# 2026-11-29\n\nMy own notes.\n\n- The standup is at 09:30 on Mondays.\n"
    (root / "daily/2026-11-29.md").write_text(person)
    clock = Clock()
    with store_for(root, clock) as store:
        store.sync()
        capture(store, clock, "run-1", "Standup moves to 10:00.")
        assert (root / "daily/2026-11-29.md").read_text() == person  # byte for byte
        assert "- 14:03 The standup is at 10:00 on Mondays. It replaces the old note. ^f-" in daily_text(root)
        texts = [h.text for h in store.recall("When is the standup?").hits]
        # the person's prose paragraph is a memory too now (issue 14), and its context (the neighbour
        # lines) can rank it beside the answer; the replacement is recalled, the replaced line is not
        assert "The standup is at 10:00 on Mondays. It replaces the old note." in texts
        assert "The standup is at 09:30 on Mondays." not in texts
        [lifecycle] = read_sidecar(root)[0].superseded().values()
        assert lifecycle["state"] == "updated" and lifecycle["id"].startswith("d-")
        assert store.supersession_state(lifecycle["id"]) == "superseded"  # what MemoryJournal reports
        assert store.supersession_state(lifecycle["by"]) == "valid"
        # the person edits their line: it is their new statement, with a new id, and recall shows it
        (root / "daily/2026-11-29.md").write_text(person.replace("09:30", "09:45"))
        store.sync()
        assert any("09:45" in h.text for h in store.recall("When is the standup?").hits)


@pytest.mark.both_backends
def test_supersede_of_a_memvault_fact_appends_and_records_the_lifecycle(tmp_path, server):
    turns = iter(
        [extraction(memory("The Atlas deadline is February 1.")), extraction(memory("The Atlas deadline is March 15."))]
    )
    root, script = vault(tmp_path, server, lambda _t: next(turns), supersede_first)
    clock = Clock()
    with store_for(root, clock) as store:
        capture(store, clock, "run-1", "deadline Feb 1")
        capture(store, clock, "run-2", "deadline moved to Mar 15")
        assert [h.text for h in store.recall("Atlas deadline").hits] == ["The Atlas deadline is March 15."]
        page = store.journal(from_date="2026-11-30", through_date="2026-11-30", time_zone="Europe/Amsterdam")
        states = {entry["text"]: entry["state"] for entry in page.entries}
        assert states == {"The Atlas deadline is February 1.": "superseded", "The Atlas deadline is March 15.": "valid"}
    text = daily_text(root)
    assert "February 1. ^f-" in text and "March 15. ^f-" in text  # history stays in the markdown
    sidecar, data = read_sidecar(root)
    [lifecycle] = sidecar.superseded().values()
    assert lifecycle["state"] == "superseded"
    assert b"Atlas" not in data and b"deadline" not in data  # metadata only: no memory text
    assert script.calls == {"extraction": 2, "reconciliation": 1, "other": 0}


@pytest.mark.both_backends
def test_an_exact_duplicate_is_a_noop_without_a_reconciliation_call(tmp_path, server):
    root, script = vault(
        tmp_path, server, lambda _t: extraction(memory("Morgan chose blue as the deployment color.")), add_only
    )
    clock = Clock()
    with store_for(root, clock) as store:
        store.remember("Morgan chose blue as the deployment color.")
        capture(store, clock, "run-1", "blue it is")
    assert state(root, "run-1")["outcome"] == "captured"
    assert daily_text(root).count("deployment color") == 1
    assert script.calls == {"extraction": 1, "reconciliation": 0, "other": 0}


class Boom(Exception):
    pass


@pytest.mark.both_backends
def test_a_retained_plan_replays_without_a_model_call_and_blocks_resolve(tmp_path, server):
    root, script = vault(tmp_path, server, lambda _t: extraction(memory("Dana owns the billing migration.")))
    clock = Clock()
    store = store_for(root, clock)
    store.persist_completed_turn("run-1", "Dana owns billing.", capture_text="Dana owns billing.")

    def fail_after_plan(boundary):
        if boundary == "capture.plan_written":
            raise Boom()

    IntakeWorker(store, clock=clock, crash_hook=fail_after_plan).process_due()
    run = intake_id_for("run-1")
    assert retained_plan_ids(root) == [run] and read_plan(root, run).facts[0].text == "Dana owns the billing migration."
    assert daily_text(root) == "" and script.calls["extraction"] == 1
    with pytest.raises(Conflict, match="retained semantic plan"):
        resolve_run_as_operator(root, run, "give-up", clock())
    clock.advance(timedelta(minutes=5))
    IntakeWorker(store, clock=clock).process_due()
    assert state(root, "run-1")["outcome"] == "captured" and retained_plan_ids(root) == []
    assert script.calls["extraction"] == 1  # the retained plan was used, the model was not asked again
    assert daily_text(root).count("Dana owns the billing migration.") == 1
    store.close()


@pytest.mark.both_backends
def test_an_orphan_plan_of_a_resolved_run_is_retired_on_start(tmp_path, server):
    root, _ = vault(tmp_path, server, lambda _t: extraction(memory("Dana owns the billing migration.")))
    clock = Clock()
    with store_for(root, clock) as store:
        capture(store, clock, "run-1", "Dana owns billing.")
        orphan = plan_path(root, intake_id_for("run-1"))
        orphan.write_bytes(b"{}")  # as if a crash hit after the receipt, before the plan was removed
        orphan.chmod(0o600)
        store.start_intake(poll_seconds=0.05)
        store.stop()
    assert not orphan.exists()


@pytest.mark.one_engine("it checks the local engine's .index/CURRENT")
def test_rebuilding_a_pending_bujo_capture_into_journal_is_refused_before_any_change(tmp_path, server):
    root, _ = vault(tmp_path, server, lambda _t: (500, "down"))
    clock = Clock()
    with store_for(root, clock) as store:
        capture(store, clock, "run-1", "Dana owns billing.")
        generation = store.serving_index().generation.name
    config = json.loads((root / "memvault.json").read_text())
    config["memory"].update(mode="journal", writeMode="append-host-summary")
    del config["memory"]["llm"]
    (root / "memvault.json").write_text(json.dumps(config))
    journal_store = store_for(root, clock)
    with pytest.raises(InvalidConfig, match="cannot be rebuilt into memory.mode 'journal'"):
        journal_store.rebuild()
    assert (root / ".index/CURRENT").read_text().strip() == generation


@pytest.mark.both_backends
def test_captures_are_serialized_per_vault(tmp_path, server):
    in_flight, peak, lock = [0], [0], threading.Lock()

    def slow_extract(turn):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        time.sleep(0.2)
        with lock:
            in_flight[0] -= 1
        return extraction(memory(f"Topic {turn.split()[-1]} was settled by the team."))

    root, script = vault(tmp_path, server, slow_extract, add_only)
    clock = Clock()
    with store_for(root, clock) as store:
        threads = [threading.Thread(target=store.capture, args=(f"settled topic t{i}",)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert peak[0] == 1 and script.calls["extraction"] == 3  # never two model calls at once
    assert daily_text(root).count("^f-") == 3


@pytest.mark.both_backends
def test_legacy_direct_capture_and_the_lazily_created_queue(tmp_path, server):
    root, script = vault(
        tmp_path, server, lambda turn: extraction(memory(f"Legacy capture says {turn.split()[-1]} matters.")), add_only
    )
    clock = Clock()
    with store_for(root, clock) as store:
        capture(store, clock, "run-1", "strong path alpha")
        assert store._capture_queue is None  # the bundled host path never creates the best-effort queue
        outcome = store.capture("direct beta")
        assert (outcome.facts, outcome.model_calls) == (1, 2)  # close to "alpha": reconciled (ADD)
        assert store.schedule_capture("scheduled gamma") is True
        assert store._capture_queue is not None and store._capture_queue.drain(10)
        kinds = sorted(e["authority"]["kind"] for e in read_sidecar(root)[0].captures())
    assert kinds == ["capture", "direct", "direct"]
    text = daily_text(root)
    assert all(f"Legacy capture says {w} matters." in text for w in ("alpha", "beta", "gamma"))


@pytest.mark.both_backends
def test_direct_capture_refuses_credentials_and_other_tiers(tmp_path, server):
    root, script = vault(tmp_path, server, lambda _t: extraction())
    with store_for(root, Clock()) as store:
        with pytest.raises(Exception, match="looks like it contains"):
            store.capture("my password=hunter2hunter2 for prod")
    assert script.calls["extraction"] == 0
    lite = make_capture_vault(tmp_path, server.url, mode="lite", write_mode="append-host-summary", name="lite")
    with store_for(lite, Clock()) as store:
        with pytest.raises(Exception, match='needs memory.mode "bujo"'):
            store.capture("anything at all")
        store.persist_completed_turn("run-1", "Lite turns never build a graph.")
        IntakeWorker(store, clock=Clock()).process_due()
    assert not (lite / "graph.jsonl").exists() and not (lite / ".replay-projection-v1.json").exists()


@pytest.mark.both_backends
def test_an_embedding_outage_leaves_the_turn_pending(tmp_path, server):
    root, script = vault(tmp_path, server, lambda _t: extraction(memory("Dana owns the billing migration.")))
    clock = Clock()
    with store_for(root, clock) as store:
        store.remember("Billing runs on the old cluster.")
        assert store._semantic.drain(30)  # its vector is in before the outage (the queue embeds on its own thread)
        server.route(EMBED_PATH, lambda _body: (500, "embedding model crashed"))
        capture(store, clock, "run-1", "Dana owns billing.")
        assert (state(root, "run-1")["state"], state(root, "run-1")["failure"]) == (
            "awaiting_capture",
            "provider_unavailable",
        )
        assert "Dana" not in daily_text(root) and retained_plan_ids(root) == []
        server.route(EMBED_PATH, hash_embeddings)
        clock.advance(timedelta(minutes=5))
        IntakeWorker(store, clock=clock).process_due()
    assert state(root, "run-1")["outcome"] == "captured" and "Dana owns the billing migration." in daily_text(root)


@pytest.mark.both_backends
def test_a_retained_plan_survives_a_rebuild_that_changes_the_embedding_provider(tmp_path, server):
    root, script = vault(tmp_path, server, lambda _t: extraction(memory("Dana owns the billing migration.")))
    clock = Clock()
    store = store_for(root, clock)

    def fail_after_plan(boundary):
        if boundary == "capture.plan_written":
            raise Boom()

    store.persist_completed_turn("run-1", "Dana owns billing.", capture_text="Dana owns billing.")
    IntakeWorker(store, clock=clock, crash_hook=fail_after_plan).process_due()
    store.close()
    config = json.loads((root / "memvault.json").read_text())
    config["memory"]["embeddings"] = {"provider": "builtin"}  # another provider and dimension
    (root / "memvault.json").write_text(json.dumps(config))
    with store_for(root, clock) as rebuilt:
        rebuilt.rebuild()  # allowed: the tier stays BuJo; the plan holds no vectors
        assert retained_plan_ids(root) == [intake_id_for("run-1")]
        clock.advance(timedelta(minutes=5))
        IntakeWorker(rebuilt, clock=clock).process_due()
        assert [h.text for h in rebuilt.recall("Who owns the billing migration?").hits][:1] == [
            "Dana owns the billing migration."
        ]
    assert state(root, "run-1")["outcome"] == "captured" and script.calls["extraction"] == 1


@pytest.mark.both_backends
def test_capture_writes_into_the_daily_notes_layout_the_vault_keeps(tmp_path, server):
    """A vault kept in the Daily Notes plugin's `daily/YYYY/MM/` layout gets its captured facts there."""
    root, _script = vault(
        tmp_path, server, lambda _t: extraction(memory("Priya moved the offsite to Lisbon.")), add_only
    )
    clock = Clock()
    day = clock().astimezone(ZoneInfo("Europe/Amsterdam")).date()
    (root / "daily" / f"{day.year:04d}").mkdir(parents=True)
    with store_for(root, clock) as store:
        capture(store, clock, "run-nested", "the offsite moves to Lisbon")
        hits = store.recall("offsite Lisbon").hits
    nested = root / "daily" / f"{day.year:04d}" / f"{day.month:02d}" / f"{day.isoformat()}.md"
    assert "Priya moved the offsite to Lisbon." in nested.read_text()
    assert not (root / "daily" / f"{day.isoformat()}.md").exists()
    assert hits and hits[0].source.startswith(f"daily/{day.year:04d}/{day.month:02d}/")
    assert f"daily/{day.year:04d}/{day.month:02d}/{day.isoformat()}.md" in (root / "graph.jsonl").read_text()
