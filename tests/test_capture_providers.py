"""Capture against loopback servers speaking the Ollama and OpenAI chat wire protocols.

Valid plans are committed; every malformed answer, an oversized completion, a timeout and a
500 leave the turn pending (awaiting capture, backed off, a content-free warning) with nothing
curated, nothing in the graph and no replay state; the raw audit never reaches curated recall.
"""

import json
from datetime import timedelta

import pytest

from memvault.vault.capture.prompt import user_document
from tests.capture_helpers import (
    GOOD,
    OLLAMA_PATH,
    OPENAI_PATH,
    TURN,
    ChatScript,
    daily_text,
    entry,
    extraction,
    make_capture_vault,
    memory,
    run_once,
)
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer, Reply


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


def setup(tmp_path, server, extract, reconcile=None, provider="ollama", timeout_ms=5000):
    script = ChatScript(extract if callable(extract) else (lambda _turn: extract), reconcile, provider=provider)
    server.route(OLLAMA_PATH if provider == "ollama" else OPENAI_PATH, script)
    root = make_capture_vault(tmp_path, server.url, provider=provider, timeout_ms=timeout_ms)
    clock = Clock()
    store = store_for(root, clock)
    store.env = {"MEMVAULT_TEST_KEY": "sk-loopback-test"}
    return root, store, clock, script


def assert_nothing_curated(root, store):
    assert daily_text(root) == ""
    assert not (root / "graph.jsonl").exists() and not (root / ".replay-projection-v1.json").exists()
    assert "Project Atlas" in (root / "audit/2026-11-30.md").read_text()  # the raw audit is there ...
    assert store.recall("Project Atlas launch").hits == ()  # ... and never in curated recall


@pytest.mark.both_backends
@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_valid_plan_is_committed_over_each_wire_protocol(tmp_path, server, provider):
    root, store, clock, script = setup(tmp_path, server, GOOD, provider=provider)
    run_once(store, clock)
    found = entry(root)
    assert (found["state"], found["outcome"]) == ("resolved", "captured")
    text = daily_text(root)
    assert "- 14:03 Morgan leads Project Atlas. ^f-" in text and "- 14:03 The Atlas launch is on March 15. ^f-" in text
    assert script.calls == {"extraction": 1, "reconciliation": 0, "other": 0}  # both novel: no second call
    request = server.requests[0]
    if provider == "openai":
        assert request.path == OPENAI_PATH and request.headers["authorization"] == "Bearer sk-loopback-test"
        assert request.json["response_format"]["type"] == "json_schema"
        assert request.json["response_format"]["json_schema"]["strict"] is True
        schema = request.json["response_format"]["json_schema"]["schema"]
        cap = request.json["max_tokens"]
    else:
        assert request.path == OLLAMA_PATH
        schema, cap = request.json["format"], request.json["options"]["num_predict"]
    # the answer's own JSON Schema, with the parser's bounds (8 memories, 24 entities, 24 relations)
    assert schema["required"] == ["memories", "entities", "relations"] and schema["additionalProperties"] is False
    assert [schema["properties"][k]["maxItems"] for k in ("memories", "entities", "relations")] == [8, 24, 24]
    assert 1000 < cap <= 8192  # sized from the output caps, far below a whole 8,192-token context
    assert user_document(request.json["messages"][1]["content"])["turn"] == TURN
    assert [h.text for h in store.recall("When is the Atlas launch?").hits][:1] == ["The Atlas launch is on March 15."]
    store.close()


NINE = extraction(*[memory(f"Release note number {i} is filed.") for i in range(9)])
MALFORMED = {
    "duplicate keys": '{"memories": [], "memories": [], "entities": [], "relations": []}',
    "unknown fields": GOOD[:-1] + ', "confidence": 0.9}',
    "out-of-range salience": GOOD.replace("0.9", "9"),
    "nine memories": NINE,
    "uppercase relation": GOOD.replace('"leads"', '"LEADS"'),
    "markdown fence": "```json\n" + GOOD + "\n```",
}


@pytest.mark.both_backends
@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_malformed_output_retries_and_never_counts_as_captured(tmp_path, server, shape):
    root, store, clock, script = setup(tmp_path, server, MALFORMED[shape])
    worker = run_once(store, clock)
    found = entry(root)
    assert (found["state"], found["failure"], found["due"]) == ("awaiting_capture", "invalid_model_output", False)
    assert_nothing_curated(root, store)
    assert worker.snapshot()["captureWarnings"] and "Project" not in worker.snapshot()["captureWarnings"][0]
    assert script.calls["extraction"] == 2  # the answer, and one immediate repair call: both invalid
    assert found["invalidOutputAttempts"] == 1 and found["invalidOutputBudget"] == 4
    # the model recovers; the backoff delay passes (2 min: the projection was attempt 1); captured once
    script.extract = lambda _turn: GOOD
    clock.advance(timedelta(minutes=1))
    worker.process_due()
    assert entry(root)["state"] == "awaiting_capture" and script.calls["extraction"] == 2  # not due yet
    clock.advance(timedelta(minutes=1))
    worker.process_due()
    assert entry(root)["outcome"] == "captured" and daily_text(root).count("^f-") == 2
    store.close()


@pytest.mark.both_backends
def test_an_oversized_completion_is_refused_before_parsing(tmp_path, server):
    root, store, clock, _ = setup(tmp_path, server, '{"memories": [], "entities": [], "relations": []}' + " " * 262_144)
    run_once(store, clock)
    assert entry(root)["failure"] == "provider_unavailable"
    assert_nothing_curated(root, store)
    store.close()


@pytest.mark.both_backends
def test_ambiguous_targets_in_reconciliation_are_refused(tmp_path, server):
    def reconcile(memories):
        return json.dumps({"decisions": [
            {"index": m["index"], "action": "SUPERSEDE", "target": m["candidates"][0]["id"],
             "text": f"Atlas launch update {m['index']}."}
            for m in memories]})  # fmt: skip

    two = extraction(memory("The Atlas launch is on March 20."), memory("The Atlas launch is in March."))
    root, store, clock, script = setup(tmp_path, server, two, reconcile)
    store.remember("The Atlas launch is on March 15.")
    run_once(store, clock)
    assert script.calls["reconciliation"] == 2 and len(script.offered[0]) == 2  # one batched call for both, one repair
    assert entry(root)["failure"] == "invalid_model_output"
    assert "March 20" not in daily_text(root) and not (root / ".replay-projection-v1.json").exists()
    store.close()


@pytest.mark.both_backends
def test_a_timeout_leaves_the_turn_pending_with_a_warning(tmp_path, server):
    root, store, clock, script = setup(
        tmp_path, server, lambda _t: Reply(200, {"message": {"content": GOOD}}, delay=3.0), timeout_ms=300
    )
    worker = run_once(store, clock)
    found = entry(root)
    assert (found["state"], found["failure"], found["attempts"]) == ("awaiting_capture", "provider_unavailable", 2)
    assert "provider_unavailable" in worker.snapshot()["captureWarnings"][0]
    assert_nothing_curated(root, store)
    store.close()


@pytest.mark.both_backends
def test_a_500_leaves_the_turn_pending_and_backs_off(tmp_path, server):
    root, store, clock, script = setup(tmp_path, server, lambda _t: (500, "model crashed"))
    worker = run_once(store, clock)
    assert entry(root)["failure"] == "provider_unavailable"
    worker.process_due()  # not due again yet: no second request
    assert script.calls["extraction"] == 1
    assert_nothing_curated(root, store)
    store.close()


@pytest.mark.both_backends
def test_sixteen_failed_attempts_make_a_dead_letter(tmp_path, server):
    root, store, clock, script = setup(tmp_path, server, lambda _t: (500, "down"))
    worker = run_once(store, clock)
    for _ in range(20):
        clock.advance(timedelta(hours=7))
        worker.process_due()
    found = entry(root)
    assert (found["state"], found["folder"], found["attempts"]) == ("dead", "dead", 16)
    assert script.calls["extraction"] == 15  # the first attempt projected the raw audit
    assert_nothing_curated(root, store)
    store.close()


@pytest.mark.both_backends
def test_a_missing_api_key_is_a_provider_failure_not_a_crash(tmp_path, server):
    root, store, clock, script = setup(tmp_path, server, GOOD, provider="openai")
    store.env = {}
    run_once(store, clock)
    assert entry(root)["failure"] == "provider_unavailable" and script.calls["extraction"] == 0
    store.close()


@pytest.mark.both_backends
def test_the_timeout_comes_from_memvault_memory_llm_timeout_ms(tmp_path, server):
    from memvault.indexer.engine.store import MemoryStore

    script = ChatScript(lambda _t: Reply(200, {"message": {"content": GOOD}}, delay=3.0))
    server.route(OLLAMA_PATH, script)
    root = make_capture_vault(tmp_path, server.url, timeout_ms=60_000)
    with MemoryStore.open(root, env={"MEMVAULT_MEMORY_LLM_TIMEOUT_MS": "250"}) as store:
        assert store.config.memory.llm.timeout_ms == 250
        clock = Clock()
        store._clock = clock
        run_once(store, clock)
    # with the file's 60 s the 3 s answer would have been captured; the env's 250 ms timed it out
    assert (entry(root)["state"], entry(root)["failure"]) == ("awaiting_capture", "provider_unavailable")
    assert daily_text(root) == ""
