"""HostSession: the activity score, dirty admission and the idle review over a loopback chat
server speaking Ollama's /api/chat. Waits are conditions polled with generous timeouts."""

import json
import threading
import time
from pathlib import Path

import pytest

from memvault.indexer.runtime.host_session import HostSession
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.loopback import LoopbackServer, sequence

# no test here but the child turn's opens the vault's index (HostSession opens its store on first use,
# which none makes): `.index/` holds only the host's activity file, so they are not index tests

LONG_USER = "We agreed the deploy window is Tuesday 14:00 UTC and that Priya owns the rollback plan. " * 2


def chat(content) -> tuple[int, dict]:
    text = content if isinstance(content, str) else json.dumps(content)
    return 200, {"model": "m", "message": {"role": "assistant", "content": text}, "done": True}


def make_vault(tmp_path, endpoint: str, **review) -> Path:
    data = default_config_data(mode="lite", time_zone="Europe/Amsterdam")
    data["memory"]["llm"] = {"provider": "ollama", "model": "m", "endpoint": endpoint, "timeoutMs": 60_000}
    data["memory"]["runtime"] = {"idleReviewMs": 1000, "idleReview": {"enabled": True, "minIntervalMs": 0, **review}}
    root = tmp_path / "v"
    init_vault(root, render_config(data))
    return root


def eligible_turn(session, **extra):
    """One turn worth min(170 // 50, 3) + 1 + min(10 // 5, 2) = 6 points, with non-memory work."""
    return session.end_turn(user_text=LONG_USER, assistant_text="Noted.", tool_results=10,
                            tools_used=("Bash",), **extra)  # fmt: skip


def wait_until(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached within the timeout"
        time.sleep(0.05)


def test_an_ineligible_turn_keeps_its_activity_and_starts_no_model(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True, "note": "nothing"}))
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            session.begin_turn()
            end = session.end_turn(user_text="hi", assistant_text="hello")
            assert (end.score, end.eligible, end.admitted, end.review_scheduled) == (1, False, False, False)
            assert "score 1 < 5" in end.reason
            session.begin_turn()
            end = session.end_turn(user_text="x" * 120, assistant_text="ok")  # activity accumulates
            assert end.score == 4 and not end.admitted  # min(122 // 50, 3) + 2 turns
            assert session.wait_for_review(timeout=5) is None
        assert server.requests_to("/api/chat") == []


def test_no_memory_intent_and_ordinary_checkpoints_are_not_admitted(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True}))
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            session.begin_turn()
            end = eligible_turn(session, no_memory=True)
            assert end.eligible and not end.admitted and "no-memory" in end.reason
            session.begin_turn()
            end = session.end_turn(user_text="Please don't remember any of this. " + LONG_USER, tool_results=10,
                                   tools_used=("Bash",))  # fmt: skip
            assert not end.admitted and "no-memory" in end.reason
            session.begin_turn()
            end = session.end_turn(user_text="ok", assistant_text="fine", tools_used=("MemoryRecall",))
            assert end.eligible and not end.admitted and end.reason == "nothing durable in this turn"
        assert server.requests_to("/api/chat") == []


def test_an_eligible_turn_is_reviewed_after_idleness_and_a_completed_pass_clears_activity(tmp_path):
    steps = [
        chat({"tool": "DocumentSearch", "arguments": {"query": "deploy window"}}),
        chat(
            {
                "tool": "DocumentCreate",
                "arguments": {"title": "Deploy window", "body": "Tuesday 14:00 UTC.", "summary": "When we deploy"},
            }
        ),  # fmt: skip
        chat({"done": True, "note": "recorded the deploy window"}),
    ]
    with LoopbackServer() as server:
        server.route("/api/chat", sequence(*steps))
        vault = make_vault(tmp_path, server.url)
        with HostSession.open(vault, env={}) as session:
            session.begin_turn()
            end = eligible_turn(session)
            assert (end.score, end.admitted, end.reason) == (6, True, "completed non-memory work")
            assert end.review_scheduled and end.review_in_ms == 1000  # idleReviewMs from the config
            outcome = session.wait_for_review()
            assert outcome.status == "completed" and outcome.layer == "documents"
            assert outcome.changes == ("document created: deploy-window",)
            assert session.activity.score == 0 and session.passes == 1
        sent = [request.json for request in server.requests_to("/api/chat")]
    assert len(sent) == 3 and sent[0]["model"] == "m"
    assert LONG_USER.strip() in sent[0]["messages"][1]["content"]  # the checkpoint is the completed turn
    system = sent[0]["messages"][0]["content"]
    assert "DocumentSearch, RuntimeMemory, DocumentCreate" in system
    assert (vault / "documents" / "deploy-window.md").read_text().count("Tuesday 14:00 UTC.") == 1


def test_one_layer_per_pass_even_when_the_first_change_fails(tmp_path):
    steps = [
        chat({"tool": "DocumentCreate", "arguments": {"title": "", "body": "x"}}),  # fails: empty title
        chat(
            {"tool": "RuntimeMemory", "arguments": {"action": "add", "target": "MEMORY", "content": "Deploy Tuesdays."}}
        ),
        chat({"tool": "RuntimeMemory", "arguments": {"action": "add", "target": "USER", "content": "Owns rollbacks."}}),
        chat({"done": True, "note": "done"}),
    ]
    with LoopbackServer() as server:
        server.route("/api/chat", sequence(*steps))
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            session.begin_turn()
            eligible_turn(session)
            outcome = session.wait_for_review()
            view = session.service.show()
        results = [json.loads(r.json["messages"][-1]["content"].removeprefix("Tool result: "))
                   for r in server.requests_to("/api/chat")[1:]]  # fmt: skip
    assert outcome.status == "completed" and outcome.layer == "documents"
    assert "error" in results[0]  # the document call failed, yet it claimed the pass
    assert results[1]["error"]["code"] == "refused" and "one layer per pass" in results[1]["error"]["message"]
    assert results[2]["status"] == "added"  # USER changes stay independent of the layer
    assert [e.content for e in view.state.of("MEMORY")] == []
    assert [e.content for e in view.state.of("USER")] == ["Owns rollbacks."]


def test_without_runtime_memory_the_review_has_only_the_document_tools(tmp_path):
    steps = [chat({"tool": "RuntimeMemory", "arguments": {"action": "add", "target": "USER", "content": "x y"}})]
    with LoopbackServer() as server:
        server.route("/api/chat", sequence(*steps))
        with HostSession.open(make_vault(tmp_path, server.url, runtimeMemory=False), env={}) as session:
            session.begin_turn()
            eligible_turn(session)
            outcome = session.wait_for_review()
            assert list(session.service.show().state.of("USER")) == []
        system = server.requests_to("/api/chat")[0].json["messages"][0]["content"]
    assert "Your tools: DocumentSearch, DocumentCreate." in system
    assert outcome.status == "failed" and "not a tool call" in outcome.note
    assert session.activity.score == 6  # a failed pass keeps the activity


def test_a_failed_pass_retains_the_activity_and_the_next_turn_builds_on_it(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", status=500, body="model crashed")
        vault = make_vault(tmp_path, server.url)
        with HostSession.open(vault, env={}) as session:
            session.begin_turn()
            eligible_turn(session)
            outcome = session.wait_for_review()
            assert outcome.status == "failed" and outcome.clears_activity is False
            assert session.activity.score == 6 and session.activity.turns == 1
            session.begin_turn()
            assert session.end_turn(user_text="and one more thing").score == 7  # kept, then added to
        # a restarted host resumes the signals (counts only, no conversation text on disk)
        with HostSession.open(vault, env={}) as again:
            assert again.activity.score == 7 and again.activity.tools == {"Bash"}
        saved = next((vault / ".index" / "host-activity").iterdir())
        assert "deploy window" not in saved.read_text() and saved.stat().st_mode & 0o777 == 0o600


def test_a_new_turn_cancels_a_running_pass_and_keeps_the_activity(tmp_path):
    release = threading.Event()

    def held(_body):  # the review's model call stays in flight until the test lets it go
        release.wait(60)
        return chat({"tool": "RuntimeMemory", "arguments": {"action": "add", "target": "USER", "content": "Late."}})

    with LoopbackServer() as server:
        server.route("/api/chat", held)
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            session.begin_turn()
            eligible_turn(session)
            wait_until(lambda: server.requests_to("/api/chat"))  # the pass is running
            start = session.begin_turn()  # the user speaks again
            release.set()
            outcome = session.wait_for_review()
            assert outcome.status == "aborted" and outcome.changes == ()
            assert list(session.service.show().state.of("USER")) == []  # nothing written after the new turn
            assert session.activity.score == 6 and start.turn_id == "turn-2"


def test_a_new_turn_cancels_a_pending_timer_before_any_model_call(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True}))
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            session.settings = type(session.settings)(**{**session.settings.__dict__, "idle_review_ms": 3_600_000})
            session.begin_turn()
            assert eligible_turn(session).review_in_ms == 3_600_000
            assert session.status()["reviewPending"] is True
            session.begin_turn()
            assert session.status()["reviewPending"] is False and session.wait_for_review(timeout=5) is None
        assert server.requests_to("/api/chat") == []


def test_min_interval_between_attempts_is_applied(tmp_path):
    now = [1_000_000.0]
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True, "note": "nothing durable"}))
        vault = make_vault(tmp_path, server.url, minIntervalMs=300_000)
        with HostSession.open(vault, env={}, clock_ms=lambda: now[0]) as session:
            session.begin_turn()
            assert eligible_turn(session).review_in_ms == 1_000  # no earlier attempt: idleReviewMs
            assert session.wait_for_review().status == "completed"
            session.begin_turn()
            assert eligible_turn(session).review_in_ms == 300_000  # 5 min after the last attempt
            now[0] += 299_500
            session.begin_turn()
            assert eligible_turn(session).review_in_ms == 1_000  # 500 ms left: idleReviewMs is longer


@pytest.mark.parametrize("switch", [{"writebackMode": "off"}, {"lifecycleEnabled": False}, {"strategy": "general"},
                                    {"writeEnabled": False}])  # fmt: skip
def test_switches_that_turn_the_review_off(tmp_path, switch):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True}))
        vault = make_vault(tmp_path, server.url)
        config = json.loads((vault / "memvault.json").read_text())
        config["memory"]["runtime"].update(switch)
        (vault / "memvault.json").write_text(json.dumps(config))
        with HostSession.open(vault, env={}) as session:
            session.begin_turn()
            end = eligible_turn(session)
            assert end.admitted and not end.review_scheduled and session.review_blocked()
        assert server.requests_to("/api/chat") == []


def test_max_per_session_and_the_wake_and_cue(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True}))
        with HostSession.open(make_vault(tmp_path, server.url, maxPerSession=1), env={}) as session:
            first = session.begin_turn()
            assert first.wake_changed and first.cue and 'revision="0"' in first.wake.text
            assert "Runtime memory is always loaded" in first.protocol
            eligible_turn(session)
            assert session.wait_for_review().status == "completed"
            second = session.begin_turn()
            assert not second.wake_changed and second.cue is None  # unchanged Wake: append nothing
            assert not eligible_turn(session).review_scheduled and "maxPerSession (1)" in session.review_blocked()
            session.service.add("USER", "Prefers metric units.")
            third = session.begin_turn()
            assert third.wake_changed and "Prefers metric units." in third.wake.text
            assert third.protocol == first.protocol  # the static protocol is byte-identical across writes
            assert third.recall is not second.recall  # each turn its own budget


@pytest.mark.one_engine(
    "the index it opens is the memory space's own (spaces/<id>/), which the catalog configures itself; it"
    " does not follow the test vault's index block"
)
def test_a_child_turn_has_its_own_budget_over_the_parents_pinned_spaces(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", lambda body: chat({"done": True}))
        with HostSession.open(make_vault(tmp_path, server.url), env={}) as session:
            first = session.service.create_space("Project A")
            start = session.begin_turn()
            session.service.create_space("Project B")  # created after the parent pinned its view
            child = session.child_turn()
            assert child is not start.recall
            assert child.scope(None) == start.recall.scope(None) == (first.id,)
            pending_before = session.status()["reviewPending"]
            child.recall("anything")
            assert session.status()["reviewPending"] == pending_before and session.passes == 0


@pytest.mark.parametrize("switch, recall, writeback", [
    ({}, True, True), ({"recallMode": "off"}, False, True), ({"writebackMode": "off"}, True, False),
    ({"lifecycleEnabled": False}, False, False)])  # fmt: skip
def test_cues_follow_the_switches_and_come_once_per_session(tmp_path, switch, recall, writeback):
    vault = make_vault(tmp_path, "http://127.0.0.1:9")
    config = json.loads((vault / "memvault.json").read_text())
    config["memory"]["runtime"].update(switch)
    (vault / "memvault.json").write_text(json.dumps(config))
    with HostSession.open(vault, env={}) as session:
        cue = session.begin_turn().cue
        assert ("SpaceRecall" in (cue or "")) is recall and ("RuntimeMemory" in (cue or "")) is writeback
        assert session.begin_turn().cue is None
        assert "Runtime memory is always loaded" in session.protocol()  # no switch removes the protocol
