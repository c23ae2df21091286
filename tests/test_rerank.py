"""The rerank provider: both wire formats against a loopback server, hostile answers refused whole,
and recall fusing its scores (never replacing the order) or answering without it, `degraded`."""

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.rerank import HttpReranker
from memvault.vault.config import default_config_data, load_config, render_config
from memvault.vault.config_checks import validate_config_data
from memvault.vault.errors import InvalidConfig, ProviderUnavailable
from memvault.vault.init import init_vault
from tests.loopback import LoopbackServer, Reply
from tests.postgres_helpers import on_test_backend

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

AMS = ZoneInfo("Europe/Amsterdam")
FACTS = [
    "Morgan chose blue as the deployment color.",
    "Priya lives in Rotterdam.",
    "The offsite is booked in Haarlem for 14 January.",
    "Sam adopted a rescue dog named Biscuit.",
    "The billing service times out on large invoice batches.",
]
DOCS = ["alpha", "beta", "gamma"]


@pytest.fixture
def server():
    with LoopbackServer() as running:
        yield running


def cohere_answer(scores):
    return {"results": [{"index": n, "relevance_score": s} for n, s in sorted(enumerate(scores), key=lambda p: -p[1])]}


# --- the wire formats ------------------------------------------------------------------------------


def test_cohere_format_sends_model_query_documents_top_n_and_reads_results(server):
    server.route("/v1/rerank", json=cohere_answer([0.1, 0.9, 0.5]))
    reranker = HttpReranker(server.url + "/v1/rerank", "bge-reranker-v2-m3")
    assert reranker.scores("which one?", DOCS).scores == {0: 0.1, 1: 0.9, 2: 0.5}
    sent = server.requests_to("/v1/rerank")[0].json
    assert sent == {"model": "bge-reranker-v2-m3", "query": "which one?", "documents": DOCS, "top_n": 3}


def test_tei_format_sends_query_and_texts_and_reads_a_list(server):
    server.route(
        "/rerank", json=[{"index": 2, "score": 3.5}, {"index": 0, "score": -1.0}, {"index": 1, "score": -7.25}]
    )
    reranker = HttpReranker(server.url + "/rerank", "bge", format="tei")
    assert reranker.scores("q", DOCS).scores == {2: 3.5, 0: -1.0, 1: -7.25}
    assert server.requests_to("/rerank")[0].json == {"query": "q", "texts": DOCS}


def test_either_answer_shape_is_read_whichever_was_asked(server):
    server.route("/rerank", json=[{"index": 0, "score": 1.0}])  # TEI's shape to a Cohere-style request
    assert HttpReranker(server.url + "/rerank", "m").scores("q", DOCS).scores == {0: 1.0}


def test_a_server_that_cuts_top_n_scores_what_it_returned(server):
    server.route("/v1/rerank", json={"results": [{"index": 1, "relevance_score": 0.7}]})
    assert HttpReranker(server.url + "/v1/rerank", "m").scores("q", DOCS).scores == {1: 0.7}


def test_an_api_key_is_sent_as_a_bearer_token_and_never_shown(server):
    server.route("/v1/rerank", json=cohere_answer([1.0, 0.0, 0.5]))
    reranker = HttpReranker(server.url + "/v1/rerank", "m", api_key="sk-secret-123")
    reranker.scores("q", DOCS)
    assert server.requests[0].headers["authorization"] == "Bearer sk-secret-123"
    assert "sk-secret" not in repr(reranker)


HOSTILE = [
    pytest.param(Reply(500, "model crashed"), "500", id="http-500"),
    pytest.param(Reply(200, b"{not json"), "malformed JSON", id="malformed-json"),
    pytest.param(Reply(200, {"data": []}), "neither", id="wrong-shape"),
    pytest.param(Reply(200, cohere_answer([0.1, 0.2, 0.3, 0.4])), "4 results for 3 documents", id="too-many"),
    pytest.param(
        Reply(200, {"results": [{"index": 0, "relevance_score": 0.5}] * 10_000}), "10000 results for 3", id="huge-list"
    ),
    pytest.param(Reply(200, {"results": [], "padding": "x" * 2_000_000}), "larger than 1 MiB", id="oversized"),
    pytest.param(
        Reply(200, {"results": [{"index": 3, "relevance_score": 0.5}]}), "document 3", id="index-out-of-range"
    ),
    pytest.param(Reply(200, {"results": [{"index": -1, "relevance_score": 0.5}]}), "document -1", id="negative-index"),
    pytest.param(Reply(200, {"results": [{"index": True, "relevance_score": 0.5}]}), "document True", id="bool-index"),
    pytest.param(
        Reply(200, {"results": [{"index": 0, "relevance_score": 0.5}, {"index": 0, "relevance_score": 0.4}]}),
        "ranked twice",
        id="duplicate-index",
    ),
    pytest.param(Reply(200, {"results": [{"index": 0, "relevance_score": float("nan")}]}), "not a finite", id="nan"),
    pytest.param(
        Reply(200, b'{"results": [{"index": 0, "relevance_score": Infinity}]}'), "not a finite", id="infinity"
    ),
    pytest.param(Reply(200, {"results": [{"index": 0, "relevance_score": "high"}]}), "not a finite", id="string-score"),
    pytest.param(Reply(200, {"results": ["0.5"]}), "not an object", id="result-not-object"),
]


@pytest.mark.parametrize(("reply", "said"), HOSTILE)
def test_hostile_answers_are_refused_whole_with_the_reason(server, reply, said):
    server.route("/v1/rerank", lambda _request: reply)
    with pytest.raises(ProviderUnavailable, match="reranker") as caught:
        HttpReranker(server.url + "/v1/rerank", "m").scores("q", DOCS)
    assert said in str(caught.value)


def test_a_server_slower_than_the_deadline_is_given_up_on(server):
    server.route("/v1/rerank", json=cohere_answer([1.0, 0.5, 0.2]), delay=3.0)
    with pytest.raises(ProviderUnavailable, match="reranker"):
        HttpReranker(server.url + "/v1/rerank", "m", timeout_s=0.3).scores("q", DOCS)


# --- config ------------------------------------------------------------------------------------------


def journal_config(rerank: dict) -> dict:
    data = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
    data["memory"]["rerank"] = rerank
    return data


def test_the_rerank_block_is_read_with_its_defaults(tmp_path):
    init_vault(
        tmp_path / "v",
        render_config(
            journal_config(
                {"provider": "http", "endpoint": "http://localhost:8080/v1/rerank", "model": "bge-reranker-v2-m3"}
            )
        ),
    )
    rerank = load_config(tmp_path / "v", {}).memory.rerank
    assert (rerank.provider, rerank.endpoint, rerank.model) == (
        "http",
        "http://localhost:8080/v1/rerank",
        "bge-reranker-v2-m3",
    )
    assert (rerank.format, rerank.timeout_ms, rerank.candidates, rerank.api_key_env) == ("cohere", 2000, 40, None)


@pytest.mark.parametrize(
    ("block", "said"),
    [
        (
            {"provider": "grpc", "endpoint": "http://x/rerank", "model": "m"},
            'memory.rerank.provider "grpc" is not supported',
        ),
        ({"provider": "http", "model": "m"}, "memory.rerank.endpoint is required"),
        ({"provider": "http", "endpoint": "http://x/rerank"}, "memory.rerank.model is required"),
        ({"provider": "http", "endpoint": "file:///etc/passwd", "model": "m"}, "is not an http(s) URL"),
        ({"provider": "http", "endpoint": "http://x/rerank", "model": "m", "format": "jina"}, 'use "cohere"'),
        ({"provider": "http", "endpoint": "http://x/rerank", "model": "m", "candidates": 0}, "between 1 and 100"),
        (
            {"provider": "http", "endpoint": "http://x/rerank", "model": "m", "timeoutMs": 600_000},
            "between 1 and 60000",
        ),
        ({"provider": "http", "endpoint": "http://x/rerank", "model": "m", "apiKey": "sk-live"}, "never put a key"),
    ],
)
def test_a_bad_rerank_block_is_refused_naming_the_key_and_the_fix(block, said):
    problems = validate_config_data(journal_config(block))
    assert any(said in problem for problem in problems), problems


def test_a_bad_rerank_block_stops_the_vault_from_opening(tmp_path):
    init_vault(tmp_path / "v", render_config(default_config_data(mode="journal")))
    (tmp_path / "v" / "memvault.json").write_text(json.dumps(journal_config({"provider": "http"})), encoding="utf-8")
    with pytest.raises(InvalidConfig, match="memory.rerank.endpoint is required"):
        load_config(tmp_path / "v", {})


# --- recall with a reranker ---------------------------------------------------------------------------


def vault_with_reranker(root, server, **extra):
    rerank = {"provider": "http", "endpoint": server.url + "/v1/rerank", "model": "m", **extra}
    init_vault(root, render_config(journal_config(rerank)))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    return root


def plain_hits(root, query):
    data = json.loads((root / "memvault.json").read_text(encoding="utf-8"))
    del data["memory"]["rerank"]
    (root / "memvault.json").write_bytes(render_config(data))
    with MemoryStore.open(root) as store:
        return [hit.text for hit in store.recall(query, limit=5).hits]


def by_text(score_of):
    """A handler scoring each document by `score_of(text)`, in the Cohere shape."""
    return lambda request: (200, cohere_answer([score_of(text) for text in request["documents"]]))


@pytest.mark.both_backends
def test_the_rerankers_choice_moves_up_and_explain_says_what_it_did(tmp_path, server):
    root = vault_with_reranker(tmp_path / "v", server)
    server.route("/v1/rerank", by_text(lambda text: 1.0 if "Biscuit" in text else 0.0))
    with MemoryStore.open(root) as store:
        result = store.recall("Which pet does Sam have?", limit=5)
    assert result.degraded is None
    assert result.hits[0].text == "Sam adopted a rescue dog named Biscuit."
    assert result.hits[0].explain["rerank"]["rank"] == 1
    assert result.explain["rerank"]["model"] == "m" and result.explain["rerank"]["scored"] >= 1
    sent = server.requests_to("/v1/rerank")[0].json
    assert (
        sent["query"] == "Which pet does Sam have?" and "Sam adopted a rescue dog named Biscuit." in sent["documents"]
    )


@pytest.mark.both_backends
def test_a_reranker_that_reverses_the_list_cannot_wreck_its_head(tmp_path, server):
    root = vault_with_reranker(tmp_path / "v", server)
    query = "Which deployment color did Morgan choose?"
    server.route("/v1/rerank", lambda request: (200, cohere_answer([-n for n in range(len(request["documents"]))])))
    with MemoryStore.open(root) as store:
        reranked = [hit.text for hit in store.recall(query, limit=5).hits]
    plain = plain_hits(root, query)
    assert plain[0] == "Morgan chose blue as the deployment color."
    assert reranked[0] == plain[0]  # fused, not replaced: the reranker put it last of all


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "reply",
    [Reply(500, "boom"), Reply(200, b"<html>"), Reply(200, {"results": [{"index": 99}]})],
    ids=["500", "not-json", "bad-index"],
)
def test_a_failing_reranker_leaves_the_answer_as_without_it_and_says_degraded(tmp_path, server, reply):
    root = vault_with_reranker(tmp_path / "v", server)
    server.route("/v1/rerank", lambda _request: reply)
    with MemoryStore.open(root) as store:
        result = store.recall("Where does Priya live?", limit=5)
    assert result.degraded and "reranker unavailable" in result.degraded
    assert "error" in result.explain["rerank"]
    assert [hit.text for hit in result.hits] == plain_hits(root, "Where does Priya live?")


@pytest.mark.both_backends
def test_a_reranker_past_its_deadline_is_answered_without(tmp_path, server):
    root = vault_with_reranker(tmp_path / "v", server, timeoutMs=200)
    server.route("/v1/rerank", json=cohere_answer([1.0] * 5), delay=3.0)
    with MemoryStore.open(root) as store:
        result = store.recall("Where does Priya live?", limit=5)
    assert "reranker unavailable" in result.degraded
    assert result.hits[0].text == "Priya lives in Rotterdam."


@pytest.mark.both_backends
def test_a_named_but_unset_api_key_variable_degrades_instead_of_calling(tmp_path, server):
    root = vault_with_reranker(tmp_path / "v", server, apiKeyEnv="RERANK_TEST_KEY")
    server.route("/v1/rerank", json=cohere_answer([1.0] * 5))
    with MemoryStore.open(root) as store:
        result = store.recall("Where does Priya live?", limit=5)
    assert "RERANK_TEST_KEY" in result.degraded and result.hits
    assert server.requests == []
