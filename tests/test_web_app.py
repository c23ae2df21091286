"""The web app over real HTTP (uvicorn on loopback, in this process): the guard, the JSON twins,
bad and hostile input, and what each page reads from a real vault."""

import http.client
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.web_helpers import InProcessServer, entity_id, write_demo_graph

# Every test whose vault is served runs on both index engines (marked both_backends): the pages that
# read the index (recall, journal, notes' ids, status, an entity's memories) and the rest alike (the
# guard and HTTP limits, and pages built from the files) are served by an app whose store opened it.
TOKEN = "test-token-0123456789abcdef"


@pytest.fixture
def served(fixture_vault):
    from memvault.cli.web.app import build_app
    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.server import bind_loopback
    from memvault.indexer.engine.store import MemoryStore

    write_demo_graph(fixture_vault)
    store = MemoryStore.open(fixture_vault)
    store.rebuild()
    bound = bind_loopback(0)
    app = build_app(VaultReader(store, env={}), token=TOKEN, port=bound.port)
    with InProcessServer(app, bound) as server:
        server.root = fixture_vault
        server.store = store
        yield server
    store.close()


def get_json(server, path):
    status, headers, body = server.get(path, token=TOKEN)
    assert headers["content-type"].startswith("application/json"), body[:200]
    return status, json.loads(body)


# --- the guard -----------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_without_the_token_nothing_is_served(served):
    for path in ("/recall", "/status.json", "/static/style.css", "/notes/daily/2026-11-16"):
        status, headers, body = served.get(path)
        assert status == 401, path
        assert b"memvault web" in body
        assert "content-security-policy" in headers
    assert served.get("/status.json", token="wrong-token-0123456789")[0] == 401


@pytest.mark.both_backends
def test_the_printed_url_sets_a_cookie_and_drops_the_token_from_the_address(served):
    status, headers, _ = served.get(f"/recall?q=blue&token={TOKEN}")
    assert status == 303
    assert headers["location"] == "/recall?q=blue"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"memvault-web-{served.port}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    status, _, body = served.get("/recall?q=blue", headers={"Cookie": f"memvault-web-{served.port}={TOKEN}"})
    assert status == 200 and b"<html" in body
    # a cookie for another port's server is not this server's
    assert served.get("/recall", headers={"Cookie": f"memvault-web-1={TOKEN}"})[0] == 401
    assert served.get("/recall", headers={"Cookie": "garbage;;;=\x7f"})[0] == 401


@pytest.mark.both_backends
def test_other_host_names_are_refused(served):
    for host in ("evil.example", f"evil.example:{served.port}", "127.0.0.1", f"127.0.0.1:{served.port + 1}",
                 f"192.168.1.5:{served.port}", f"localhost.evil.example:{served.port}"):  # fmt: skip
        status, _, _ = served.get("/status.json", token=TOKEN, host=host)
        assert status == 400, host
    for host in (f"127.0.0.1:{served.port}", f"localhost:{served.port}", f"[::1]:{served.port}"):
        assert served.get("/status.json", token=TOKEN, host=host)[0] == 200, host


@pytest.mark.both_backends
def test_it_listens_on_loopback_only(served):
    assert served.bound.sockets[0].getsockname()[0] == "127.0.0.1"
    for sock in served.bound.sockets[1:]:
        assert sock.getsockname()[0] == "::1"
    if socket.has_ipv6 and len(served.bound.sockets) == 2:
        status, _, _ = served.get("/status.json", token=TOKEN, host=f"[::1]:{served.port}", family=socket.AF_INET6)
        assert status == 200


@pytest.mark.both_backends
def test_every_answer_carries_the_strict_headers(served):
    for path in ("/recall", "/status.json", "/static/style.css", "/notes/daily/1999-01-01", "/nowhere"):
        _, headers, _ = served.get(path, token=TOKEN)
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src" not in csp and "frame-ancestors 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["cache-control"] == "no-store"


@pytest.mark.both_backends
def test_no_state_change_or_model_call_over_get(served):
    assert served.get("/recall/agent?q=blue", token=TOKEN)[0] == 405
    assert served.request("POST", "/status", token=TOKEN)[0] == 405
    assert served.request("DELETE", "/recall", token=TOKEN)[0] == 405


@pytest.mark.both_backends
def test_a_cross_origin_post_is_refused(served):
    headers = {"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}
    status, _, body = served.request("POST", "/recall/agent", token=TOKEN, headers=headers, body=b"q=blue")
    assert status == 403 and b"Cross-origin" in body
    headers = {"Origin": "null", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/x-www-form-urlencoded"}
    assert served.request("POST", "/recall/agent", token=TOKEN, headers=headers, body=b"q=blue")[0] == 403


# --- Recall ----------------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_recall_json_twin_has_hits_with_evidence_and_links(served):
    status, body = get_json(served, "/recall.json?q=deployment+color&limit=5")
    assert status == 200
    assert 1 <= len(body["hits"]) <= 5
    first = body["hits"][0]
    assert "deployment color" in first["text"]
    assert first["url"] == "/notes/" + first["source"].replace(".md#^", "#")
    assert first["explain"]["bm25"]["rank"] >= 1
    html = served.get("/recall?q=deployment+color&limit=5", token=TOKEN)[2].decode()
    assert first["text"] in html and f'href="{first["url"]}"' in html


@pytest.mark.both_backends
def test_recall_marks_the_hits_of_an_unresolved_merge_conflict(served):
    # the fixture's daily/2026-11-05.md holds one hunk: Tuesday evening against Wednesday morning
    _, body = get_json(served, "/recall.json?q=deployment+window&limit=10")
    marked = {hit["text"] for hit in body["hits"] if hit["conflict"]}
    assert marked == {"The deployment window is Tuesday evening.", "The deployment window is Wednesday morning."}
    html = served.get("/recall?q=deployment+window&limit=10", token=TOKEN)[2].decode()
    assert html.count('<span class="conflict-tag"') == 2
    assert "memvault git resolve daily/2026-11-05.md" in html


@pytest.mark.both_backends
def test_recall_matches_the_library(served):
    _, body = get_json(served, "/recall.json?q=Rotterdam+train&limit=10")
    library = served.store.recall("Rotterdam train", limit=10)
    assert [h["id"] for h in body["hits"]] == [h.id for h in library.hits]


@pytest.mark.both_backends
def test_date_filter_keeps_only_hits_in_the_range(served):
    _, everything = get_json(served, "/recall.json?q=deployment+color&limit=100")
    _, ranged = get_json(served, "/recall.json?q=deployment+color&limit=100&from=2026-10-27&through=2026-10-31")
    assert ranged["hits"] and all("2026-10-27" <= h["date"] <= "2026-10-31" for h in ranged["hits"])
    outside = [h for h in everything["hits"] if not "2026-10-27" <= h["date"] <= "2026-10-31"]
    assert outside and ranged["filteredOut"] == len(outside)


@pytest.mark.both_backends
def test_auto_mode_reports_the_gate(served):
    _, body = get_json(served, "/recall.json?q=deployment+color&mode=auto")
    assert body["mode"] == "auto" and body["gate"] is not None and len(body["hits"]) <= 5


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("query", "names"),
    [
        ("limit=abc&q=x", "limit"),
        ("limit=0&q=x", "limit"),
        ("limit=101&q=x", "limit"),
        ("mode=semantic&q=x", "mode"),
        ("from=2026-13-01&q=x", "from"),
        ("from=yesterday&q=x", "from"),
        ("from=2026-11-30&through=2026-11-01&q=x", "reversed"),
        ("q=" + "a" * 1001, "q is 1001 characters"),
        ("q=a%00b", "NUL"),
    ],
)
def test_bad_recall_parameters_get_a_clear_error(served, query, names):
    status, body = get_json(served, f"/recall.json?{query}")
    assert status == 400
    assert names in body["error"]["message"]
    status, _, html = served.get(f"/recall?{query}", token=TOKEN)
    assert status == 400 and b"Something is not right" in html and b"Traceback" not in html


@pytest.mark.both_backends
def test_journal_view_pages_a_date_range(served):
    _, body = get_json(served, "/journal.json?from=2026-11-01&through=2026-11-16&limit=5")
    assert body["range"]["timeZone"] == "Europe/Amsterdam"
    assert body["page"]["count"] == 5 and body["cursor"]
    assert all(e["url"].startswith("/notes/daily/2026-11-") for e in body["entries"])
    _, following = get_json(served, f"/journal.json?cursor={body['cursor']}")
    assert following["page"]["offset"] == 5
    status, again = get_json(served, f"/journal.json?cursor={body['cursor']}")  # a cursor continues once
    assert status == 400 and "already used" in again["error"]["message"]


@pytest.mark.both_backends
def test_journal_rejects_a_bad_zone(served):
    status, body = get_json(served, "/journal.json?from=2026-11-01&through=2026-11-02&tz=Mars/Olympus")
    assert status == 400 and "Mars/Olympus" in body["error"]["message"]


@pytest.mark.both_backends
def test_agent_search_is_off_without_a_model_and_says_why(served):
    _, body = get_json(served, "/recall.json?q=blue")
    assert body["agent"]["enabled"] is False
    assert "memory.llm" in body["agent"]["reason"]
    html = served.get("/recall?q=blue", token=TOKEN)[2].decode()
    assert "Agent search is off" in html and "disabled" in html


# --- Content ---------------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_note_json_bullets_carry_the_ids_recall_returns(served):
    _, found = get_json(served, "/recall.json?q=Latency+budget+recall+endpoint&limit=1")
    hit = found["hits"][0]
    status, note = get_json(served, hit["url"].split("#")[0] + ".json")
    assert status == 200
    assert hit["id"] in [b["id"] for b in note["bullets"]]
    assert f'<li id="{hit["id"]}"' in note["html"]


@pytest.mark.both_backends
def test_content_lists_months_with_a_calendar(served):
    _, body = get_json(served, "/content.json?month=2026-10")
    assert [m["month"] for m in body["months"]] == ["2026-11", "2026-10"]
    cells = [c for week in body["calendar"] for c in week if c]
    assert len(cells) == 31
    day = next(c for c in cells if c["date"] == "2026-10-12")
    assert day["exists"] and day["memories"] == 6 and day["url"] == "/notes/daily/2026-10-12"
    assert body["audit"][0]["path"] == "audit/2026-11-05.md"
    assert get_json(served, "/content.json?month=2026-13")[0] == 400


@pytest.mark.both_backends
@pytest.mark.parametrize(
    "path",
    [
        "/notes/daily/..%2F..%2Fmemvault",
        "/notes/daily/..",
        "/notes/etc/passwd",
        "/notes/daily/2026-02-30",
        "/notes/index/2026-11-16",
        "/notes/daily/%2e%2e",
    ],
)
def test_note_paths_outside_the_notes_are_refused(served, path):
    status, body = get_json(served, path + ".json")
    assert status in (400, 404)
    assert "error" in body


@pytest.mark.both_backends
def test_a_missing_note_is_a_404_naming_it(served):
    status, body = get_json(served, "/notes/daily/1999-01-01.json")
    assert status == 404 and "daily/1999-01-01.md does not exist" in body["error"]["message"]


@pytest.mark.both_backends
def test_a_symlinked_note_is_refused(served, tmp_path):
    secret = tmp_path / "secret.md"
    secret.write_text("- the secret\n")
    (served.root / "daily" / "2026-12-01.md").symlink_to(secret)
    status, body = get_json(served, "/notes/daily/2026-12-01.json")
    assert status in (403, 404) and "the secret" not in json.dumps(body)


@pytest.mark.both_backends
def test_documents_runtime_and_spaces(served):
    from memvault.vault.documents import DocumentStore
    from memvault.vault.runtime.memory import RuntimeMemory
    from memvault.vault.spaces import SpaceCatalog

    documents = DocumentStore(served.root)
    documents.create("Deploy runbook", "Run `make deploy`.\n\n<script>alert(1)</script>\n", summary="How we ship")
    documents.create("Old plan", "obsolete")
    documents.archive("old-plan")
    RuntimeMemory.for_vault(served.root, served.store.config).add("USER", "Prefers metric units.")
    SpaceCatalog(served.root / "spaces").create("Work", "Projects")
    _, body = get_json(served, "/content.json")
    assert [d["id"] for d in body["documents"]["active"]] == ["deploy-runbook"]
    assert body["documents"]["archived"][0]["name"] == "old-plan.md"
    assert body["spaces"]["spaces"][0]["title"] == "Work"
    user = next(t for t in body["runtime"]["targets"] if t["target"] == "USER")
    assert user["usedBytes"] == len("Prefers metric units.") and user["limitBytes"] == 4096
    status, doc = get_json(served, "/documents/deploy-runbook.json")
    assert status == 200 and "&lt;script&gt;" in doc["html"] and "<script>" not in doc["html"]
    status, old = get_json(served, "/archived/old-plan.json")
    assert status == 200 and old["archived"] and old["title"] == "Old plan"
    assert get_json(served, "/archived/..%2Fmemvault.json")[0] in (400, 404)
    assert get_json(served, "/documents/nope.json")[0] in (400, 404)
    _, runtime = get_json(served, "/runtime.json")
    assert runtime["targets"][0]["entries"][0]["content"] == "Prefers metric units."


# --- Entities --------------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_entities_group_spellings_as_index_md_does(served):
    _, body = get_json(served, "/entities.json")
    heron = next(g for g in body["groups"] if g["key"] == "heron")
    assert sorted(heron["spellings"]) == ["HERON", "Heron"] and len(heron["ids"]) == 2
    _, found = get_json(served, "/entities.json?q=her")
    assert [g["key"] for g in found["groups"]] == ["heron"]
    _, none = get_json(served, "/entities.json?q=zzzz")
    assert none["groups"] == [] and none["total"] == 0


@pytest.mark.both_backends
def test_calendar_nodes_are_left_out_of_the_list(served):
    from memvault.vault.graph import Entity, read_graph, render_graph

    graph, _ = read_graph(served.root)
    graph.add_entity(Entity("e-monday0001", "Monday", "concept"))
    (served.root / "graph.jsonl").write_bytes(render_graph(graph))
    _, body = get_json(served, "/entities.json")
    assert "monday" not in [g["key"] for g in body["groups"]]


@pytest.mark.both_backends
def test_an_entity_page_has_relations_memories_and_a_drawing(served):
    morgan = entity_id("Morgan")
    status, body = get_json(served, f"/entities/{morgan}.json")
    assert status == 200 and body["entity"]["name"] == "Morgan"
    assert {
        "relation": "works_on",
        "id": entity_id("Heron"),
        "name": "Heron",
        "url": f"/entities/{entity_id('Heron')}",
    } in body["outgoing"]
    assert any(r["name"] == "Priya" and r["relation"] == "reports_to" for r in body["incoming"])
    assert body["memories"] and all(m["text"] and "Morgan" in m["text"] for m in body["memories"])
    drawn = {n["name"] for n in body["svg"]["nodes"]}
    assert {"Morgan", "Heron", "Rotterdam", "Priya", "Northwind"} <= drawn
    html = served.get(f"/entities/{morgan}", token=TOKEN)[2].decode()
    assert "<svg" in html and html.count('<circle class="node') == len(body["svg"]["nodes"])


@pytest.mark.both_backends
def test_an_unknown_entity_is_a_404(served):
    status, body = get_json(served, "/entities/e-nope.json")
    assert status == 404 and "e-nope" in body["error"]["message"]


@pytest.mark.both_backends
def test_a_broken_graph_line_is_named_and_the_rest_still_shown(served):
    lines = (served.root / "graph.jsonl").read_text().count("\n")
    with open(served.root / "graph.jsonl", "a") as graph:
        graph.write('{"kind": "entity", "id": "e-x"\n')
    status, body = get_json(served, "/entities.json")
    assert status == 200
    assert any(g["key"] == "heron" for g in body["groups"])  # the good lines are all there
    assert body["problemCount"] == 1
    assert body["problems"][0].startswith(f"graph.jsonl line {lines + 1}:") and "Fix:" in body["problems"][0]
    status, entity = get_json(served, f"/entities/{entity_id('Morgan')}.json")
    assert status == 200 and entity["problemCount"] == 1
    status, _, html = served.get("/entities", token=TOKEN)
    assert status == 200 and f"graph.jsonl line {lines + 1}" in html.decode()


@pytest.mark.both_backends
def test_hostile_entity_names_are_escaped(served):
    from memvault.vault.graph import Entity, read_graph, render_graph

    graph, _ = read_graph(served.root)
    graph.add_entity(Entity("e-hostile01", '<script>alert(1)</script>"><img src=x onerror=alert(2)>', "person"))
    graph.add_relation("e-hostile01", "knows", entity_id("Morgan"))
    (served.root / "graph.jsonl").write_bytes(render_graph(graph))
    for path in ("/entities", "/entities/e-hostile01", f"/entities/{entity_id('Morgan')}"):
        html = served.get(path, token=TOKEN)[2].decode()
        assert "<script>alert(1)" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html or "&lt;script&gt;alert(1)&lt;/scr" in html


# --- Status ----------------------------------------------------------------------------------------


@pytest.mark.both_backends
def test_status_reports_health_index_intake_and_owner(served):
    status, body = get_json(served, "/status.json")
    assert status == 200
    # the fixture's merge conflict makes it unhealthy (issue 44); it is its only error
    assert body["health"]["healthy"] is False and body["health"]["errors"] == 1
    assert {f["code"] for f in body["health"]["findings"]} == {"conflict_markers", "duplicate_id"}
    index = served.store.serving_index()  # the serving generation, a folder's or the server's
    assert body["index"]["generation"] == index.generation.name and body["index"]["rows"] == index.bm25.count()
    assert body["intake"]["counts"]["pending"] == 0 and body["intake"]["ledger"]["ok"] is True
    assert body["mode"] == "lite" and body["vectors"]["configured"] is None
    assert body["chart"]["total"] == sum(b["count"] for b in body["chart"]["bars"]) > 0


@pytest.mark.both_backends
def test_status_shows_a_broken_note_with_its_fix(served):
    (served.root / "daily" / "2026-11-16.md").write_bytes(b"# 2026-11-16\n\n- \xff\xfe broken bytes\n")
    _, body = get_json(served, "/status.json")
    assert body["health"]["healthy"] is False
    finding = next(f for f in body["health"]["findings"] if f["subject"] == "daily/2026-11-16.md")
    assert finding["severity"] == "error" and finding["fix"] == "memvault rebuild"
    html = served.get("/status", token=TOKEN)[2].decode()
    assert "Unhealthy" in html and "daily/2026-11-16.md" in html


@pytest.mark.both_backends
def test_concurrent_requests_all_answer(served):
    paths = ["/recall.json?q=blue", "/status.json", "/content.json", "/entities.json", "/journal.json",
             "/notes/daily/2026-11-16.json"] * 4  # fmt: skip
    with ThreadPoolExecutor(max_workers=8) as pool:
        statuses = list(pool.map(lambda p: served.get(p, token=TOKEN)[0], paths))
    assert statuses == [200] * len(paths)


@pytest.mark.both_backends
def test_a_remembered_fact_appears_without_a_restart(served):
    served.store.remember("The web page test fact: the kettle is descaled on Sundays.")
    _, body = get_json(served, "/recall.json?q=kettle+descaled")
    assert body["hits"][0]["text"] == "The web page test fact: the kettle is descaled on Sundays."


@pytest.mark.both_backends
def test_unknown_pages_are_404_not_tracebacks(served):
    status, _, body = served.get("/wp-admin", token=TOKEN)
    assert status == 404 and b"Traceback" not in body


@pytest.mark.both_backends
def test_oversized_and_odd_requests_do_not_crash_the_server(served):
    try:
        status = served.get("/recall.json?q=" + "x" * 60_000, token=TOKEN)[0]
    except (ConnectionError, http.client.HTTPException):
        status = "closed"  # the server may answer and hang up while the client is still sending
    assert status in (400, 414, 431, "closed")
    status, _, _ = served.request("POST", "/recall/agent.json", token=TOKEN,
                                  headers={"Content-Type": "multipart/form-data; boundary=x"},
                                  body=b"--x\r\nbroken")  # fmt: skip
    assert status < 500  # a torn form is no form, never a crash
    assert served.get("/status.json", token=TOKEN)[0] == 200  # still serving


@pytest.mark.both_backends
def test_a_taken_port_is_a_clear_error_not_a_traceback(fixture_vault):
    import subprocess
    import sys

    from tests.web_helpers import REPO

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "memvault", "--vault", str(fixture_vault),
                               "web", "--port", str(port)],
                              capture_output=True, text=True, cwd=REPO, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_token_must_be_long_enough():
    from memvault.cli.web.security import Guard

    with pytest.raises(ValueError):
        Guard(lambda *a: None, token="short", port=1)


@pytest.mark.both_backends
def test_a_memory_space_and_its_notes(served):
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.spaces import SpaceCatalog

    catalog = SpaceCatalog(served.root / "spaces", time_zone="Europe/Amsterdam")
    space = catalog.create("Work", "Projects at Northwind")
    with MemoryStore.open(catalog.path_of(space.id)) as store:
        receipt = store.remember("The Northwind offsite is in Haarlem.")
    _, content = get_json(served, "/content.json")
    assert content["spaces"]["spaces"][0]["url"] == f"/spaces/{space.id}"
    assert content["spaces"]["spaces"][0]["notes"] == 1
    status, page = get_json(served, f"/spaces/{space.id}.json")
    assert status == 200 and page["space"]["title"] == "Work" and page["total"] == 1
    note_url = page["notes"][0]["url"]
    status, note = get_json(served, note_url + ".json")
    assert status == 200 and note["space"]["id"] == space.id
    assert [b["id"] for b in note["bullets"]] == [receipt.id]
    assert note["bullets"][0]["url"] == f"{note_url}#{receipt.id}"
    assert get_json(served, "/spaces/s-00000000.json")[0] == 404
    assert get_json(served, "/spaces/..%2F..%2Fetc.json")[0] in (400, 404)
    assert get_json(served, f"/spaces/{space.id}/notes/daily/..%2Fmemvault.json")[0] in (400, 404)


@pytest.mark.both_backends
def test_index_md_is_rendered_when_consolidation_wrote_it(served):
    assert get_json(served, "/index-md.json")[0] == 404
    served.store.consolidate()
    status, body = get_json(served, "/index-md.json")
    assert status == 200 and "Recent days" in body["html"]
    assert 'href="/notes/daily/2026-11-16"' in body["html"]  # its wikilinks lead to the notes
    _, content = get_json(served, "/content.json")
    assert content["indexMd"] is True


@pytest.mark.both_backends
def test_memvault_web_owns_the_vault_and_stops_cleanly_on_sigterm(fixture_vault):
    from memvault.vault.locks import LivenessFence
    from tests.web_helpers import WebProcess

    with WebProcess(fixture_vault) as web:
        assert LivenessFence(fixture_vault).is_held_elsewhere()  # it drains the intake, as watch does
        status, _, body = web.request("GET", "/status.json", token=web.token)
        assert status == 200 and json.loads(body)["owner"]["pid"] == web.process.pid
    assert web.process.returncode == 0
    assert "memvault web: stopped" in web.output()
    assert not LivenessFence(fixture_vault).is_held_elsewhere()


@pytest.mark.both_backends
def test_beside_a_running_owner_the_pages_read_through_it(fixture_vault):
    import subprocess
    import sys

    from memvault.indexer.engine.client import find_owner
    from tests.web_helpers import REPO, WebProcess, poll

    owner = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(fixture_vault), "serve"], cwd=REPO,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        poll(lambda: find_owner(fixture_vault) is not None, what="memvault serve to answer")
        with WebProcess(fixture_vault) as web:
            status, _, body = web.request("GET", "/recall.json?q=deployment+color", token=web.token)
            assert status == 200 and json.loads(body)["hits"]
            status, _, body = web.request("GET", "/status.json", token=web.token)
            page = json.loads(body)
            assert status == 200 and page["owner"]["pid"] == owner.pid and not page["owner"]["thisProcess"]
            assert page["intake"]["drainedHere"] is False
            status, _, body = web.request("GET", "/journal.json?from=2026-11-01&through=2026-11-16", token=web.token)
            assert status == 200 and json.loads(body)["entries"]
        assert "reading through the vault's owner" in web.output()
    finally:
        owner.terminate()
        owner.wait(timeout=60)


@pytest.mark.both_backends
def test_a_huge_form_post_is_answered_413_not_a_reset(served):
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://127.0.0.1:{served.port}"}
    body = b"q=" + b"x" * (5 * 1024 * 1024)
    for path in ("/recall/agent.json", "/recall/agent"):
        status, _, answer = served.request("POST", path, token=TOKEN, headers=headers, body=body)
        assert status == 413, answer[:300]
        assert b"at most 64 KiB" in answer and b"shorten it" in answer and b"Traceback" not in answer
    status, _, answer = served.request(
        "POST", "/recall/agent.json", token=TOKEN, headers=headers, body=b"q=" + b"x" * 3000
    )
    assert status == 400 and b"q is 3000 characters" in answer  # under the bound: the field's own limit speaks
    assert served.get("/status.json", token=TOKEN)[0] == 200  # still serving


@pytest.mark.both_backends
def test_recall_hit_text_keeps_the_markdown_it_was_written_with(served):
    served.store.remember("Pass *args and **kwargs through; 2 * 3 * 4 is 24.")
    _, body = get_json(served, "/recall.json?q=kwargs+through")
    hit = body["hits"][0]
    assert hit["html"] == "Pass *args and **kwargs through; 2 * 3 * 4 is 24."  # as written (and as Obsidian shows it)
    html = served.get("/recall?q=kwargs+through", token=TOKEN)[2].decode()
    assert hit["html"] in html
    served.store.remember("Run the nightly job on a 2*3 grid and *care* about the order.")
    _, body = get_json(served, "/recall.json?q=nightly+job+grid")
    assert body["hits"][0]["html"] == "Run the nightly job on a 2*3 grid and <em>care</em> about the order."
    assert "on a 2*3 grid and <em>care</em> about" in served.get("/recall?q=nightly+job+grid", token=TOKEN)[2].decode()
    _, journal = get_json(served, "/journal.json")  # the last 7 days: today's remembered facts
    entry = next(e for e in journal["entries"] if "nightly job" in e["text"])
    assert entry["html"] == "Run the nightly job on a 2*3 grid and <em>care</em> about the order."
    assert entry["html"] in served.get("/journal", token=TOKEN)[2].decode()


@pytest.mark.both_backends
def test_a_vault_mixing_both_layouts_browses_by_date(served):
    nested = served.root / "daily" / "2026" / "11" / "2026-11-16.md"
    nested.parent.mkdir(parents=True)
    (served.root / "daily" / "2026-11-16.md").rename(nested)
    _, flat = get_json(served, "/notes/daily/2026-11-15.json")
    assert flat["newer"] == {"path": "daily/2026/11/2026-11-16.md", "url": "/notes/daily/2026/11/2026-11-16"}
    _, moved = get_json(served, "/notes/daily/2026/11/2026-11-16.json")
    assert moved["older"]["path"] == "daily/2026-11-15.md" and moved["newer"] is None
    _, content = get_json(served, "/content.json?month=2026-11")
    day = next(c for week in content["calendar"] for c in week if c and c["date"] == "2026-11-16")
    assert day["exists"] and day["url"] == "/notes/daily/2026/11/2026-11-16"
