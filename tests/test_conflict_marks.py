"""Hits from a note git left in conflict say so on every surface (issue 44, part 3): the Python
API, the CLI (alone, and as a client of a running owner), the MCP server and the wire between an
owner and its clients. The fixture vault's daily/2026-11-05.md holds one unresolved hunk (Tuesday
evening against Wednesday morning) and a bullet below it that is not in conflict.

Every test here reads the index, so each runs on both engines."""

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memvault.indexer.engine.store import MemoryStore
from memvault.vault.git_resolve import resolve_note
from memvault.vault.layout import VaultLayout
from tests.engine_helpers import ENV, MEMVAULT, OwnerProcess, memvault_json

NOTE = "daily/2026-11-05.md"
TUESDAY = "The deployment window is Tuesday evening."
WEDNESDAY = "The deployment window is Wednesday morning."
OUTSIDE = "Tomas fixed the flaky export test."

pytestmark = pytest.mark.both_backends


def marks(hits: list[dict]) -> dict[str, bool]:
    """Each hit's text → its conflict mark (`hits` as the JSON of a recall)."""
    return {hit["text"]: hit["conflict"] for hit in hits}


def marked_right(hits: list[dict]) -> bool:
    """Both sides of the hunk are among the hits and marked; no other hit is."""
    found = marks(hits)
    return found.get(TUESDAY) is True and found.get(WEDNESDAY) is True and sum(found.values()) == 2


def test_the_python_api_marks_both_sides_until_the_note_is_resolved(fixture_vault):
    with MemoryStore.open(fixture_vault) as store:
        store.rebuild()
        window = store.recall("deployment window", limit=10)
        outside = store.recall("flaky export test", limit=10)
        assert {hit.text for hit in window.hits if hit.conflict} == {TUESDAY, WEDNESDAY}
        assert marked_right(window.to_json()["hits"])
        assert marks(outside.to_json()["hits"])[OUTSIDE] is False  # the same note, outside the hunk

        assert resolve_note(VaultLayout(fixture_vault), NOTE).resolved
        store.sync()
        after = store.recall("deployment window", limit=10)
    found = [hit["text"] for hit in after.to_json()["hits"]]
    assert found.count(TUESDAY) == found.count(WEDNESDAY) == 1  # both sides kept, once each
    assert not any(marks(after.to_json()["hits"]).values())


def test_the_cli_marks_them_alone_and_as_a_client_of_a_running_owner(fixture_vault):
    memvault_json(fixture_vault, "rebuild")
    alone = memvault_json(fixture_vault, "search", "deployment window")
    assert marked_right(alone["hits"])

    owner = OwnerProcess(fixture_vault).wait_serving()
    try:
        # a client answers from the owner's read view (local engine) or asks the owner (a server's
        # index): either way the mark crosses the wire
        served = memvault_json(fixture_vault, "search", "deployment window")
        assert marked_right(served["hits"])
        text = _search_text(fixture_vault, "deployment window")
        assert (
            f"in conflict: hits from {NOTE} stand in an unresolved merge conflict (memvault git resolve {NOTE})" in text
        )
    finally:
        owner.stop()


def test_a_python_client_of_a_running_owner_marks_them_whichever_process_ranks(fixture_vault):
    memvault_json(fixture_vault, "rebuild")
    owner = OwnerProcess(fixture_vault, "serve").wait_serving()
    try:
        with MemoryStore.open(fixture_vault) as store:
            # the first recall is the owner's answer; from the second on, a local index is ranked
            # in this process from the owner's read view (a server's index: the owner still answers)
            answers = [store.recall("deployment window", limit=10) for _ in range(3)]
    finally:
        assert "Traceback" not in owner.stop()
    for answer in answers:
        assert marked_right(answer.to_json()["hits"])


def test_mcp_recall_marks_them(fixture_vault):
    memvault_json(fixture_vault, "rebuild")
    params = StdioServerParameters(
        command=MEMVAULT[0],
        args=[*MEMVAULT[1:], "--vault", str(fixture_vault), "mcp"],
        cwd=str(fixture_vault.parent),
        env={**ENV, "PYTHONUNBUFFERED": "1"},
    )

    async def recall():
        async with Client(params, read_timeout_seconds=120) as client:
            result = await client.call_tool("MemoryRecall", {"query": "deployment window", "limit": 10})
            return json.loads(result.content[0].text)

    body = anyio.run(recall)
    assert marked_right(body["hits"])


def _search_text(root: Path, query: str) -> str:
    from tests.engine_helpers import memvault

    done = memvault(root, "search", query)
    assert done.returncode == 0, done.stderr
    return done.stdout
