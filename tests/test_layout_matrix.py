"""Every surface over both daily layouts: flat `daily/YYYY-MM-DD.md` and the Daily Notes plugin's
nested `daily/YYYY/MM/YYYY-MM-DD.md` (issue 24, item 1).

Each case runs a real entry point (the click CLI, the MCP server over the SDK's stdio client,
the web app over real HTTP, `export` / `import restore`, BuJo capture against a loopback chat
model) on a vault whose notes are filed in one layout, and checks that what it reports names
the note where it is. The nested layout broke admit/inspect/health (the intake record's
projection was refused), the Status page (500), Recall's links (404), the Content calendar
(an empty month) and capture's graph.jsonl (a nested fact source was refused on the next read).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_test_backend, set_up_the_tests_backend

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

LAYOUTS = ("flat", "nested")
#: the note each layout files 30 November 2026 under (spelt out: the layout code is under test)
NOTE = {"flat": "daily/2026-11-30.md", "nested": "daily/2026/11/2026-11-30.md"}
AUDIT_NOTE = {"flat": "audit/2026-11-29.md", "nested": "audit/2026/11/2026-11-29.md"}
#: a note written today (Remember and capture write at "now"): its name in each layout
TODAY_NOTE_RE = {"flat": r"daily/\d{4}-\d{2}-\d{2}\.md", "nested": r"daily/(\d{4})/(\d{2})/\1-\2-\d{2}\.md"}
NOTE_TEXT = ("# 2026-11-30\n\n- 09:00 Morgan chose *blue* as the deployment color. ^m-blue000001\n"
             "- 09:30 [ ] Ask Alice about the offsite ^m-alice00001\n")  # fmt: skip
BLUE = "m-blue000001"
TOKEN = "layout-matrix-token-0123456789"


def make_vault(
    parent: Path, layout: str, *, mode: str = "lite", llm: dict | None = None, embeddings: dict | None = None
) -> Path:
    data = default_config_data(mode=mode, time_zone="UTC")  # UTC: each instant's day is the one written
    if llm is not None:
        data["memory"]["llm"] = llm
        data["memory"]["writeMode"] = "capture"
    if embeddings is not None:
        data["memory"]["embeddings"] = embeddings
    root = parent / layout
    init_vault(root, render_config(data))
    for relpath, text in (
        (NOTE[layout], NOTE_TEXT),
        (AUDIT_NOTE[layout], "# 2026-11-29\n\n- 08:00 raw observation ^a-observe001\n"),
    ):
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_text(text)
    if layout == "nested":  # this year's folder: today's note goes nested too, whatever today is
        (root / "daily" / f"{datetime.now(UTC).year:04d}").mkdir(parents=True, exist_ok=True)
    return on_test_backend(root.resolve())  # a both_backends test's postgres run: indexed on the server


def run(root: Path, *args: str, stdin: str | None = None, code: int = 0):
    result = CliRunner().invoke(cli, ["--vault", str(root), *args], input=stdin, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


# --- the CLI: rebuild, search, remember, journal, admit, inspect, health ---------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cli_surfaces(tmp_path, layout):
    root = make_vault(tmp_path, layout)
    run(root, "rebuild")
    hits = json.loads(run(root, "search", "--json", "deployment color"))["hits"]
    assert hits[0]["source"] == f"{NOTE[layout]}#^{BLUE}"
    added = run(root, "remember", "--at", "2026-11-30T11:00:00+00:00", "The retro is on Fridays.")
    assert NOTE[layout] in added
    journal = json.loads(run(root, "journal", "--json", "2026-11-30", "2026-11-30"))
    assert {e["source"].partition("#")[0] for e in journal["entries"]} == {NOTE[layout]}
    assert any("retro" in e["text"] for e in journal["entries"])
    turn = {"runId": "r-1", "answer": "Deployed 2.4 to staging.", "completedAt": "2026-11-30T12:00:00Z"}
    admitted = json.loads(run(root, "admit", stdin=json.dumps(turn)))
    assert admitted["status"] == "admitted" and admitted["state"] != "invalid"  # the nested layout read "invalid"
    assert "Deployed 2.4 to staging." in (root / NOTE[layout]).read_text()
    inspected = json.loads(run(root, "inspect", "--json"))
    assert inspected["counts"]["invalid"] == 0 and inspected["counts"]["resolved"] == 1
    assert inspected["records"][0]["projection"].startswith(f"{NOTE[layout]}#^")
    assert run(root, "health").startswith("healthy")  # exit 0: it said "intake record(s) are unreadable" forever


def test_a_receipt_the_old_code_wrote_in_the_nested_layout_reads_again(tmp_path):
    """These exact bytes were written by `admit` before the fix (and refused by its reader)."""
    from memvault.vault.intake.record import parse_receipt

    intake_id = "a5fa777a3dc67268caea6eea038ba14177e360dba84e1db44e738dbae137e7ef"
    data = (b'{"admittedAt":"2026-12-02T05:35:01.346879Z","attempts":1,"id":"' + intake_id.encode()
            + b'","outcome":"projected",'
            b'"payloadSha256":"4dba6437c9e7b445d5fcd19b1700e9a40c3bf264e7a396b69f9f4b75b576b8ca",'
            b'"projection":"daily/2026/12/2026-12-02.md#^m-09ff72d82c","reason":null,'
            b'"resolvedAt":"2026-12-02T05:35:01.424288Z","v":1}\n')  # fmt: skip
    receipt = parse_receipt(data, intake_id, "resolved/x.json")
    assert receipt.projection == "daily/2026/12/2026-12-02.md#^m-09ff72d82c"
    from memvault.vault.errors import InvalidRecord

    for wrong in (b"daily/2026/11/2026-12-02.md", b"daily/2026/12/02/2026-12-02.md", b"notes/2026/12/2026-12-02.md"):
        with pytest.raises(InvalidRecord):  # a note under another month, too deep, or outside daily/ and audit/
            parse_receipt(data.replace(b"daily/2026/12/2026-12-02.md", wrong), intake_id, "resolved/x.json")


# --- export / import restore -----------------------------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_export_and_restore_keep_the_layout_and_a_readable_intake(tmp_path, layout):
    root = make_vault(tmp_path, layout)
    turn = {"runId": "r-1", "answer": "Deployed 2.4 to staging.", "completedAt": "2026-11-30T12:00:00Z"}
    run(root, "admit", stdin=json.dumps(turn))
    archive = tmp_path / "backup.tar.gz"
    run(root, "export", str(archive))
    restored = tmp_path / "restored"
    run(restored, "import", "restore", str(archive))
    assert (restored / NOTE[layout]).read_text() == (root / NOTE[layout]).read_text()
    inspected = json.loads(run(restored, "inspect", "--json"))
    assert inspected["counts"]["invalid"] == 0 and inspected["counts"]["resolved"] == 1
    run(restored, "rebuild")
    assert run(restored, "health").startswith("healthy")
    hits = json.loads(run(restored, "search", "--json", "deployed staging"))["hits"]
    assert hits and hits[0]["source"].startswith(f"{NOTE[layout]}#^")


# --- MCP: the SDK's stdio client against `memvault mcp` --------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mcp_tools(tmp_path, layout):
    from mcp import Client

    from memvault.cli.mcp_tools import JOURNAL, RECALL, REMEMBER
    from tests.test_mcp import body_of, params

    root = make_vault(tmp_path, layout)
    run(root, "rebuild")

    async def session():
        async with Client(params(root), read_timeout_seconds=120) as client:
            recall = body_of(await client.call_tool(RECALL, {"query": "which deployment color did Morgan choose?"}))
            journal = body_of(
                await client.call_tool(
                    JOURNAL, {"fromDate": "2026-11-30", "throughDate": "2026-11-30", "timeZone": "UTC"}
                )
            )
            remembered = body_of(await client.call_tool(REMEMBER, {"text": "The offsite is in Haarlem."}))
            return recall, journal, remembered

    recall, journal, remembered = anyio.run(session)
    assert recall["hits"][0]["source"] == f"{NOTE[layout]}#^{BLUE}"
    assert {e["source"].partition("#")[0] for e in journal["entries"]} == {NOTE[layout]}
    source = json.dumps(remembered)
    assert re.search(TODAY_NOTE_RE[layout] + r"#\^m-", source), source


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mcp_beside_a_running_owner_ranks_recalls_itself_in_either_layout(tmp_path, layout):
    """`memvault mcp` beside `memvault watch` is the owner's client: from its second recall on it
    ranks in its own process (indexer/engine/client_reads.py), over the committed index and the
    owner's pending rows, and finds the same memories in either layout."""
    from mcp import Client

    from memvault.cli.mcp_tools import RECALL, REMEMBER
    from tests.engine_helpers import OwnerProcess
    from tests.test_mcp import body_of, params

    root = make_vault(tmp_path, layout, mode="journal")
    run(root, "rebuild")
    owner = OwnerProcess(root, "watch").wait_serving()

    async def session():
        async with Client(params(root), read_timeout_seconds=120) as client:
            answers = [body_of(await client.call_tool(RECALL, {"query": "which deployment color did Morgan choose?"}))]
            await client.call_tool(REMEMBER, {"text": "The offsite moved to Haarlem in the spring."})
            for query in ("which deployment color did Morgan choose?", "where is the offsite?"):
                answers.append(body_of(await client.call_tool(RECALL, {"query": query})))
            return answers

    try:
        first, again, fresh = anyio.run(session)
    finally:
        assert "Traceback" not in owner.stop()
    assert first["hits"][0]["source"] == again["hits"][0]["source"] == f"{NOTE[layout]}#^{BLUE}"
    found = [hit for hit in fresh["hits"] if hit["text"] == "The offsite moved to Haarlem in the spring."]
    assert len(found) == 1 and re.fullmatch(TODAY_NOTE_RE[layout] + r"#\^m-[0-9a-f]+", found[0]["source"]), fresh


# --- the web pages: Status, Recall, Content and a note ---------------------------------------------


@pytest.fixture
def web(tmp_path, request):
    from memvault.cli.web.app import build_app
    from memvault.cli.web.reader import VaultReader
    from memvault.cli.web.server import bind_loopback
    from memvault.indexer.engine.store import MemoryStore
    from tests.web_helpers import InProcessServer

    layout = request.param
    set_up_the_tests_backend(request)  # before the vault: it follows the test's backend
    root = make_vault(tmp_path, layout)
    store = MemoryStore.open(root)
    store.rebuild()
    bound = bind_loopback(0)
    with InProcessServer(build_app(VaultReader(store, env={}), token=TOKEN, port=bound.port), bound) as server:
        server.layout, server.root = layout, root
        yield server
    store.close()


def page_json(server, path: str) -> tuple[int, dict]:
    status, _headers, body = server.get(path, token=TOKEN)
    return status, json.loads(body)


@pytest.mark.both_backends
@pytest.mark.parametrize("web", LAYOUTS, indirect=True)
def test_web_status(web):
    status, body = page_json(web, "/status.json")
    assert status == 200, body  # the nested layout answered 500 (isoformat of '2026/11/2026-11-30')
    assert body["chart"]["through"] == "2026-11-30" and body["chart"]["total"] == 2
    assert web.get("/status", token=TOKEN)[0] == 200


@pytest.mark.both_backends
@pytest.mark.parametrize("web", LAYOUTS, indirect=True)
def test_web_recall_hits_link_to_their_bullet(web):
    status, body = page_json(web, "/recall.json?q=deployment+color")
    hit = body["hits"][0]
    assert status == 200 and hit["source"] == f"{NOTE[web.layout]}#^{BLUE}"
    assert hit["url"] == f"/{'notes'}/{NOTE[web.layout].removesuffix('.md')}#{BLUE}"
    status, note = page_json(web, hit["url"].partition("#")[0] + ".json")
    assert status == 200, note  # the nested layout's links answered 404
    assert BLUE in [b["id"] for b in note["bullets"]] and note["path"] == NOTE[web.layout]
    html = web.get("/recall?q=deployment+color", token=TOKEN)[2].decode()
    assert f'href="{hit["url"]}"' in html
    assert "Morgan chose <em>blue</em> as the deployment color." in html  # the index's text dropped the `*`


@pytest.mark.both_backends
@pytest.mark.parametrize("web", LAYOUTS, indirect=True)
def test_web_content_calendar_and_note_page(web):
    status, body = page_json(web, "/content.json?month=2026-11")
    assert status == 200 and body["months"] == [{"month": "2026-11", "notes": 1, "memories": 2}]
    day = next(c for week in body["calendar"] for c in week if c and c["date"] == "2026-11-30")
    assert day["exists"] and day["memories"] == 2, day  # the nested layout's calendar was empty
    assert day["url"] == f"/notes/{NOTE[web.layout].removesuffix('.md')}"
    assert body["audit"][0] == {"path": AUDIT_NOTE[web.layout], "day": "2026-11-29", "memories": 1,
                                "url": f"/notes/{AUDIT_NOTE[web.layout].removesuffix('.md')}"}  # fmt: skip
    status, _, html = web.get(day["url"], token=TOKEN)
    assert status == 200 and 'class="task-box" disabled' in html.decode()
    # a link by date (a wikilink, a bookmark) finds the note wherever the layout keeps it
    status, by_date = page_json(web, "/notes/daily/2026-11-30.json")
    assert status == 200 and by_date["path"] == NOTE[web.layout] and by_date["month"] == "2026-11"


@pytest.mark.both_backends
@pytest.mark.parametrize("web", LAYOUTS, indirect=True)
def test_web_memory_space_notes(web):
    from memvault.indexer.engine.store import MemoryStore
    from memvault.vault.spaces import SpaceCatalog

    space = SpaceCatalog(web.root / "spaces", time_zone="UTC").create("Work", "Projects")
    space_root = SpaceCatalog(web.root / "spaces", time_zone="UTC").path_of(space.id)
    if web.layout == "nested":
        (space_root / "daily" / f"{datetime.now(UTC).year:04d}").mkdir(parents=True, exist_ok=True)
    with MemoryStore.open(space_root) as store:
        receipt = store.remember("The Northwind offsite is in Haarlem.")
    status, page = page_json(web, f"/spaces/{space.id}.json")
    [listed] = page["notes"]
    assert status == 200 and re.fullmatch(TODAY_NOTE_RE[web.layout], listed["path"])
    assert listed["url"] == f"/spaces/{space.id}/notes/{listed['path'].removesuffix('.md')}"
    status, note = page_json(web, listed["url"] + ".json")
    assert status == 200 and [b["id"] for b in note["bullets"]] == [receipt.id]


# --- capture: BuJo against a loopback chat model ---------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_capture_writes_facts_and_graph_in_the_layout(tmp_path, layout):
    from memvault.vault.graph import read_graph
    from tests.capture_helpers import (
        EMBED_PATH,
        GOOD,
        OLLAMA_PATH,
        ChatScript,
        add_only,
        entry,
        hash_embeddings,
        run_once,
    )
    from tests.intake_helpers import Clock, store_for
    from tests.loopback import LoopbackServer

    with LoopbackServer() as server:
        server.route(OLLAMA_PATH, ChatScript(lambda _turn: GOOD, add_only))
        server.route(EMBED_PATH, hash_embeddings)
        llm = {"provider": "ollama", "model": "capture-model", "endpoint": server.url, "timeoutMs": 5000}
        embeddings = {"provider": "ollama", "model": "hash-embed", "dim": 32, "endpoint": server.url}
        root = make_vault(tmp_path, layout, mode="bujo", llm=llm, embeddings=embeddings)
        clock = Clock()  # 30 November 2026, 13:03 UTC: the turns land in NOTE[layout]
        with store_for(root, clock) as store:
            store.rebuild()
            run_once(store, clock, run_id="run-1")
            run_once(store, clock, run_id="run-2", text="user: and the date?\nassistant: still March 15.")
            first, second = entry(root, "run-1"), entry(root, "run-2")
    # the second capture read graph.jsonl back: a nested fact source made it refuse the file
    assert first.get("outcome") == "captured" and second.get("outcome") == "captured", (first, second)
    graph, _ = read_graph(root)
    assert graph.facts and {f.source for f in graph.facts.values()} == {NOTE[layout]}
    assert all(f"^{f.id}" in (root / NOTE[layout]).read_text() for f in graph.facts.values())
    assert run(root, "health").startswith("healthy")


# --- a real browser on a nested vault ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.both_backends
def test_nested_layout_pages_in_chromium(tmp_path):
    from tests.web_helpers import CHROMIUM, WebProcess, launch_chromium

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    playwright_api = pytest.importorskip("playwright.sync_api")
    root = make_vault(tmp_path, "nested")
    with open(root / NOTE["nested"], "a") as note:  # what Obsidian's reading view hides or draws
        note.write(
            "\n%% a private aside %%\n<!-- an html comment -->\n\n"
            "> [!warning] Mind the gap\n> The offsite *train* leaves at 9.\n"
        )
    run(root, "rebuild")
    with WebProcess(root) as site, playwright_api.sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.set_default_timeout(60_000)
            page.goto(site.url)
            page.goto(f"{site.base}/status")
            assert page.locator("h1, h2").first.is_visible() and "Error" not in page.title()
            page.goto(f"{site.base}/recall?q=deployment+color")
            page.locator("ol.hits a.source").first.click()
            page.wait_for_url(re.compile(r"/notes/daily/2026/11/2026-11-30#m-blue000001$"))
            target = page.locator(f"li#{BLUE}")
            assert "deployment color" in target.inner_text() and page.locator(f"li#{BLUE}:target").count() == 1
            assert page.locator("li.task input[type=checkbox][disabled]").count() == 1
            callout = page.locator("div.callout.callout-warning")
            assert callout.locator(".callout-title").inner_text().startswith("Mind the gap") and callout.is_visible()
            assert callout.locator("em").inner_text() == "train"
            shown = page.locator("article.note").inner_text()
            assert "a private aside" not in shown and "an html comment" not in shown and "[!warning]" not in shown
            page.goto(f"{site.base}/content?month=2026-11")
            page.locator('a[href="/notes/daily/2026/11/2026-11-30"]').first.click()
            page.wait_for_url(re.compile(r"/notes/daily/2026/11/2026-11-30$"))
        finally:
            browser.close()


@pytest.mark.both_backends
@pytest.mark.parametrize("layout", LAYOUTS)
def test_index_md_links_each_day_where_it_is_filed(tmp_path, layout):
    root = make_vault(tmp_path, layout)
    run(root, "rebuild")
    run(root, "consolidate")
    link = f"[[{NOTE[layout].removesuffix('.md')}|2026-11-30]]"  # Obsidian resolves a nested note by its path
    assert link in (root / "index.md").read_text()


#: ways code has spelt a note's path ↔ date mapping by hand (each one broke the nested layout once)
_HAND_MADE_NOTE_NAMES = re.compile(
    r"\\d\{4\}-\\d\{2\}-\\d\{2\}\\\\?\.md"  # a regex for a flat note name
    r"|\[0-9\]\{4\}-\[0-9\]\{2\}-\[0-9\]\{2\}\\\\?\.md"
    r"|isoformat\(\)\}\.md"  # an f-string building a flat note name
    r"|len\((?:DAILY|AUDIT)\)"  # slicing a date out of a note's path
    r"|\[6:-3\]|\[6:13\]"
)


def test_only_the_layout_spells_out_note_names():
    """Every caller asks vault/layout.py (parse_note_relpath, note_day, note_relpath_candidates,
    parse_note_ref); a surface that spells the flat name itself is the bug this file is about."""
    repo = Path(__file__).resolve().parent.parent
    offenders = []
    for folder in ("vault", "indexer", "cli"):
        for path in sorted((repo / folder).rglob("*.py")):
            if path == repo / "vault" / "layout.py":
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if _HAND_MADE_NOTE_NAMES.search(line):
                    offenders.append(f"{path.relative_to(repo)}:{number}: {line.strip()}")
    assert offenders == [], "ask memvault.vault.layout instead:\n" + "\n".join(offenders)


def test_the_layout_maps_paths_and_dates_both_ways():
    from datetime import date

    from memvault.vault.layout import note_day, note_relpath_candidates, note_sort_key, parse_note_ref

    assert note_relpath_candidates("daily", date(2026, 11, 30)) == (NOTE["flat"], NOTE["nested"])
    assert {note_day(NOTE[layout]) for layout in LAYOUTS} == {date(2026, 11, 30)}
    assert note_day(AUDIT_NOTE["nested"], "daily") is None and note_day(AUDIT_NOTE["nested"], "audit") == date(
        2026, 11, 29
    )
    for wrong in (
        "daily/2026/12/2026-11-30.md",
        "daily/2026/11/30/2026-11-30.md",
        "daily/2026-11-31.md",
        "notes/2026-11-30.md",
    ):
        assert note_day(wrong) is None, wrong
    assert parse_note_ref(f"{NOTE['nested']}#^{BLUE}") == (NOTE["nested"], BLUE)
    assert parse_note_ref(f"{NOTE['nested']}#{BLUE}") is None and parse_note_ref(f"{NOTE['nested']}#^") is None
    mixed = ["daily/2026/12/2026-12-01.md", "daily/2026-11-30.md", "daily/2026-12-02.md", "audit/2026-11-29.md"]
    assert sorted(mixed, key=note_sort_key) == ["audit/2026-11-29.md", "daily/2026-11-30.md",
                                                "daily/2026/12/2026-12-01.md", "daily/2026-12-02.md"]  # fmt: skip
