"""What capture sends a real model server, and what it does with the answers (loopback, real wire).

Each request carries the answer's JSON Schema and a token cap; the system prompt is folded into
the first user message where configured (and by default for Gemma); an answer cut at the cap is
an invalid output that gets one repair call, never parsed; invalid answers get one immediate
repair call carrying the parser's exact error and then spend their own budget of 4 attempts; a
server that rejects the schema is asked again in plain JSON mode; an empty extraction of a
substantive turn is a dead letter that `memvault retry` can send through a better model.
"""

import json
from datetime import timedelta

import pytest

from memvault.indexer.maintenance.health import check_health
from memvault.indexer.services.chat import HttpChatModel
from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.capture.extraction import EXTRACTION_OUTPUT
from memvault.vault.capture.prompt import EXTRACTION_SYSTEM, user_document
from memvault.vault.capture.stats import summarize
from memvault.vault.config import default_config_data, render_config
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.state import make_due
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
)
from tests.capture_helpers import run_once as admit_and_capture
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer

EMPTY = extraction()
#: 40 words with two decisions in them: substantive by the 25-word line
LONG_TURN = ("user: can you write down what we agreed in the planning meeting today? assistant: Of course. We agreed "
             "that Morgan leads Project Atlas from now on, that the launch moves to March 15, and that the team "
             "reviews the budget again next Tuesday.")  # fmt: skip


def run_once(store, clock, run_id="run-1", text=TURN):
    return admit_and_capture(store, clock, run_id, text, answer="A planning turn.")


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


def vault(tmp_path, server, provider="ollama", model="capture-model", system_role=None):
    root = make_capture_vault(tmp_path, server.url, provider=provider)
    if model != "capture-model" or system_role is not None:
        data = json.loads((root / "memvault.json").read_text())
        data["memory"]["llm"]["model"] = model
        if system_role is not None:
            data["memory"]["llm"]["systemRole"] = system_role
        (root / "memvault.json").write_bytes(render_config(data))
    clock = Clock()
    store = store_for(root, clock)
    store.env = {"MEMVAULT_TEST_KEY": "sk-loopback-test"}
    return root, store, clock


def chat_bodies(server, path):
    return [r.json for r in server.requests if r.path == path]


def test_default_config_data_has_no_system_role_key():
    # the option is opt-in in the file; "auto" is the resolved default
    assert "systemRole" not in default_config_data(mode="bujo", time_zone="UTC")["memory"].get("llm", {})


@pytest.mark.parametrize(
    ("model", "system_role", "folded"),
    [
        ("capture-model", None, False),
        ("gemma3:270m", None, True),
        ("capture-model", "fold", True),
        ("gemma3:4b", "system", False),
    ],
)
@pytest.mark.both_backends
def test_the_system_prompt_is_folded_where_configured_and_by_default_for_gemma(
    tmp_path, server, model, system_role, folded
):
    script = ChatScript(lambda _turn: GOOD)
    server.route(OLLAMA_PATH, script)
    root, store, clock = vault(tmp_path, server, model=model, system_role=system_role)
    run_once(store, clock)
    assert entry(root)["outcome"] == "captured"
    [body] = chat_bodies(server, OLLAMA_PATH)
    roles = [m["role"] for m in body["messages"]]
    if folded:
        assert roles == ["user"] and body["messages"][0]["content"].startswith(EXTRACTION_SYSTEM + "\n\n")
    else:
        assert roles == ["system", "user"] and body["messages"][0]["content"] == EXTRACTION_SYSTEM
    # either way the turn travels as data on the user message's last line, and the key rules with it
    user = body["messages"][-1]["content"]
    assert user_document(user)["turn"] == TURN and "every declared entity is used" in user
    store.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_each_request_carries_the_schema_the_token_cap_and_the_stop_sequence(tmp_path, server, provider):
    script = ChatScript(lambda _turn: GOOD, provider=provider)
    server.route(OLLAMA_PATH if provider == "ollama" else OPENAI_PATH, script)
    root, store, clock = vault(tmp_path, server, provider=provider)
    run_once(store, clock)
    [body] = chat_bodies(server, OLLAMA_PATH if provider == "ollama" else OPENAI_PATH)
    if provider == "ollama":
        schema, cap, stop = body["format"], body["options"]["num_predict"], body["options"]["stop"]
        assert body["options"]["temperature"] == 0 and body["stream"] is True
    else:
        fmt = body["response_format"]
        assert fmt["type"] == "json_schema" and fmt["json_schema"]["strict"] is True and fmt["json_schema"]["name"]
        schema, cap, stop = fmt["json_schema"]["schema"], body["max_tokens"], body["stop"]
    assert schema == json.loads(json.dumps(EXTRACTION_OUTPUT.schema))
    assert schema["properties"]["memories"]["items"]["properties"]["text"]["maxLength"] == 500
    assert cap == EXTRACTION_OUTPUT.max_tokens and 1000 < cap < 8192
    assert stop == ["\n\n\n"]
    store.close()


def _cut_off(provider, content='{"memories": [{"text": "Morgan leads'):
    if provider == "ollama":
        return 200, {"message": {"role": "assistant", "content": content}, "done": True, "done_reason": "length"}
    return 200, {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "length"}]
    }


@pytest.mark.both_backends
@pytest.mark.parametrize("provider", ["ollama", "openai"])
def test_a_cut_off_answer_is_never_parsed_and_gets_one_repair_call(tmp_path, server, provider):
    answers = iter([_cut_off(provider), GOOD])
    script = ChatScript(lambda _turn: next(answers), provider=provider)
    server.route(OLLAMA_PATH if provider == "ollama" else OPENAI_PATH, script)
    root, store, clock = vault(tmp_path, server, provider=provider)
    run_once(store, clock)
    assert entry(root)["outcome"] == "captured" and script.calls["extraction"] == 2
    repair = script.requests[1]["messages"]
    reason = "done_reason length" if provider == "ollama" else "finish_reason length"
    assert repair[-1]["role"] == "user" and reason in repair[-1]["content"] and "cut off" in repair[-1]["content"]
    assert summarize(root)["repairs"] == 1 and summarize(root)["calls"] == 2
    store.close()


@pytest.mark.both_backends
def test_cut_offs_on_both_calls_are_an_invalid_output_attempt(tmp_path, server):
    script = ChatScript(lambda _turn: _cut_off("ollama", GOOD[: len(GOOD) // 2]))
    server.route(OLLAMA_PATH, script)
    root, store, clock = vault(tmp_path, server)
    run_once(store, clock)
    found = entry(root)
    assert (found["state"], found["failure"], found["invalidOutputAttempts"]) == (
        "awaiting_capture",
        "invalid_model_output",
        1,
    )
    assert daily_text(root) == "" and script.calls["extraction"] == 2
    store.close()


@pytest.mark.both_backends
def test_the_repair_call_hands_the_model_the_parsers_exact_error(tmp_path, server):
    answers = iter([GOOD[:-1] + ', "confidence": 0.9}', GOOD])
    script = ChatScript(lambda _turn: next(answers))
    server.route(OLLAMA_PATH, script)
    root, store, clock = vault(tmp_path, server)
    run_once(store, clock)
    assert entry(root)["outcome"] == "captured" and daily_text(root).count("^f-") == 2
    first, repair = script.requests
    assert repair["messages"][: len(first["messages"])] == first["messages"]  # the same conversation ...
    assert repair["messages"][-2] == {"role": "assistant", "content": GOOD[:-1] + ', "confidence": 0.9}'}
    assert (
        "unknown fields ['confidence'] / missing fields []" in repair["messages"][-1]["content"]
    )  # ... plus the error
    store.close()


@pytest.mark.both_backends
def test_invalid_output_spends_its_own_budget_of_four_attempts(tmp_path, server):
    script = ChatScript(lambda _turn: "I cannot answer in JSON, sorry.")
    server.route(OLLAMA_PATH, script)
    root, store, clock = vault(tmp_path, server)
    worker = run_once(store, clock)
    for _ in range(10):
        clock.advance(timedelta(hours=7))
        worker.process_due()
    found = entry(root)
    # the projection was attempt 1; four capture attempts of two calls each, then a dead letter
    assert (found["state"], found["failure"], found["attempts"], found["invalidOutputAttempts"]) == (
        "dead",
        "invalid_model_output",
        5,
        4,
    )
    assert script.calls["extraction"] == 8  # far fewer than the 15 an outage gets (test_capture_providers)
    assert daily_text(root) == ""
    store.close()


#: what llama-cpp-python's server (0.3) answers to a json_schema request: a 500 naming the field
LLAMA_CPP_REFUSAL = {"error": {"message": "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                               "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
                               "type": "internal_server_error"}}  # fmt: skip


def _format_of(body):
    fmt = body["response_format"]
    return fmt["type"] + ("+schema" if "schema" in fmt else "")


@pytest.mark.parametrize(
    ("refuses", "status", "expected"),
    [
        ({"json_schema"}, 500, ["json_schema", "json_object+schema"]),  # llama-cpp-python
        ({"json_schema"}, 400, ["json_schema", "json_object+schema"]),
        ({"json_schema", "json_object+schema"}, 400, ["json_schema", "json_object+schema", "json_object"]),
    ],
)
@pytest.mark.both_backends
def test_a_server_that_rejects_the_schema_form_is_asked_again_one_step_down(
    tmp_path, server, refuses, status, expected
):
    script = ChatScript(lambda _turn: GOOD, provider="openai")

    def handler(body):
        if _format_of(body) in refuses:
            return status, LLAMA_CPP_REFUSAL
        return script(body)

    server.route(OPENAI_PATH, handler)
    root, store, clock = vault(tmp_path, server, provider="openai")
    worker = run_once(store, clock)
    assert entry(root)["outcome"] == "captured"
    assert [_format_of(b) for b in chat_bodies(server, OPENAI_PATH)] == expected
    bodies = chat_bodies(server, OPENAI_PATH)
    if expected[-1] == "json_object+schema":  # llama-cpp-python's own form still carries the whole schema
        assert bodies[-1]["response_format"]["schema"] == json.loads(json.dumps(EXTRACTION_OUTPUT.schema))
    model = worker.capture_service().model()
    assert (
        "refused response format 'json_schema'" in model.schema_fallback and f"HTTP {status}" in model.schema_fallback
    )
    # the next turn starts on the step that worked: no second refusal
    store.persist_completed_turn(
        "run-2", "Another turn.", capture_text="user: ok\nassistant: The Atlas demo is on Friday."
    )
    script.extract = lambda _turn: extraction(memory("The Atlas demo is on Friday."))
    worker.process_due()
    assert {_format_of(b) for b in chat_bodies(server, OPENAI_PATH)[len(expected) :]} == {expected[-1]}
    store.close()


@pytest.mark.both_backends
def test_ollama_falls_back_from_a_schema_to_plain_json(tmp_path, server):
    script = ChatScript(lambda _turn: GOOD)
    server.route(
        OLLAMA_PATH,
        lambda body: (400, {"error": "invalid format"}) if isinstance(body["format"], dict) else script(body),
    )
    root, store, clock = vault(tmp_path, server)
    run_once(store, clock)
    assert entry(root)["outcome"] == "captured"
    assert [b["format"] == "json" for b in chat_bodies(server, OLLAMA_PATH)] == [False, True]
    store.close()


@pytest.mark.one_engine("its vault is made without the engine's fixture, so no index of it reaches the server")
def test_an_outage_is_not_mistaken_for_a_schema_refusal(tmp_path, server):
    model = HttpChatModel("openai", server.url, "m", timeout_ms=5000)
    server.route(OPENAI_PATH, lambda _body: (503, "overloaded"))
    with pytest.raises(Exception, match="HTTP 503"):
        model.complete([{"role": "user", "content": "hi"}], response_format_json=True, output=EXTRACTION_OUTPUT)
    assert model.schema_fallback is None and len(server.requests) == 1


@pytest.mark.both_backends
def test_an_empty_extraction_of_a_substantive_turn_is_a_dead_letter_that_retry_revives(tmp_path, server):
    script = ChatScript(lambda _turn: EMPTY)
    server.route(OLLAMA_PATH, script)
    root, store, clock = vault(tmp_path, server)
    worker = run_once(store, clock, text=LONG_TURN)
    found = entry(root)
    assert (found["state"], found["failure"]) == ("dead", "empty_extraction")
    assert script.calls["extraction"] == 1  # a valid answer: no repair, no automatic retry
    stats = summarize(root)
    assert (stats["emptyExtractions"], stats["emptySubstantive"], stats["added"]) == (1, 1, 0)
    # a better model, then `memvault retry`: captured
    script.extract = lambda _turn: GOOD
    assert make_due(IntakeDirs(root), intake_id_for("run-1"), clock()) == "revived"
    worker.process_due()
    assert entry(root)["outcome"] == "captured" and daily_text(root).count("^f-") == 2
    assert summarize(root)["added"] == 2 and summarize(root)["emptyStreak"] == 0
    store.close()


@pytest.mark.both_backends
def test_an_empty_extraction_of_a_short_turn_is_a_plain_capture(tmp_path, server):
    server.route(OLLAMA_PATH, ChatScript(lambda _turn: EMPTY))
    root, store, clock = vault(tmp_path, server)
    run_once(store, clock, text="user: thanks!\nassistant: You're welcome.")
    assert entry(root)["outcome"] == "captured"
    stats = summarize(root)
    assert (stats["runs"], stats["emptyExtractions"], stats["emptySubstantive"]) == (1, 1, 0)
    store.close()


@pytest.mark.both_backends
def test_health_warns_when_the_last_five_substantive_captures_produced_nothing(tmp_path, server):
    server.route(OLLAMA_PATH, ChatScript(lambda _turn: EMPTY))
    root, store, clock = vault(tmp_path, server)
    worker = IntakeWorker(store, clock=clock)
    for n in range(5):
        store.persist_completed_turn(
            f"run-{n}", "A planning turn.", capture_text=LONG_TURN.replace("today", f"day {n}")
        )
        worker.process_due()
        codes = [f.code for f in check_health(store.layout, store.config).findings]
        assert ("not_extracting" in codes) == (n == 4)  # four in a row is not yet a pattern; five is
    report = check_health(store.layout, store.config)
    [warning] = [f for f in report.findings if f.code == "not_extracting"]
    assert "the model is not extracting facts: try a larger model" in warning.message
    assert report.details["capture"]["emptyStreak"] == 5 and "LONG" not in json.dumps(report.details)
    store.close()
