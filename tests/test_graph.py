"""graph.jsonl (format, determinism, hand edits) and one-hop graph expansion in explicit recall."""

import json
from datetime import UTC, datetime

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search.graph_expansion import EXPANSION_RANKS, expansion_slots
from memvault.vault.graph import Entity, FactLink, Graph, GraphInvalid, parse_graph, read_graph, render_graph
from memvault.vault.replay import ReplayState, write_sidecar
from tests.capture_helpers import EMBED_PATH, hash_embeddings, make_capture_vault
from tests.loopback import LoopbackServer
from tests.postgres_helpers import on_server_database

AT = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


def sample() -> Graph:
    graph = Graph()
    for entity in (Entity("e-b", "Morgan", "person"), Entity("e-a", "Atlas", "project")):
        graph.add_entity(entity)
    graph.add_fact(FactLink("f-2", ("e-a",), 0.5, "daily/2026-11-30.md"))
    graph.add_fact(FactLink("f-1", ("e-b", "e-a"), 0.8, "daily/2026-11-29.md"))
    graph.add_relation("e-b", "leads", "e-a")
    return graph


def test_render_is_deterministic_sorted_and_round_trips():
    data = render_graph(sample())
    lines = data.decode().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["entity", "entity", "fact", "fact", "relation"]
    assert lines[0] == '{"id":"e-a","kind":"entity","name":"Atlas","type":"project"}'
    assert (
        lines[2] == '{"entities":["e-b","e-a"],"id":"f-1","kind":"fact","salience":0.8,"source":"daily/2026-11-29.md"}'
    )
    assert render_graph(parse_graph(data)) == data
    other = Graph()  # the same content added in another order renders the same bytes
    for line in reversed(lines):
        other = parse_graph(line.encode() + b"\n" + render_graph(other))
    assert render_graph(other) == data


def test_hand_edits_are_tolerated_and_never_overwritten():
    edited = (
        b'\n{ "kind": "relation", "to": "e-a", "relation": "leads", "from": "e-b" }\n'
        b'{"id":"e-a","kind":"entity","name":"Project Atlas (renamed)","type":"project"}\n\n'
        b'{"entities":["e-gone"],"id":"f-9","kind":"fact","salience":1,"source":"daily/2026-11-28.md"}\n'
        b'{"id":"e-a","kind":"entity","name":"Project Atlas (renamed)","type":"project"}\n'  # identical twice: fine
    )
    graph = parse_graph(edited)
    assert graph.entities["e-a"].name == "Project Atlas (renamed)"
    assert graph.entities_of("f-9") == ()  # a deleted entity is ignored by readers
    graph.add_entity(Entity("e-a", "Atlas", "project"))  # a capture re-extracting "Atlas" keeps the person's name
    assert graph.entities["e-a"].name == "Project Atlas (renamed)"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b"not json", "not a JSON object"),
        (b'["entity"]', '"kind"'),
        (b'{"kind":"node","id":"x"}', '"kind"'),
        (b'{"id":"e-a","kind":"entity","name":"A","type":"project","extra":1}', "exactly the fields"),
        (b'{"id":"e-a","id":"e-b","kind":"entity","name":"A","type":"project"}', "duplicate key"),
        (b'{"from":"e-a","kind":"relation","relation":"Leads","to":"e-b"}', "lowercase"),
        (b'{"entities":[],"id":"f-1","kind":"fact","salience":2,"source":"daily/2026-11-30.md"}', "salience"),
        (b'{"entities":[],"id":"f-1","kind":"fact","salience":0.5,"source":"../etc/passwd"}', "source"),
        (b'{"id":"e-a","kind":"entity","name":"B","type":"project"}', "declared twice"),
    ],
)
def test_what_cannot_be_trusted_is_refused_naming_the_line(line, problem):
    data = b'{"id":"e-a","kind":"entity","name":"A","type":"project"}\n' + line + b"\n"
    with pytest.raises(GraphInvalid, match=f"line 2: .*{problem}"):
        parse_graph(data, "graph.jsonl")
    with pytest.raises(GraphInvalid, match="invalid UTF-8"):
        parse_graph(b"\xff\n")


# --- graph expansion --------------------------------------------------------------------------

FACTS = [  # (text, entity ids)
    ("Morgan leads Project Atlas.", ["e-atlas", "e-morgan"]),
    ("Project Atlas ships the portal rewrite.", ["e-atlas"]),
    ("Morgan prefers tea in the morning.", ["e-morgan"]),
    ("Orion is the billing service.", ["e-orion"]),
    ("Orion runs on the cluster in Frankfurt.", ["e-orion", "e-k8s"]),
    ("The Frankfurt cluster was upgraded.", ["e-k8s"]),
] + [(f"Filler note number {i} mentions Atlas in passing.", []) for i in range(8)]
ENTITIES = [("e-atlas", "Project Atlas", "project"), ("e-morgan", "Morgan", "person"),
            ("e-orion", "Orion", "project"), ("e-k8s", "Frankfurt cluster", "tool")]  # fmt: skip
RELATIONS = [("e-atlas", "depends_on", "e-orion"), ("e-orion", "runs_on", "e-k8s")]


@pytest.fixture(scope="module", params=["local", "postgres"])
def graph_vault(tmp_path_factory, request):
    """A BuJo vault with hand-written facts and graph.jsonl (both are canonical, editable files),
    once with its index in `.index/` and once on the test server (one vault per module, so the
    server's database comes from the session's server and its DSN sits in the vault's config)."""
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        root = make_capture_vault(tmp_path_factory.mktemp("graph"), server.url, embed_endpoint=server.url)
        if request.param == "postgres":
            on_server_database(root, request.getfixturevalue("postgres_server").new_database(), "graph")
        ids = {}
        with MemoryStore.open(root) as store:
            for text, _ in FACTS:
                ids[text] = store.remember(text, at=AT).id
        graph = Graph()
        for entity in ENTITIES:
            graph.add_entity(Entity(*entity))
        for text, entities in FACTS:
            if entities:
                graph.add_fact(FactLink(ids[text], tuple(entities), 0.5, "daily/2026-11-30.md"))
        for relation in RELATIONS:
            graph.add_relation(*relation)
        (root / "graph.jsonl").write_bytes(render_graph(graph))
        yield root, ids, server


def recall(root, query, limit=6, mode="tool", env=None):
    with MemoryStore.open(root, overrides=env) as store:
        return store.recall(query, limit=limit, mode=mode)


def test_explicit_recall_expands_one_hop_deterministically(graph_vault):
    root, ids, _ = graph_vault
    first = recall(root, "Who leads Atlas?")
    assert first.hits[0].text == "Morgan leads Project Atlas."
    expanded = [h for h in first.hits if "graph" in h.explain]
    assert 1 <= len(expanded) <= expansion_slots(6) == 1
    assert all(not h.explain.get("bm25") for h in expanded)
    assert expanded[0].text == "Morgan prefers tea in the morning." or expanded[0].explain["graph"]["hop"] in (0, 1)
    texts = [h.text for h in first.hits]
    assert texts == [h.text for h in recall(root, "Who leads Atlas?").hits]  # deterministic
    assert "The Frankfurt cluster was upgraded." not in texts  # two hops away: never pulled in
    assert all(h.source.startswith("daily/") for h in first.hits)


def test_graph_neighbours_take_their_fixed_ranks(graph_vault):
    root, ids, _ = graph_vault
    result = recall(root, "Who leads Atlas?", limit=10)
    ranks = [rank for rank, h in enumerate(result.hits, 1) if "graph" in h.explain]
    assert ranks and set(ranks) <= {4, 7, 10} and ranks == [4, 7, 10][: len(ranks)]
    routes = [h.explain["graph"] for h in result.hits if "graph" in h.explain]
    assert [r["hop"] for r in routes] == sorted(r["hop"] for r in routes)  # hop 0 before hop 1
    hop1 = [r for r in routes if r["hop"] == 1]
    assert hop1 and all(r["related"] == "e-orion" and r["entity"] == "e-atlas" for r in hop1)
    expanded = {h.text for h in result.hits if "graph" in h.explain}
    assert expanded <= {"Orion is the billing service.", "Orion runs on the cluster in Frankfurt.",
                        "Morgan prefers tea in the morning.", "Project Atlas ships the portal rewrite."}  # fmt: skip
    assert all("graph" not in h.explain for h in result.hits[:3])  # the three best direct hits lead
    assert len({h.id for h in result.hits}) == len(result.hits)  # an expansion is listed once
    assert len(recall(root, "Who leads Atlas?", limit=2).hits) == 2
    assert all("graph" not in h.explain for h in recall(root, "Who leads Atlas?", limit=3).hits)  # no rank for one


@pytest.mark.parametrize("query", ["Who leads Atlas?", "Where does Orion run?", "Atlas filler note", "tea"])
def test_a_limit_only_cuts_the_ranked_list(graph_vault, query):
    """recall(limit=k) is the first k of recall(limit=25), expansions included, for every k."""
    root, _, _ = graph_vault
    with MemoryStore.open(root) as store:
        full = [(h.id, h.source) for h in store.recall(query, limit=25).hits]
        assert full, query
        for k in range(1, 26):
            assert [(h.id, h.source) for h in store.recall(query, limit=k).hits] == full[:k], k
    assert expansion_slots(25) == len(EXPANSION_RANKS)


def test_auto_recall_and_other_tiers_never_expand(graph_vault):
    root, ids, server = graph_vault
    auto = recall(root, "Who leads Project Atlas?", mode="auto")
    assert all("graph" not in h.explain for h in auto.hits)
    journal = {"memory.mode": "journal", "memory.writeMode": "append-host-summary"}
    assert all("graph" not in h.explain for h in recall(root, "Who leads Atlas?", limit=9, env=journal).hits)


def test_superseded_facts_are_not_expanded_and_a_broken_graph_degrades(graph_vault):
    root, ids, _ = graph_vault
    tea = ids["Morgan prefers tea in the morning."]
    authority = {"digest": "0" * 64, "kind": "direct"}
    state = ReplayState()
    state.merge([{"at": "2026-11-30T09:00:00.000000Z", "authority": authority, "by": "f-0000000001", "id": tea,
                  "kind": "lifecycle", "state": "superseded"}])  # fmt: skip
    write_sidecar(root, None, state)
    with MemoryStore.open(root) as store:
        store.rebuild()
        texts = [h.text for h in store.recall("Who leads Atlas?", limit=9).hits]
    assert "Morgan prefers tea in the morning." not in texts
    original = (root / "graph.jsonl").read_bytes()
    try:
        (root / "graph.jsonl").write_bytes(original + b"broken line\n")
        result = recall(root, "Who leads Atlas?", limit=9)
        assert result.hits and "graph expansion skipped" in result.degraded
        assert all("graph" not in h.explain for h in result.hits)
    finally:
        (root / "graph.jsonl").write_bytes(original)
        write_sidecar(root, (root / ".replay-projection-v1.json").read_bytes(), ReplayState())  # deleting it
        with MemoryStore.open(root) as store:  # would be refused: the index holds replay state
            store.rebuild()


@pytest.mark.both_backends
def test_a_broken_graph_stops_a_capture_before_any_change(tmp_path):
    from memvault.indexer.services.intake_worker import IntakeWorker
    from tests.capture_helpers import OLLAMA_PATH, ChatScript, daily_text, entity, extraction, memory
    from tests.intake_helpers import Clock, store_for

    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        script = ChatScript(
            lambda _t: extraction(memory("Atlas ships in March.", 0.5, ["e1"]), entities=[entity("e1", "Atlas")])
        )
        server.route(OLLAMA_PATH, script)
        root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)
        (root / "graph.jsonl").write_text("{oops\n")
        clock = Clock()
        with store_for(root, clock) as store:
            store.persist_completed_turn("run-1", "Atlas ships in March.", capture_text="Atlas ships in March.")
            worker = IntakeWorker(store, clock=clock)
            worker.process_due()
            assert daily_text(root) == "" and "graph.jsonl line 1" in worker.last_error
            (root / "graph.jsonl").write_text("")  # the person fixes the file
            clock.advance(__import__("datetime").timedelta(minutes=5))
            worker.process_due()
        assert daily_text(root).count("Atlas ships in March.") == 1 and script.calls["extraction"] == 1
        graph, _ = read_graph(root)
        assert [e.name for e in graph.entities.values()] == ["Atlas"]


def test_an_oversized_or_linked_graph_file_is_refused_without_reading_it(tmp_path):
    from memvault.vault.errors import UnsafePath
    from memvault.vault.graph import MAX_GRAPH_BYTES

    path = tmp_path / "graph.jsonl"
    with open(path, "wb") as handle:
        handle.truncate(MAX_GRAPH_BYTES + 1)
    with pytest.raises(GraphInvalid, match="the limit is"):
        read_graph(tmp_path)
    path.unlink()
    (tmp_path / "elsewhere.jsonl").write_bytes(render_graph(sample()))
    path.symlink_to(tmp_path / "elsewhere.jsonl")
    with pytest.raises(UnsafePath):
        read_graph(tmp_path)
