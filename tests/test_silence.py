"""Silence (issue 46): a question none of whose words occurs in the vault, with only weak or
piece-shared near words, gets no hits and the "nothing found" answer in every face of recall,
on both index engines; real questions, paraphrases included, keep theirs; malformed and hostile
questions get a clear answer, never a traceback. Real vaults, the builtin model, no mocks."""

import json
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.cli.mcp_tools import RECALL
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.coverage import word_matches
from memvault.indexer.search.floor import EMPTY_REASON
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_test_backend
from tests.test_mcp import body_of, with_client

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

UTC = ZoneInfo("UTC")
FACTS = [
    "Morgan chose blue as the deployment color.",
    "Priya lives in Rotterdam.",
    "The offsite is booked in Haarlem for 14 January.",
    "Sam adopted a rescue dog named Biscuit.",
    "The billing service times out on large invoice batches.",
]
#: absent from FACTS, and answered by the floor before issue 46 through a shared first piece
#: ("rot" → Rotterdam, "pri" → Priya, "off" → offsite)
PIECE_SHARED = ["rot", "pri", "off", "tutto rot"]
#: words the vault never holds, from the model's vocabulary and from everyday English
ABSENT = [*PIECE_SHARED, "parad tutto", "volcano", "zebra giraffe lantern", "auth", "quokka harbor", "mattress"]
#: real questions and paraphrases, with the memory each must find
REAL = [
    ("which color did we pick for the deployment?", FACTS[0]),
    ("Where does Priya live?", FACTS[1]),
    ("When is the offsite?", FACTS[2]),
    ("puppy pet", FACTS[3]),  # no word of it is in the vault: "dog" is their near word
    ("which colour", FACTS[0]),  # another spelling, found through the word vectors
    ("billing timeouts", FACTS[4]),
]
HOSTILE = ["", "   ", "???", "!" * 5000, "x" * 200_000, "a " * 20_000, "🦊🦊", "東京タワー", "مرحبا", "\x00null",
           "e\u0301\u0301", "AND OR NOT", '"unbalanced', "*", "((("]  # fmt: skip


def make_vault(root: Path, mode: str = "journal") -> Path:
    init_vault(root, render_config(default_config_data(mode=mode, time_zone="UTC")))
    on_test_backend(root)
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=UTC))
    return root  # closing drained the vector queue: every memory has its vector


@pytest.fixture
def vault(tmp_path) -> Path:
    return make_vault(tmp_path / "v")


@pytest.mark.both_backends
def test_absent_words_get_the_nothing_found_answer(vault):
    with MemoryStore.open(vault) as store:
        for query in ABSENT:
            result = store.recall(query, limit=10)
            assert result.hits == () and result.empty_reason == EMPTY_REASON, query
            assert result.explain["evidence"]["knownTerms"] is False, query


@pytest.mark.both_backends
def test_the_floor_before_issue_46_answered_them_through_a_shared_piece(vault):
    """What changed is the cause, not a list: the same strings, silence off, get hits."""
    with MemoryStore.open(vault) as store:
        index = store.serving_index()
        for query in PIECE_SHARED:
            before = recall_tool(index.bm25, store._semantic, query, 10, silence=False)
            now = recall_tool(index.bm25, store._semantic, query, 10)
            assert before.hits and now.hits == () and now.empty_reason == EMPTY_REASON, query


@pytest.mark.both_backends
def test_real_questions_and_paraphrases_keep_their_hits(vault):
    with MemoryStore.open(vault) as store:
        for query, expected in REAL:
            result = store.recall(query, limit=5)
            assert expected in [hit.text for hit in result.hits], query
            assert result.empty_reason is None, query


@pytest.mark.both_backends
def test_auto_mode_stays_silent_on_absent_words(vault):
    with MemoryStore.open(vault) as store:
        for query in ABSENT:
            assert store.recall(query, limit=10, mode="auto").hits == (), query


@pytest.mark.both_backends
def test_malformed_and_hostile_questions_get_a_clear_answer(vault):
    with MemoryStore.open(vault) as store:
        for query in HOSTILE:
            for mode in ("tool", "auto"):
                result = store.recall(query, limit=5, mode=mode)
                assert result.hits == (), repr(query[:20])
                if mode == "tool":
                    assert result.empty_reason == EMPTY_REASON, repr(query[:20])
                json.dumps(result.to_json())  # what MemoryRecall and --json send


@pytest.mark.both_backends
def test_a_lite_vault_is_silent_too(tmp_path):
    root = make_vault(tmp_path / "lite", mode="lite")
    with MemoryStore.open(root) as store:
        for query in ABSENT:
            assert store.recall(query, limit=10).empty_reason == EMPTY_REASON, query
        assert store.recall("Where does Priya live?", limit=5).hits[0].text == FACTS[1]


@pytest.mark.both_backends
def test_the_cli_says_nothing_matches(vault):
    out = CliRunner().invoke(cli, ["--vault", str(vault), "search", "tutto rot"], catch_exceptions=False)
    assert out.exit_code == 0 and "No memories found: nothing in memory matches." in out.output
    as_json = CliRunner().invoke(
        cli, ["--vault", str(vault), "search", "rot", "--json", "--explain"], catch_exceptions=False
    )
    body = json.loads(as_json.output)
    assert body["hits"] == [] and body["empty_reason"] == EMPTY_REASON
    assert body["explain"]["evidence"]["knownTerms"] is False
    found = CliRunner().invoke(cli, ["--vault", str(vault), "search", "Where does Priya live?"], catch_exceptions=False)
    assert "Priya lives in Rotterdam." in found.output


@pytest.mark.both_backends
def test_the_mcp_recall_tool_says_nothing_matches(vault):
    async def session(client):
        return [await client.call_tool(RECALL, {"query": query}) for query in ("tutto rot", "Where does Priya live?")]

    silent, found = anyio.run(with_client, vault, session)
    assert not silent.is_error
    assert body_of(silent)["hits"] == [] and body_of(silent)["empty_reason"] == EMPTY_REASON
    assert body_of(found)["hits"][0]["text"] == FACTS[1]


def test_a_word_spelt_from_the_question_words_first_piece_is_no_near_word():
    """ "authentically" is ▁auth + ent + ically: its vector is mostly "auth"'s, so it was a near
    word of "auth" (0.89); cut, it is none. A real near word still counts."""
    words, cut = word_matches("auth", ["authentically"], [""])
    _, uncut = word_matches("auth", ["authentically"], [""], cut=False)
    assert words == ["auth"] and uncut[0, 0] > 0.8 and cut[0, 0] < 0
    _, near = word_matches("colour", ["color"], [""])
    assert near[0, 0] > 0.7
    _, letter = word_matches("mrs", ["I m here"], [""])  # the "m" of "I'm" is no near word of anything
    assert letter.max() < 0.6
