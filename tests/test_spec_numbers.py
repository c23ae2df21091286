"""The specification's numbers, each pinned with the spec's own literal through the surface that
obeys it (never by reading memvault's constant back). Each test fails on a plausible mutant:
the number changed, or a `>` turned into `>=` at the boundary."""

import json
import re
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.journal.query import entry_bytes
from memvault.indexer.runtime.host_session import HostSession
from memvault.indexer.services.chat import HttpChatModel
from memvault.vault.config import default_config_data, render_config
from memvault.vault.errors import InvalidRecord, ProviderUnavailable
from memvault.vault.graph import Entity, Graph, render_graph
from memvault.vault.init import init_vault
from memvault.vault.locks import VaultLock
from memvault.vault.runtime.plans import parse_json_object
from tests.capture_helpers import EMBED_PATH, OLLAMA_PATH, hash_embeddings, make_capture_vault
from tests.intake_helpers import make_vault as intake_vault
from tests.intake_helpers import store_for
from tests.loopback import LoopbackServer
from tests.postgres_helpers import on_test_backend

ZONE = "Europe/Amsterdam"


def run(*args: str, ok: bool = True):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def lite_vault(tmp_path: Path, **runtime) -> Path:
    data = default_config_data(mode="lite", time_zone=ZONE)
    if runtime:
        data["memory"]["runtime"] = runtime
    root = tmp_path / "v"
    init_vault(root, render_config(data))
    return on_test_backend(root)  # a both_backends test's postgres run: the index on the server


# --- MemoryJournal: "A complete empty range is successful with noData: true" ---------------------


@pytest.mark.both_backends
def test_an_empty_range_whose_scan_is_incomplete_is_not_no_data(tmp_path):
    root = lite_vault(tmp_path)
    (root / "daily" / "2026-09-02.md").write_bytes(b"# 2026-09-02\n\n- 09:00 broken \xff\xfe bytes\n")
    body = json.loads(run("--vault", str(root), "journal", "2026-09-02", "2026-09-02", "--json").output)
    assert body["entries"] == [] and body["coverage"]["complete"] is False
    assert body["noData"] is False  # nothing shown, but the note could not be read: not "no data"
    clean = json.loads(run("--vault", str(root), "journal", "2026-09-05", "2026-09-05", "--json").output)
    assert clean["noData"] is True and clean["coverage"]["complete"] is True


# --- MemoryJournal: "each page caps at 25 entries/8 KiB" -----------------------------------------


@pytest.mark.both_backends
def test_a_journal_page_fills_up_to_8_kib_and_no_further(tmp_path):
    root = lite_vault(tmp_path)
    # as JSON an entry here is its text plus 153 bytes. Page 1: four of 2,000 bytes and one of 192,
    # landing exactly on 8,192. Page 2: four of 2,000, then one of 193 that would cross by a byte.
    big = [f"{m} " + "w" * 1845 for m in range(4)]
    texts = big + ["4 " + "w" * 37] + big + ["9 " + "w" * 38] + [f"{m} short" for m in range(4)]
    bullets = "".join(f"- {9 + n // 10:02d}:{n % 10:02d} {text}\n" for n, text in enumerate(texts))
    (root / "daily" / "2026-09-01.md").write_text("# 2026-09-01\n\n" + bullets, encoding="utf-8")
    args = ["--vault", str(root), "journal", "2026-09-01", "2026-09-01", "--limit", "25", "--json"]
    first = json.loads(run(*args).output)
    second = json.loads(run("--vault", str(root), "journal", "--cursor", first["cursor"], "--json").output)
    third = json.loads(run("--vault", str(root), "journal", "--cursor", second["cursor"], "--json").output)
    for page in (first, second):
        assert page["page"]["bytes"] == sum(entry_bytes(entry) for entry in page["entries"])
        assert page["page"]["remaining"] > 0  # the byte cap, not the limit of 25, cut this page
    assert (first["page"]["count"], first["page"]["bytes"]) == (5, 8 * 1024)  # exactly on the cap fits
    assert second["page"]["count"] == 4
    assert second["page"]["bytes"] + entry_bytes(third["entries"][0]) == 8 * 1024 + 1  # one byte over does not


# --- Runtime Memory: "USER add exceeds 4 KiB", MEMORY "10 KiB by default" --------------------------


def _filler(size: int, letter: str) -> str:
    """One normalised line of exactly `size` UTF-8 bytes."""
    words = (f"{letter}{'x' * 8} " * (size // 10 + 1))[:size]
    return words[:-1] + letter if words.endswith(" ") else words


@pytest.mark.parametrize("target, limit", [("user", 4 * 1024), ("memory", 10 * 1024)])
def test_a_runtime_write_landing_exactly_on_the_limit_fits_and_one_byte_more_does_not(tmp_path, target, limit):
    root = lite_vault(tmp_path)
    base = ["--vault", str(root), "runtime", "add", target, "--strategy", "general", "--json"]
    # entries are joined by one newline each: fill to exactly `limit` bytes in entries of <= 4 KiB
    sizes, left = [], limit
    while left:
        size = min(4096, left if not sizes else left - 1)
        sizes.append(size)
        left -= size + (1 if len(sizes) > 1 else 0)
    for number, size in enumerate(sizes):
        receipt = json.loads(run(*base, _filler(size, "abcdefghij"[number])).output)
        assert receipt["status"] == "added", receipt
    assert receipt["usedBytes"] == limit
    over = run(*base, "z", ok=False)
    assert over.exit_code == 1 and f"over its {limit}-byte limit" in over.output


# --- "Shutdown gives work up to 10 seconds to drain" -------------------------------------------


@pytest.mark.slow
def test_a_normal_stop_waits_10_seconds_for_stuck_work_then_aborts_and_keeps_it_pending(tmp_path):
    root = intake_vault(tmp_path)
    store = store_for(root)
    held, release = threading.Event(), threading.Event()

    def hold_the_write_lock():  # the projection cannot finish until this lets go
        with VaultLock(root, timeout=30):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold_the_write_lock)
    holder.start()
    assert held.wait(10)
    letgo = threading.Timer(20, release.set)  # the lock frees itself 20 s into the stop
    try:
        worker = store.start_intake(poll_seconds=0.05)
        assert store.persist_completed_turn("run-1", "Deployed the fix.").status == "admitted"
        letgo.start()
        began = time.monotonic()
        report = store.stop()  # the default deadline: no number given
        waited = time.monotonic() - began
    finally:
        letgo.cancel()
        release.set()
        holder.join(30)
    # a 30 s deadline would have seen the lock released 20 s in and drained; a shorter one than
    # 10 s would have given up sooner (join never returns early)
    assert (report.drained, report.aborted) == (False, True)
    assert waited >= 10
    assert worker.join(60)
    assert not (root / "daily").exists() or not list((root / "daily").glob("*.md"))
    assert list((root / ".capture-intake" / "pending").glob("*"))  # the turn stays pending for restart
    store.close()


# --- index.md: "a 10,000-row safety ceiling" ----------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("rows, complete", [(10_000, True), (10_001, False)])
def test_the_index_md_graph_scan_stops_at_10_000_rows(tmp_path, rows, complete):
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        server.route(OLLAMA_PATH, lambda _body: (500, "no model call expected"))
        root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)
        graph = Graph()
        for i in range(rows):
            graph.add_entity(Entity(f"e-{i:010x}", f"Topic {i}", "concept"))
        (root / "graph.jsonl").write_bytes(render_graph(graph))
        run("--vault", str(root), "consolidate")
        assert server.requests_to(OLLAMA_PATH) == []
    text = (root / "index.md").read_text(encoding="utf-8")
    expected = "complete" if complete else "stopped at the 10,000-row ceiling"
    assert f"_Graph scan: 10000 rows, {expected}._" in text


# --- the idle review: "idleReviewMs (default 30 s)", "minIntervalMs (default 5 min)" ---------------

LONG_USER = "We agreed the deploy window is Tuesday 14:00 UTC and that Priya owns the rollback plan. " * 2


def _review_vault(tmp_path: Path, endpoint: str, runtime: dict) -> Path:
    data = default_config_data(mode="lite", time_zone=ZONE)
    data["memory"]["llm"] = {"provider": "ollama", "model": "m", "endpoint": endpoint, "timeoutMs": 60_000}
    data["memory"]["runtime"] = runtime
    root = tmp_path / "v"
    init_vault(root, render_config(data))
    return root


def _eligible_turn(session):
    session.begin_turn()
    return session.end_turn(user_text=LONG_USER, assistant_text="Noted.", tool_results=10, tools_used=("Bash",))


def _chat(_body):
    return 200, {"model": "m", "message": {"role": "assistant", "content": json.dumps({"done": True})}, "done": True}


# local only: it opens no index (its vault's .index/ holds only the host session's activity file)
@pytest.mark.one_engine("opens no index: .index/ holds only the host activity file")
def test_the_idle_review_waits_30_seconds_by_default(tmp_path):
    with LoopbackServer() as server:
        server.route("/api/chat", _chat)
        root = _review_vault(tmp_path, server.url, {"idleReview": {"enabled": True}})
        with HostSession.open(root, env={}) as session:
            end = _eligible_turn(session)
    assert end.admitted and end.review_in_ms == 30_000


# local only: it opens no index (its vault's .index/ holds only the host session's activity file)
@pytest.mark.one_engine("opens no index: .index/ holds only the host activity file")
def test_the_next_review_waits_5_minutes_after_the_last_attempt_by_default(tmp_path):
    now = [1_000_000.0]
    with LoopbackServer() as server:
        server.route("/api/chat", _chat)
        root = _review_vault(tmp_path, server.url, {"idleReviewMs": 1000, "idleReview": {"enabled": True}})
        with HostSession.open(root, env={}, clock_ms=lambda: now[0]) as session:
            assert _eligible_turn(session).review_in_ms == 1000
            assert session.wait_for_review() is not None  # the first attempt ran (at clock 1,000,000)
            now[0] += 60_000  # one minute later
            end = _eligible_turn(session)
    assert end.admitted and end.review_in_ms == 5 * 60_000 - 60_000


# --- "rejected before parsing when it exceeds 262,144 JavaScript characters" --------------------

EMOJI = "\U0001f600"  # one character to Python, two to JavaScript


def _ollama(content):
    return 200, {"model": "m", "message": {"role": "assistant", "content": content}, "done": True}


def test_the_chat_client_counts_the_completion_cap_in_javascript_characters():
    at_cap = EMOJI * (262_144 // 2)
    with LoopbackServer() as server:
        server.route("/api/chat", lambda _body: _ollama(at_cap))
        model = HttpChatModel("ollama", server.url, "m")
        assert model.complete([{"role": "user", "content": "hi"}], response_format_json=False) == at_cap
        server.route("/api/chat", lambda _body: _ollama(at_cap + EMOJI))  # 131,073 code points, 262,146 units
        with pytest.raises(ProviderUnavailable, match="262146 characters, over the 262144 limit"):
            model.complete([{"role": "user", "content": "hi"}], response_format_json=False)


def test_runtime_compaction_counts_the_same_cap_the_same_way():
    inside = '{"entries": "' + EMOJI * ((262_144 - 16) // 2) + '"}'  # 262,144 units with the JSON around it
    assert parse_json_object(inside, "compactor")["entries"].startswith(EMOJI)
    with pytest.raises(InvalidRecord, match="over 262144"):
        parse_json_object('{"entries": "' + EMOJI * (262_144 // 2) + '"}', "compactor")


# --- one constant per number: no stop on the normal path writes its own deadline ------------------


def test_no_stop_or_drain_writes_its_own_shutdown_deadline():
    repo = Path(__file__).resolve().parent.parent
    own_number = re.compile(r"def (?:stop|drain|stop_worker|_teardown)\([^)]*timeout: float = [0-9]|\.(?:stop|drain)\("
                            r"(?:timeout=)?[0-9]")  # fmt: skip
    found = [f"{path.relative_to(repo)}:{number}"
             for folder in ("indexer", "cli") for path in sorted((repo / folder).rglob("*.py"))
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if own_number.search(line)]  # fmt: skip
    assert found == []  # use memvault.vault.limits.SHUTDOWN_DRAIN_SECONDS
