"""End to end: ten turns about one project through `memvault admit`, curated by a loopback model.

The model is scripted the way a good one behaves (it extracts atomic facts with entities, and
decides SUPERSEDE/UPDATE/ADD from the candidates it is shown); everything else is the real
pipeline: durable admission, raw audit, candidate lookup in the real index, strict parsing,
retained plans, commit, replay sidecar, recall with its supersession filter.
"""

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.engine.store import MemoryStore
from memvault.vault.graph import parse_graph
from memvault.vault.replay import read_sidecar
from tests.capture_helpers import OLLAMA_PATH, ChatScript, daily_text, entity, extraction, make_capture_vault, memory
from tests.loopback import LoopbackServer
from tests.postgres_helpers import on_server_database

ATLAS, MORGAN, DANA = entity("e1", "Project Atlas"), entity("e2", "Morgan", "person"), entity("e3", "Dana", "person")
#: (the turn the host admits, what the model extracts from it)
TURNS = [
    ("Kickoff notes: Project Atlas is our rewrite of the customer portal, and Morgan leads it.",
     extraction(memory("Project Atlas is the rewrite of the customer portal.", 0.8, ["e1"]),
                memory("Morgan leads Project Atlas.", 0.7, ["e1", "e2"]), entities=[ATLAS, MORGAN],
                relations=[{"from": "e2", "relation": "leads", "to": "e1"}])),
    ("We picked Postgres as the database for Atlas.",
     extraction(memory("Project Atlas uses Postgres as its database.", 0.7, ["e1", "e4"]),
                entities=[ATLAS, entity("e4", "Postgres", "tool")],
                relations=[{"from": "e1", "relation": "uses", "to": "e4"}])),
    ("Put it in the plan: the Atlas launch date is February 1.",
     extraction(memory("The Atlas launch date is February 1.", 0.9, ["e1", "e5"]),
                entities=[ATLAS, entity("e5", "February 1", "time")])),
    ("Dana joins Atlas as the designer starting Monday.",
     extraction(memory("Dana is the designer on Project Atlas.", 0.6, ["e1", "e3"]), entities=[ATLAS, DANA],
                relations=[{"from": "e3", "relation": "works_on", "to": "e1"}])),
    ("Change of plan: for the pilot Atlas moves from Postgres to SQLite.",
     extraction(memory("Project Atlas uses SQLite as its database for the pilot.", 0.8, ["e1", "e6"]),
                entities=[ATLAS, entity("e6", "SQLite", "tool")],
                relations=[{"from": "e1", "relation": "uses", "to": "e6"}])),
    ("Bad news, the launch slipped: Atlas now launches on March 15.",
     extraction(memory("The Atlas launch date is March 15.", 0.9, ["e1"]), entities=[ATLAS])),
    ("The Atlas standup is on Mondays at 09:30.",
     extraction(memory("The Atlas standup is on Mondays at 09:30.", 0.5, ["e1"]), entities=[ATLAS])),
    ("Morgan confirmed again that they lead Atlas.",
     extraction(memory("Morgan leads Project Atlas.", 0.7, ["e1", "e2"]), entities=[ATLAS, MORGAN])),
    ("Standup moves to 10:00 on Mondays and is capped at 15 minutes.",
     extraction(memory("The Atlas standup is on Mondays at 10:00 and lasts 15 minutes.", 0.5, ["e1"]),
                entities=[ATLAS])),
    ("Thanks, that is all for today!", extraction()),
]  # fmt: skip
START = datetime(2026, 11, 16, 9, 0, tzinfo=UTC)


def extract(turn: str) -> str:
    return next(answer for text, answer in TURNS if text == turn)


def reconcile(memories: list) -> str:
    """Replace a fact that the new one contradicts (database, launch date), refine the standup."""
    decisions = []
    for item in memories:
        text = item["text"]

        def find(word, item=item):
            return next((c["id"] for c in item["candidates"] if word in c["text"]), None)

        if "SQLite" in text and find("Postgres"):
            decisions.append({"index": item["index"], "action": "SUPERSEDE", "target": find("Postgres"), "text": text})
        elif "launch date" in text and find("launch date"):
            decisions.append(
                {"index": item["index"], "action": "SUPERSEDE", "target": find("launch date"), "text": text}
            )
        elif "standup" in text and find("standup"):
            decisions.append({"index": item["index"], "action": "UPDATE", "target": find("standup"), "text": text})
        else:
            decisions.append({"index": item["index"], "action": "ADD"})
    return json.dumps({"decisions": decisions})


@pytest.fixture(scope="module", params=["local", "postgres"])
def project(tmp_path_factory, request):
    """The project's ten turns captured, with the index in `.index/` and on the test server."""
    with LoopbackServer() as server:
        script = ChatScript(extract, reconcile)
        server.route(OLLAMA_PATH, script)
        root = make_capture_vault(tmp_path_factory.mktemp("atlas"), server.url)
        if request.param == "postgres":
            on_server_database(root, request.getfixturevalue("postgres_server").new_database(), "atlas")
        runner = CliRunner()
        for number, (turn, _) in enumerate(TURNS):
            body = {"runId": f"atlas-{number}", "answer": turn, "captureText": turn,
                    "completedAt": (START + timedelta(days=number)).isoformat()}  # fmt: skip
            result = runner.invoke(cli, ["--vault", str(root), "admit"], input=json.dumps(body), catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert (
                json.loads(result.output)["status"] == "admitted" and json.loads(result.output)["worker"] == "drained"
            )
        yield root, script, runner


def top_texts(store, question):
    return [hit.text for hit in store.recall(question, limit=5).hits]


def test_ten_turns_become_current_curated_facts(project):
    root, script, runner = project
    inspected = json.loads(CliRunner().invoke(cli, ["--vault", str(root), "inspect", "--json"]).output)
    assert inspected["counts"]["resolved"] == 10 and {r["outcome"] for r in inspected["records"]} == {"captured"}
    with MemoryStore.open(root) as store:
        database = top_texts(store, "Which database does Atlas use?")
        launch = top_texts(store, "What is the Atlas launch date?")
        standup = top_texts(store, "When is the Atlas standup?")
        report = store.health_report(strict=True)  # the store's own engine's checks (a folder's or a server's)
    assert database[0] == "Project Atlas uses SQLite as its database for the pilot."
    assert "Project Atlas uses Postgres as its database." not in database
    assert launch[0] == "The Atlas launch date is March 15." and "The Atlas launch date is February 1." not in launch
    assert standup[0] == "The Atlas standup is on Mondays at 10:00 and lasts 15 minutes."
    assert "The Atlas standup is on Mondays at 09:30." not in standup
    assert report["healthy"], [f["message"] for f in report["findings"]]
    # the markdown keeps the whole history, each fact once; the duplicate turn added nothing
    text = daily_text(root)
    assert text.count("^f-") == 9 and text.count("Morgan leads Project Atlas.") == 1
    assert "Postgres as its database." in text and "February 1." in text and "09:30." in text
    sidecar, data = read_sidecar(root)
    assert sorted(e["state"] for e in sidecar.superseded().values()) == ["superseded", "superseded", "updated"]
    assert b"Postgres" not in data and b"Atlas" not in data
    assert script.calls["extraction"] == 10 and not any(
        "Morgan leads" in m["text"] for batch in script.offered for m in batch
    )


def test_the_graph_holds_per_fact_associations_and_search_agrees(project):
    root, _, runner = project
    graph = parse_graph((root / "graph.jsonl").read_bytes())
    names = sorted(e.name for e in graph.entities.values())
    assert names == ["Dana", "February 1", "Morgan", "Postgres", "Project Atlas", "SQLite"]
    assert all(len(link.entities) <= 2 for link in graph.facts.values())  # never a turn-wide product
    assert len(graph.facts) == 9 and len(graph.relations) == 4
    found = runner.invoke(cli, ["--vault", str(root), "search", "--json", "Which database does Atlas use?"])
    hits = json.loads(found.output)["hits"]
    assert hits[0]["text"] == "Project Atlas uses SQLite as its database for the pilot."
    assert not any("Postgres as its database" in hit["text"] for hit in hits)
