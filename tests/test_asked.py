"""A memory that asks what the question asks does not answer it (`indexer/search/asked.py`)."""

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.asked import ASKED_DISCOUNT, ASKED_HEAD, _terms, asked_share, discount_asked
from memvault.indexer.search.floor import terms_of
from memvault.indexer.search.hybrid import Fused
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_the_tests_backend

AMS = ZoneInfo("Europe/Amsterdam")
ASKS = "Thanks, Melanie! You play any musical instruments?"
TELLS = "Melanie: I play clarinet in the town band on Sundays."
FILLER = [
    "The billing service times out on large invoice batches.",
    "Priya lives in Rotterdam.",
    "The offsite is booked in Haarlem for 14 January.",
    "Sam adopted a rescue dog named Biscuit.",
    "Morgan chose blue as the deployment color.",
    "The band rehearsal room has a broken heater.",
]
WEIGHTS = {"instrument": 3.0, "melani": 1.0, "play": 2.0}


def test_share_is_the_weight_matched_only_inside_the_memorys_questions():
    assert asked_share(ASKS, WEIGHTS) == pytest.approx(5 / 6)  # "melani" is told ("Thanks, Melanie!")
    assert asked_share("I play violin. Do you play any instruments?", WEIGHTS) == pytest.approx(3 / 5)
    assert asked_share(TELLS, WEIGHTS) == 0.0  # asks nothing
    assert asked_share("Where were you last night?", WEIGHTS) == 0.0  # asks, but none of the question
    assert asked_share("I play clarinet. Want to hear?", WEIGHTS) == 0.0  # told before it asks


def test_discount_reorders_and_leaves_strength():
    asking, telling = Fused("a", score=1.0, strength=0.9), Fused("b", score=0.8, strength=0.7)
    order = discount_asked(
        [asking, telling],
        {"a": "Do you play any instruments?", "b": "I play clarinet."},
        "What instruments does Melanie play?",
        lambda field, terms: (10, {t: 1 for t in terms}),
    )
    assert [entry.key for entry in order] == ["b", "a"]
    assert asking.score == pytest.approx(1.0 - ASKED_DISCOUNT) and asking.strength == 0.9
    assert asking.evidence["asked"] == (1, 1.0) and "asked" not in telling.evidence


@pytest.fixture(params=["journal", "lite"])
def vault(tmp_path, request):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode=request.param, time_zone="Europe/Amsterdam")))
    on_the_tests_backend(request, root)
    with MemoryStore.open(root) as store:
        for minute, text in enumerate([ASKS, *FILLER, TELLS]):
            store.remember(text, at=datetime(2026, 11, 30 - minute // 3, 9, minute, tzinfo=AMS))
    return root


@pytest.mark.both_backends
def test_the_answer_outranks_the_memory_that_asks(vault):
    question = "What instruments does Melanie play?"
    with MemoryStore.open(vault) as store:
        index = store.serving_index()
        plain = recall_tool(index.bm25, store._semantic, question, 3, asked=False)
        found = recall_tool(index.bm25, store._semantic, question, 3)
    asking = {hit.text: hit for hit in found.hits}[ASKS]
    assert 0.5 < asking.explain["asked"]["score"] < 1.0  # --explain shows the share ("Melanie" is told)
    assert asking.score < next(hit.score for hit in plain.hits if hit.text == ASKS)
    if store._semantic is not None:  # Journal: vectors and coverage also favour the memory that asks
        assert plain.hits[0].text == ASKS  # every question word sits in the memory's own question
        assert found.hits[0].text == TELLS


@pytest.mark.parametrize(
    "text",
    [
        ASKS,
        TELLS,
        "I've known these friends for 4 years, since I moved from Sweden.",
        "Running, biking & surfing: 10km/day? café naïve well-known",
    ],
)
def test_words_are_stemmed_as_the_index_stems_them(text):
    assert _terms(text) == set(terms_of(text))


def test_only_the_fused_head_is_read():
    fused = [Fused(f"k{i:03}", score=1.0 - i / 1000) for i in range(ASKED_HEAD + 1)]
    texts = {entry.key: "Do you play any instruments?" for entry in fused}
    discount_asked(fused, texts, "Which instruments do you play?", lambda field, terms: (10, {t: 1 for t in terms}))
    assert all("asked" in entry.evidence for entry in fused[:ASKED_HEAD])
    assert [entry.key for entry in fused if "asked" not in entry.evidence] == [f"k{ASKED_HEAD:03}"]
