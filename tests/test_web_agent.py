"""Agent search: the direct search's evidence, one chat call over the real OpenAI / Ollama wire
protocol (a loopback server), and citations filtered to the (source, id) pairs supplied."""

import json
from datetime import UTC, datetime

import pytest

from memvault.indexer.services.evidence_answer import MAX_CITATIONS, Evidence, evidence_from_hits, parse_answer
from memvault.vault.capture.fields import ModelOutputInvalid
from tests.loopback import LoopbackServer, closed_port_url
from tests.web_helpers import InProcessServer

TOKEN = "agent-token-0123456789abcdef"


def _vault(fixture_vault, llm: dict | None):
    data = json.loads((fixture_vault / "memvault.json").read_text())
    if llm is not None:
        data["memory"]["llm"] = llm
    (fixture_vault / "memvault.json").write_text(json.dumps(data))
    return fixture_vault


# The unmarked tests check the citation filter and the answer's shape as pure functions: no vault, no index.


@pytest.fixture
def serve():
    """serve(root, env) → a running in-process server over that vault (closed at the end)."""
    from memvault.cli.web.app import build_app
    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.server import bind_loopback
    from memvault.indexer.engine.store import MemoryStore

    opened = []

    def start(root, env=None):
        store = MemoryStore.open(root, env=env or {})
        bound = bind_loopback(0)
        server = InProcessServer(build_app(VaultReader(store, env=env or {}), token=TOKEN, port=bound.port), bound)
        server.__enter__()
        opened.append((server, store))
        return server

    yield start
    for server, store in opened:
        server.__exit__()
        store.close()


def ask(server, question: str):
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://127.0.0.1:{server.port}"}
    body = f"q={question.replace(' ', '+')}".encode()
    status, _, raw = server.request("POST", "/recall/agent.json", token=TOKEN, headers=headers, body=body)
    return status, json.loads(raw)


def openai_reply(content: str):
    return 200, {"id": "chatcmpl-1", "object": "chat.completion", "model": "loopback-chat",
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content}}]}  # fmt: skip


def citing_first_and_invented(request_json):
    evidence = json.loads(request_json["messages"][1]["content"])["evidence"]
    first = evidence[0]
    citations = [
        {"source": first["source"], "id": first["id"]},
        {"source": "daily/2026-11-30.md#^m-0000000000", "id": "m-0000000000"},  # never supplied
        {"source": "daily/1999-01-01.md#^" + first["id"], "id": first["id"]},  # a real id under another note
        {"source": first["source"], "id": first["id"]},  # repeated: shown once
    ]
    return openai_reply(json.dumps({"answer": f"Blue. {first['text']}", "citations": citations}))


@pytest.mark.both_backends
def test_openai_answer_keeps_supplied_citations_and_counts_the_rest(fixture_vault, serve):
    with LoopbackServer() as chat:
        chat.route("/v1/chat/completions", citing_first_and_invented)
        server = serve(_vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": chat.url}))
        status, body = ask(server, "which color did we pick for deployment")
        assert status == 200
        answer = body["answer"]
        assert answer["dropped"] == 2
        assert {c["id"] for c in answer["droppedCitations"]} == {"m-0000000000", body["hits"][0]["id"]}
        assert [c["id"] for c in answer["citations"]] == [body["hits"][0]["id"]]
        assert answer["citations"][0]["url"] == body["hits"][0]["url"]
        assert answer["answer"].startswith("Blue.")
        (request,) = chat.requests_to("/v1/chat/completions")
        payload = request.json
        assert "tools" not in payload and payload["temperature"] == 0 and payload["stream"] is True
        assert payload["response_format"] == {"type": "json_object"}
        supplied = json.loads(payload["messages"][1]["content"])
        assert supplied["question"] == "which color did we pick for deployment"
        assert [e["id"] for e in supplied["evidence"]] == [h["id"] for h in body["hits"]][: len(supplied["evidence"])]
        assert "ONLY the evidence" in payload["messages"][0]["content"]


@pytest.mark.both_backends
def test_the_page_shows_the_dropped_count(fixture_vault, serve):
    with LoopbackServer() as chat:
        chat.route("/v1/chat/completions", citing_first_and_invented)
        server = serve(_vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": chat.url}))
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://127.0.0.1:{server.port}"}
        status, _, html = server.request(
            "POST", "/recall/agent", token=TOKEN, headers=headers, body=b"q=deployment+color"
        )
        assert status == 200
        assert "2 citations dropped" in html.decode()


@pytest.mark.both_backends
def test_ollama_protocol(fixture_vault, serve):
    def reply(request_json):
        evidence = json.loads(request_json["messages"][1]["content"])["evidence"]
        content = json.dumps(
            {"answer": "Rotterdam.", "citations": [{"source": e["source"], "id": e["id"]} for e in evidence[:2]]}
        )
        return 200, {"model": "llama3.2", "message": {"role": "assistant", "content": content}, "done": True}

    with LoopbackServer() as chat:
        chat.route("/api/chat", reply)
        server = serve(_vault(fixture_vault, {"provider": "ollama", "model": "llama3.2", "endpoint": chat.url}))
        status, body = ask(server, "where does Sam live")
        assert status == 200 and body["answer"]["dropped"] == 0
        assert [c["id"] for c in body["answer"]["citations"]] == [h["id"] for h in body["hits"][:2]]
        (request,) = chat.requests_to("/api/chat")
        assert request.json["format"] == "json" and request.json["options"]["temperature"] == 0
        assert "tools" not in request.json


@pytest.mark.parametrize(
    "content",
    [
        "Sure! The color is blue.",
        '```json\n{"answer": "blue", "citations": []}\n```',
        '{"answer": 42}',
        '{"answer": "x", "citations": "daily/x"}',
        "[]",
        '{"answer": "a", "answer": "b"}',
    ],
)
@pytest.mark.both_backends
def test_a_malformed_model_answer_is_reported_and_the_evidence_stays(fixture_vault, serve, content):
    with LoopbackServer() as chat:
        chat.route("/v1/chat/completions", lambda _request: openai_reply(content))
        server = serve(_vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": chat.url}))
        status, body = ask(server, "deployment color")
        assert status == 200
        assert "agent search" in body["answer"]["error"]
        assert body["hits"]  # the direct search still stands


@pytest.mark.both_backends
def test_an_unreachable_model_is_named(fixture_vault, serve):
    endpoint = closed_port_url()
    server = serve(
        _vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": endpoint, "timeoutMs": 3000})
    )
    status, body = ask(server, "deployment color")
    assert status == 200
    assert endpoint.split("//")[1] in body["answer"]["error"] and body["hits"]


@pytest.mark.both_backends
def test_a_server_error_is_named(fixture_vault, serve):
    with LoopbackServer() as chat:
        chat.route("/v1/chat/completions", status=500, body="model crashed")
        server = serve(_vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": chat.url}))
        status, body = ask(server, "deployment color")
        assert status == 200 and "500" in body["answer"]["error"]


@pytest.mark.both_backends
def test_an_unset_api_key_turns_agent_search_off_with_the_reason(fixture_vault, serve):
    llm = {
        "provider": "openai",
        "model": "gpt",
        "endpoint": "http://127.0.0.1:9/v1",
        "apiKeyEnv": "MEMVAULT_TEST_CHAT_KEY",
    }
    server = serve(_vault(fixture_vault, llm))
    status, _, raw = server.get("/recall.json?q=blue", token=TOKEN)
    body = json.loads(raw)
    assert body["agent"]["enabled"] is False and "MEMVAULT_TEST_CHAT_KEY" in body["agent"]["reason"]
    status, answer = ask(server, "deployment color")
    assert status == 200 and "agent search is off" in answer["answer"]["error"]


@pytest.mark.both_backends
def test_no_evidence_means_no_model_call(fixture_vault, serve):
    with LoopbackServer() as chat:
        chat.route("/v1/chat/completions", citing_first_and_invented)
        server = serve(_vault(fixture_vault, {"provider": "openai", "model": "loopback-chat", "endpoint": chat.url}))
        status, body = ask(server, "zyxwvut qqqqq")
        assert status == 200 and body["hits"] == [] and body["answer"]["citations"] == []
        assert chat.requests_to("/v1/chat/completions") == []


# --- the filter itself ------------------------------------------------------------------------------


EVIDENCE = (Evidence("m-1", "daily/2026-11-30.md#^m-1", "one", "2026-11-30"),
            Evidence("m-2", "daily/2026-11-29.md#^m-2", "two", "2026-11-29"))  # fmt: skip


def test_only_exact_pairs_survive():
    completion = json.dumps({"answer": "x", "citations": [
        {"source": "daily/2026-11-30.md#^m-1", "id": "m-1"},
        {"source": "daily/2026-11-30.md#^m-1", "id": "m-2"},  # id of one record, source of another
        {"source": "daily/2026-11-29.md#^m-2"},  # no id
        "m-2",  # not an object
        {"source": "daily/2026-11-29.md#^m-2", "id": "m-2", "extra": "<script>"},
    ]})  # fmt: skip
    answer = parse_answer(completion, EVIDENCE)
    assert [c.id for c in answer.citations] == ["m-1", "m-2"]
    assert answer.dropped == 3


def test_citations_past_the_cap_are_counted_as_dropped():
    citations = [{"source": "daily/2026-11-30.md#^m-1", "id": "m-1"}] * (MAX_CITATIONS + 5)
    answer = parse_answer(json.dumps({"answer": "x", "citations": citations}), EVIDENCE)
    assert len(answer.citations) == 1 and answer.dropped == 5


def test_a_missing_citations_list_is_no_citations():
    answer = parse_answer('{"answer": "I cannot tell from this evidence."}', EVIDENCE)
    assert answer.citations == () and answer.dropped == 0


@pytest.mark.parametrize("completion", ["", "null", '{"citations": []}', '{"answer": "x", "citations": {}}', "NaN"])
def test_shapes_other_than_the_asked_object_are_refused(completion):
    with pytest.raises(ModelOutputInvalid):
        parse_answer(completion, EVIDENCE)


def test_evidence_is_bounded():
    class Hit:
        def __init__(self, n):
            self.id, self.source, self.text = f"m-{n}", f"daily/2026-11-30.md#^m-{n}", "x" * 5000
            self.at = datetime(2026, 11, 30, tzinfo=UTC)

    evidence = evidence_from_hits(Hit(n) for n in range(30))
    assert len(evidence) <= 10
    assert all(len(e.text) <= 1200 for e in evidence)
    assert sum(len(e.text) for e in evidence) <= 8000
