"""Consolidation: index.md regenerated from the vault, bounded, deterministic, no model, no mutation."""

import hashlib
import json
import threading
import time
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.consolidate import END, MAX_GROUPS, START, is_calendar_node, lexical_key, scan_groups
from memvault.indexer.maintenance.watch import Watcher
from memvault.vault.errors import InvalidRecord
from memvault.vault.graph import Entity, FactLink, Graph, render_graph
from tests.capture_helpers import EMBED_PATH, OLLAMA_PATH, ChatScript, hash_embeddings, make_capture_vault
from tests.loopback import LoopbackServer

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


@pytest.fixture
def server():
    with LoopbackServer() as running:
        running.route(EMBED_PATH, hash_embeddings)
        script = ChatScript(lambda _t: (500, "no model call expected"))
        running.route(OLLAMA_PATH, script)
        running.script = script
        yield running


def bujo_vault(tmp_path, server, facts, entities, name="v"):
    """facts: (text, [entity ids], day); entities: (id, name, type). Written as a person (or capture) would."""
    root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url, name=name)
    graph = Graph()
    with MemoryStore.open(root) as store:
        for text, linked, day in facts:
            receipt = store.remember(text, at=AT.replace(day=day))
            if linked:
                graph.add_fact(FactLink(receipt.id, tuple(linked), 0.5, receipt.source.split("#")[0]))
    for entity in entities:
        graph.add_entity(Entity(*entity))
    graph.add_relation("e-atlas", "depends_on", "e-orion")
    (root / "graph.jsonl").write_bytes(render_graph(graph))
    return root


FACTS = [
    ("Morgan leads Project Atlas.", ["e-atlas", "e-morgan"], 28),
    ("Project Atlas ships in March.", ["e-atlas2", "e-march"], 29),
    ("The atlas team meets on Monday.", ["e-atlas3", "e-monday"], 30),
    ("Orion is the billing service.", ["e-orion"], 30),
]
ENTITIES = [
    ("e-atlas", "Project Atlas", "project"), ("e-atlas2", "project-atlas", "project"),
    ("e-atlas3", "Project Atlas", "project"),
    ("e-morgan", "Morgan", "person"), ("e-orion", "Orion", "project"), ("e-march", "March", "concept"),
    ("e-monday", "Monday", "time"),
]  # fmt: skip


def canonical_digest(root):
    parts = sorted(p for p in root.rglob("*") if p.is_file() and p.parts[len(root.parts)] in ("daily", "audit"))
    parts += [p for p in (root / "graph.jsonl", root / ".replay-projection-v1.json") if p.exists()]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in parts}


@pytest.mark.both_backends
def test_index_md_is_regenerated_without_a_model_or_a_change_to_memory(tmp_path, server):
    root = bujo_vault(tmp_path, server, FACTS, ENTITIES)
    before = canonical_digest(root)
    with MemoryStore.open(root) as store:
        report = store.consolidate()
        again = store.consolidate()
    text = (root / "index.md").read_text()
    assert report.changed and not again.changed and report.model_calls == 0
    assert server.script.calls == {"extraction": 0, "reconciliation": 0, "other": 0}
    assert canonical_digest(root) == before
    assert text.startswith("# Memory index\n\n" + START) and text.endswith(END + "\n")
    assert "- [[daily/2026-11-30|2026-11-30]]: 2 memories" in text and text.index("2026-11-30|") < text.index(
        "2026-11-28|"
    )
    assert "- [[Project Atlas]] (project): 3 memories (3 spellings)" in text  # lexically equal names collapse
    assert "[[Monday]]" not in text and "[[March]]" not in text  # calendar/time nodes are filtered
    assert "- [[Morgan]] (person): 1 memory" in text and "- [[Orion]] (project): 1 memory" in text
    assert (report.duplicate_entity_groups, report.entities, report.relations, report.curated) == (1, 7, 1, 4)
    assert report.scan_complete and report.scanned_rows == 7 + 4 + 1


@pytest.mark.both_backends
def test_text_outside_the_block_is_kept_and_a_stray_marker_is_refused(tmp_path, server):
    root = bujo_vault(tmp_path, server, FACTS, ENTITIES)
    (root / "index.md").write_text("# My vault\n\nNotes I keep by hand.\n")
    with MemoryStore.open(root) as store:
        store.consolidate()
        text = (root / "index.md").read_text()
        assert text.startswith("# My vault\n\nNotes I keep by hand.\n\n" + START)
        edited = text.replace(END, END + "\n\nMore of my own text.")
        (root / "index.md").write_text(edited.replace("2 memories", "99 memories"))
        assert store.consolidate().changed
        assert (root / "index.md").read_text() == edited  # the block is regenerated, the rest untouched
        (root / "index.md").write_text(f"{START}\nhalf a block\n")
        with pytest.raises(InvalidRecord, match="only one of the consolidation markers"):
            store.consolidate()


@pytest.mark.both_backends
def test_duplicate_fact_groups_are_counted_not_merged(tmp_path, server):
    root = bujo_vault(tmp_path, server, FACTS, ENTITIES)
    (root / "daily/2026-11-27.md").write_text(
        "# 2026-11-27\n\n- Orion is the billing service.\n- Orion is the billing service.\n"
    )
    result = CliRunner().invoke(cli, ["--vault", str(root), "consolidate", "--json"])
    body = json.loads(result.output)
    assert result.exit_code == 0 and body["duplicate_fact_groups"] == 1 and body["model_calls"] == 0
    assert (root / "daily/2026-11-27.md").read_text().count("Orion is the billing service.") == 2


def test_the_preview_is_bounded_by_groups_and_by_the_scan_ceiling():
    graph = Graph()
    for i in range(10_000 + 5):  # the spec: "a 10,000-row safety ceiling"
        graph.add_entity(Entity(f"e-{i:06d}", f"Entity {i}", "concept"))
    groups, scanned, complete = scan_groups(graph, frozenset())
    assert (scanned, complete, len(groups)) == (10_000, False, 10_000)
    small = Graph()
    for i in range(60):
        small.add_entity(Entity(f"e-{i:02d}", f"Topic {i}", "concept"))
        small.add_fact(FactLink(f"f-{i:02d}", (f"e-{i:02d}",), 0.5, "daily/2026-11-30.md"))
    groups, scanned, complete = scan_groups(small, frozenset({"f-00"}))
    assert complete and scanned == 120 and groups[lexical_key("Topic 0")].memories == 0  # superseded facts do not count
    from memvault.indexer.maintenance.consolidate import ConsolidationReport, render_block

    report = ConsolidationReport("index.md", False, (), 60, 1, 0, 60, 0, 0, 0, MAX_GROUPS, scanned, complete)
    block = render_block(report, sorted(groups.values(), key=lambda g: -g.memories)[:MAX_GROUPS], True)
    assert block.count("- [[Topic") == MAX_GROUPS == 50


@pytest.mark.parametrize(
    "name", ["Monday", "next week", "2026-11-30", "14:00", "Q3 2026", "March 15", "tomorrow", "3pm", "2026"]
)
def test_calendar_names_are_filtered(name):
    assert is_calendar_node(name, "concept")


@pytest.mark.parametrize("name", ["Project Atlas", "Morgan", "Postgres", "March Madness Tournament", "Q-Learning"])
def test_real_names_are_kept(name):
    assert not is_calendar_node(name, "concept") and is_calendar_node(name, "time")


def test_lexical_keys_collapse_only_spelling():
    assert (
        lexical_key("Project Atlas")
        == lexical_key("project-atlas")
        == lexical_key("PROJECT  ATLAS")
        == lexical_key("Ｐｒｏｊｅｃｔ Atlas")
    )
    assert lexical_key("Atlas") != lexical_key("Project Atlas")


@pytest.mark.both_backends
def test_watch_consolidates_on_its_schedule(tmp_path, server):
    root = bujo_vault(tmp_path, server, FACTS, ENTITIES)
    reports = []
    with MemoryStore.open(root) as store:
        watcher = Watcher(store, debounce=0.05, compact_after=None, consolidate_every=3600.0, on_batch=reports.append)
        stop = threading.Event()
        thread = threading.Thread(target=watcher.run, args=(stop,))
        thread.start()
        deadline = time.monotonic() + 20
        while not any(r.action == "consolidated" for r in reports) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        watcher.queue.wake()
        thread.join(20)
    assert "Regenerated by `memvault consolidate`" in (root / "index.md").read_text()
    assert any(r.action == "consolidated" for r in reports)
    assert server.script.calls["extraction"] == 0


@pytest.mark.both_backends
def test_a_lite_vault_gets_days_and_counts_but_no_entity_preview(tmp_path, server):
    root = make_capture_vault(tmp_path, server.url, mode="lite", write_mode="append-host-summary", name="lite")
    with MemoryStore.open(root) as store:
        store.remember("Lite vaults keep it simple.", at=AT)
        store.consolidate()
    text = (root / "index.md").read_text()
    assert "- curated memories: 1 (0 superseded)" in text and "Top entities" not in text
