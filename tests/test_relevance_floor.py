"""The relevance floor: a question with no real evidence in the vault gets no hits and says so,
in every face of tool mode; real questions, paraphrases included, keep theirs."""

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.floor import EMPTY_REASON, evidence
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_test_backend, on_the_tests_backend

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


@pytest.fixture(params=["journal", "lite"])
def vault(tmp_path, request):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode=request.param, time_zone="Europe/Amsterdam")))
    on_the_tests_backend(request, root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    return root


@pytest.mark.both_backends
@pytest.mark.parametrize("query", ["quokkafoo", "xyzzy plugh nothing", "zorblax quintessence vexillum"])
def test_nonsense_gets_no_hits_and_says_why(vault, query):
    with MemoryStore.open(vault) as store:
        result = store.recall(query, limit=10)
    assert result.hits == () and result.empty_reason == EMPTY_REASON == "nothing in memory matches"
    assert result.to_json()["empty_reason"] == EMPTY_REASON  # what MemoryRecall and --json carry
    assert "run history" in result.guidance  # the empty answer still repeats the handoff


@pytest.mark.both_backends
def test_without_the_floor_the_same_question_returns_every_memory(tmp_path):
    """The floor is what empties it: ranking alone (vectors always find a nearest) returns noise."""
    root = tmp_path / "j"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="Europe/Amsterdam")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    with MemoryStore.open(root) as store:
        index = store.serving_index()
        noise = recall_tool(index.bm25, store._semantic, "What is Alex's favourite band?", 10, floor=False)
        floored = recall_tool(index.bm25, store._semantic, "What is Alex's favourite band?", 10)
    assert noise.hits and floored.hits == ()


@pytest.mark.both_backends
def test_a_person_the_vault_never_met_gets_nothing_and_one_it_knows_gets_the_fact(vault):
    with MemoryStore.open(vault) as store:
        unknown = store.recall("Where does Alex live?", limit=5)
        known = store.recall("Where does Priya live?", limit=5)
    assert unknown.hits == () and unknown.explain["evidence"]["unknownNames"] is True
    assert known.hits[0].text == "Priya lives in Rotterdam."
    assert known.empty_reason is None and known.explain["evidence"]["share"] >= 0.6


@pytest.mark.both_backends
def test_real_questions_keep_their_hits(vault):
    with MemoryStore.open(vault) as store:
        for query, expected in [
            ("which color did we pick for the deployment?", FACTS[0]),
            ("When is the offsite?", FACTS[2]),
            ("billing timeouts", FACTS[4]),
        ]:
            result = store.recall(query, limit=5)
            assert expected in [hit.text for hit in result.hits], query


@pytest.mark.both_backends
def test_a_paraphrase_counts_through_the_word_vectors(tmp_path):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="Europe/Amsterdam")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    with MemoryStore.open(root) as store:  # closing drained the vector queue: every memory has its vector
        result = store.recall("puppy pet", limit=3)
    # neither word is in the vault: "dog" is their near word, and that is evidence
    assert result.hits[0].text == "Sam adopted a rescue dog named Biscuit."


def test_one_unknown_fragment_does_not_outweigh_a_small_vault_where_every_word_is_everywhere():
    same = "zebra record field team observation dates places names"
    frequencies = lambda _field, terms: (8, {term: (0 if term == "wi" else 8) for term in terms})  # noqa: E731
    found = evidence(frequencies, same + " wi", [(same, "")] * 8)
    assert found.share > 0.6 and not found.empty  # idf alone would give the fragment ~98% of the weight


@pytest.mark.both_backends
def test_the_cli_says_nothing_matches_and_json_carries_the_reason(vault):
    out = CliRunner().invoke(cli, ["--vault", str(vault), "search", "quokkafoo"], catch_exceptions=False)
    assert "No memories found: nothing in memory matches." in out.output
    as_json = CliRunner().invoke(cli, ["--vault", str(vault), "search", "quokkafoo", "--json"], catch_exceptions=False)
    body = json.loads(as_json.output)
    assert body["hits"] == [] and body["empty_reason"] == "nothing in memory matches"


@pytest.mark.both_backends
def test_explain_shows_the_evidence_against_the_floor(vault):
    out = CliRunner().invoke(
        cli, ["--vault", str(vault), "search", "Where does Priya live?", "--explain"], catch_exceptions=False
    )
    assert "evidence: {'share': " in out.output and "'floor': 0.2" in out.output


@pytest.mark.both_backends
def test_cjk_questions_are_weighed_by_their_bigrams(tmp_path):
    root = tmp_path / "lite"
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="Asia/Tokyo")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        store.remember("来週、東京に出張します。", at=datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo")))
        store.remember("Priya lives in Rotterdam.", at=datetime(2026, 11, 30, 9, 1, tzinfo=ZoneInfo("Asia/Tokyo")))
        assert [hit.text for hit in store.recall("東京", limit=3).hits][:1] == ["来週、東京に出張します。"]
        assert store.recall("大阪", limit=3).hits == ()  # a city the vault never mentions


@pytest.mark.both_backends
def test_a_name_in_another_common_spelling_is_known_but_a_stranger_is_not(tmp_path):
    """John for the vault's Jon (a silent h) keeps its hits; Jonas, whom the vault never met, does not."""
    root = tmp_path / "lite"
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="Europe/Amsterdam")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        store.remember("Jon moved to Lisbon last spring.", at=datetime(2026, 11, 30, 9, 0, tzinfo=AMS))
        misspelt = store.recall("Where did John move?", limit=5)
        stranger = store.recall("Where did Jonas move?", limit=5)
    assert [hit.text for hit in misspelt.hits] == ["Jon moved to Lisbon last spring."]
    assert misspelt.explain["evidence"]["unknownNames"] is False
    assert stranger.hits == () and stranger.explain["evidence"]["unknownNames"] is True
