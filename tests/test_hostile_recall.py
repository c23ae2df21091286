"""Recall under adversarial shapes of the vault: many near-identical memories, the same text in
several notes, and rows deleted behind the vectors' back. The ranking's first N never depend on
the limit, and one text is one hit that lists every note holding it."""

from pathlib import Path

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_server_database, on_test_backend, on_the_tests_backend

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

# every test here opens an index and runs on both engines (the read-only ranking questions share
# one module vault per mode and engine: shared_crowded_vault)

TOPICS = ["deployment", "release", "standup", "retro", "offsite", "budget", "roadmap", "hiring"]
COLORS = ["blue", "green", "red", "teal", "amber", "violet", "black", "white", "orange", "pink"]


def crowd(root, mode: str, on_backend) -> Path:
    """A vault of 20 days of six near-identical memories, rebuilt with its vectors in place, its
    index where `on_backend(root)` points it."""
    init_vault(root, render_config(default_config_data(mode=mode, time_zone="UTC")))
    on_backend(root)
    for day in range(1, 21):
        bullets = [
            f"- 09:{i:02d} The {TOPICS[(day + i) % 8]} color is {COLORS[(day * 3 + i) % 10]} for team {i}."
            for i in range(6)
        ]
        (root / "daily" / f"2026-10-{day:02d}.md").write_text(f"# 2026-10-{day:02d}\n\n" + "\n".join(bullets) + "\n")
    with MemoryStore.open(root) as store:
        store.rebuild()
        if store._semantic is not None:
            assert store._semantic.drain(120)
    return root


@pytest.fixture(params=["lite", "journal"])
def crowded_vault(tmp_path, request):
    """A crowded vault of the test's own, which it may change, on the test's backend."""
    return crowd(tmp_path / "v", request.param, lambda root: on_the_tests_backend(request, root))


@pytest.fixture(scope="module", params=["lite-local", "lite-postgres", "journal-local", "journal-postgres"])
def shared_crowded_vault(tmp_path_factory, request):
    """A crowded vault that read-only tests share: one per mode and engine, its server database
    from the session's server (one vault per module outlives any one test's PG* variables)."""
    mode, engine = request.param.split("-")
    if engine == "local":
        return crowd(tmp_path_factory.mktemp("crowded") / "v", mode, lambda root: root)
    dsn = request.getfixturevalue("postgres_server").new_database()
    return crowd(tmp_path_factory.mktemp("crowded") / "v", mode, lambda root: on_server_database(root, dsn, "crowded"))


QUESTIONS = [
    "which deployment color did we pick?",
    "release color team 3",
    "what is the standup color",
    "color",
    "budget roadmap hiring",
    "teal for team 4",
]


@pytest.mark.parametrize("question", QUESTIONS)
def test_limit_only_cuts_the_ranking(shared_crowded_vault, question, request):
    request.node.user_properties.append(("opened_index", True))  # the suite's count looks in tmp_path only
    with MemoryStore.open(shared_crowded_vault) as store:
        ten = [hit.source for hit in store.recall(question, limit=10).hits]
        twenty_five = [hit.source for hit in store.recall(question, limit=25).hits]
        hundred = [hit.source for hit in store.recall(question, limit=100).hits]
    assert len(ten) == 10 and twenty_five[:10] == ten and hundred[:25] == twenty_five


@pytest.mark.both_backends
def test_limit_only_cuts_the_ranking_after_rows_vanish(crowded_vault):
    # delete many notes by hand: BM25 follows at once, stale vectors may linger until caught up
    for day in range(1, 15):
        (crowded_vault / "daily" / f"2026-10-{day:02d}.md").unlink()
    with MemoryStore.open(crowded_vault) as store:
        ten = [hit.source for hit in store.recall("deployment color", limit=10).hits]
        more = [hit.source for hit in store.recall("deployment color", limit=25).hits]
    assert more[: len(ten)] == ten and len(ten) == min(10, len(more))
    deleted = {f"daily/2026-10-{day:02d}.md" for day in range(1, 15)}
    assert not [source for source in more if source.partition("#")[0] in deleted]


@pytest.mark.both_backends
@pytest.mark.parametrize("mode", ["lite", "journal"])
def test_one_text_in_several_notes_is_one_hit_with_every_source(tmp_path, mode):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode=mode, time_zone="UTC")))
    on_test_backend(root)
    same = "Morgan chose blue as the deployment color."
    for day, block in (("2026-10-01", "m-a1"), ("2026-10-05", "m-b2"), ("2026-10-09", "m-c3")):
        (root / "daily" / f"{day}.md").write_text(
            f"# {day}\n\n- 09:00 {same} ^{block}\n- 10:00 Lunch was at noon on {day}.\n"
        )
    with MemoryStore.open(root) as store:
        store.rebuild()
        result = store.recall("deployment color Morgan", limit=10)
    texts = [hit.text for hit in result.hits]
    assert texts.count(same) == 1
    hit = next(hit for hit in result.hits if hit.text == same)
    assert set(hit.sources) == {"daily/2026-10-01.md#^m-a1", "daily/2026-10-05.md#^m-b2", "daily/2026-10-09.md#^m-c3"}
    assert hit.sources[0] == hit.source and len(hit.sources) == 3
    body = hit.to_json()
    assert body["source"] == hit.source and body["sources"] == list(hit.sources)
    single = next(h for h in result.hits if h.text != same)
    assert single.to_json()["sources"] == [single.source]
