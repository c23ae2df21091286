"""`memvault capture test`, and capture's counts in `memvault inspect` (loopback model, real CLI)."""

import json

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from tests.capture_helpers import (
    OLLAMA_PATH,
    ChatScript,
    add_only,
    daily_text,
    entity,
    extraction,
    make_capture_vault,
    memory,
)
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer

GOOD = extraction(
    memory("Morgan leads Project Atlas.", 0.7, ["e1", "e2"]),
    entities=[entity("e1", "Morgan", "person"), entity("e2", "Project Atlas")],
    relations=[{"from": "e1", "relation": "leads", "to": "e2"}],
)


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


def invoke(root, *args, ok=True):
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], catch_exceptions=not ok)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def files_of(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".index" not in p.parts)


@pytest.mark.both_backends
def test_capture_test_shows_what_would_be_stored_and_writes_nothing(tmp_path, server):
    script = ChatScript(lambda _turn: GOOD, add_only)
    server.route(OLLAMA_PATH, script)
    root = make_capture_vault(tmp_path, server.url)
    before = files_of(root)
    report = json.loads(invoke(root, "capture", "test", "--json").output)
    assert [(f["action"], f["text"]) for f in report["facts"]] == [("add", "Morgan leads Project Atlas.")]
    assert report["relations"] == [{"from": "Morgan", "relation": "leads", "to": "Project Atlas"}]
    assert (report["calls"], report["repairs"], report["failure"], report["schemaForm"]) == (1, 0, None, "schema")
    assert "planning meeting" in script.requests[0]["messages"][-1]["content"]  # the built-in sample turn
    text = invoke(
        root, "capture", "test", "--text", "user: who leads Atlas?\nassistant: Morgan leads Project Atlas."
    ).output
    assert "add  Morgan leads Project Atlas.  (new: no existing memory says this)" in text
    assert "relation  Morgan leads Project Atlas" in text
    assert files_of(root) == before and daily_text(root) == ""  # no fact, no plan, no intake record


@pytest.mark.both_backends
def test_capture_test_says_why_nothing_would_be_stored(tmp_path, server):
    answers = iter(['{"memories": []}', '{"memories": [], "entities": []}'])
    server.route(OLLAMA_PATH, ChatScript(lambda _turn: next(answers)))
    root = make_capture_vault(tmp_path, server.url)
    text = invoke(root, "capture", "test").output
    assert "2 call(s), 1 repair(s)" in text
    assert (
        "would store nothing: invalid_model_output: extraction answer: "
        "the answer has unknown fields [] / missing fields ['relations']" in text
    )


@pytest.mark.one_engine("its vault is made without the engine's fixture, so no index of it reaches the server")
def test_capture_test_needs_a_bujo_vault(tmp_path):
    root = make_capture_vault(tmp_path, "http://127.0.0.1:9", mode="journal", write_mode="append-host-summary")
    result = invoke(root, "capture", "test", ok=False)
    assert (
        result.exit_code == 1
        and 'capture needs memory.mode "bujo"' in result.output
        and "Traceback" not in result.output
    )


@pytest.mark.both_backends
def test_inspect_shows_capture_counts_without_content(tmp_path, server):
    server.route(OLLAMA_PATH, ChatScript(lambda _turn: GOOD))
    root = make_capture_vault(tmp_path, server.url)
    clock = Clock()
    store = store_for(root, clock)
    store.persist_completed_turn(
        "run-1", "Morgan leads Project Atlas.", capture_text="user: ok\nassistant: Morgan leads Project Atlas."
    )
    from memvault.indexer.services.intake_worker import IntakeWorker

    IntakeWorker(store, clock=clock).process_due()
    store.close()
    report = json.loads(invoke(root, "inspect", "--json").output)
    assert {k: report["capture"][k] for k in ("runs", "added", "calls", "emptyExtractions")} == {
        "runs": 1, "added": 1, "calls": 1, "emptyExtractions": 0}  # fmt: skip
    assert "Morgan" not in json.dumps(report["capture"])
    assert "capture (last 1 runs): 1 added, 0 updated, 0 superseded, 0 no-op" in invoke(root, "inspect").output
