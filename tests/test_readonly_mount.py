"""A vault on a real read-only mount: every read command and the MCP read tools answer, every
write is refused with one clear "read-only" error, no traceback, and not one byte changes.

The view is a bind mount remounted read-only (root), else a copy without write bits (non-root),
else the test skips with the reason (`tests/readonly_helpers.py`).
"""

import json

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memvault import MemoryStore
from tests import postgres_helpers
from tests.readonly_helpers import MEMVAULT, memvault, memvault_here, read_only_view, tree_state

DAY = "2026-11-30"


def make_vault(tmp_path, mode: str):
    vault = tmp_path / f"{mode}-vault"
    # the set-up runs in this process (memvault_here); the commands under test each run as a process
    # a both_backends test's postgres run: the vault's index on the server (its PG* variables)
    flags = postgres_helpers.init_flags()
    assert memvault_here(tmp_path, "init", str(vault), "--mode", mode, "--time-zone", "UTC", *flags) == 0
    (vault / "daily" / f"{DAY}.md").write_text(
        f"# {DAY}\n\n- 09:00 Priya lives in Rotterdam. ^m-priya\n"
        "- 10:00 Morgan chose blue as the deployment color. ^m-blue\n"
    )
    assert memvault_here(vault, "rebuild") == 0
    assert memvault_here(vault, "runtime", "add", "user", "Prefers short answers.") == 0
    assert memvault_here(vault, "doc", "create", "Plan", "--body", "The plan.") == 0
    return vault


READS = [
    ("search", "Priya"),
    ("search", "--json", "Where is Priya living?", "--mode", "auto"),
    ("search", "--json", "deployment color"),
    ("journal", DAY, DAY, "--tz", "UTC", "--json"),
    ("journal", DAY, DAY, "--tz", "UTC"),
    ("health", "--json"),
    ("inspect",),
    ("runtime", "show"),
    ("doc", "list"),
    ("validate",),
]

WRITES = [
    (("remember", "Sam works at Acme."), None),
    (("remember", "--json", "Sam works at Acme."), None),
    (("rebuild",), None),
    (("consolidate",), None),
    (("runtime", "add", "memory", "The build is green."), None),
    (("doc", "create", "Other", "--body", "text"), None),
    (("admit",), json.dumps({"runId": "run-ro-1", "answer": "The deploy finished."})),
]


@pytest.mark.both_backends
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["journal", "lite"])
def test_reads_work_writes_fail_cleanly_nothing_changes(tmp_path, mode):
    vault = make_vault(tmp_path, mode)
    before = tree_state(vault)
    with read_only_view(vault, tmp_path / "ro") as view:
        said = {}  # each read's stdout: the --json ones are checked below (one run of each command)
        for args in READS:
            done = memvault(view, *args)
            assert "Traceback" not in done.stderr, (args, done.stderr)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            assert "read-only" not in done.stderr.lower() or args[0] == "journal", (args, done.stderr)
            said[args] = done.stdout
        found = json.loads(said[("search", "--json", "Where is Priya living?", "--mode", "auto")])
        assert [hit["text"] for hit in found["hits"]] == ["Priya lives in Rotterdam."], found
        assert found["degraded"] is None
        assert json.loads(said[("search", "--json", "deployment color")])["hits"][0]["id"] == "m-blue"
        health = json.loads(said[("health", "--json")])
        assert health["healthy"] is True, health
        journal = json.loads(said[("journal", DAY, DAY, "--tz", "UTC", "--json")])
        assert [entry["id"] for entry in journal["entries"]] == ["m-priya", "m-blue"]
        for args, stdin in WRITES:
            done = memvault(view, *args, stdin=stdin)
            assert "Traceback" not in done.stderr, (args, done.stderr)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            said = done.stdout + done.stderr
            assert said.lower().count("read-only") >= 1, (args, said)
            if "--json" in args:
                assert json.loads(done.stdout)["error"]["code"] == "read_only"
            if args[0] == "admit":  # the host parses admit's answer: a JSON result, never a traceback
                assert json.loads(done.stdout)["status"] == "failed"
        with MemoryStore.open(view) as store:  # the Python API too
            assert [hit.id for hit in store.recall("Priya Rotterdam", limit=3).hits][:1] == ["m-priya"]
    assert tree_state(vault) == before


@pytest.mark.both_backends
def test_mcp_read_tools_serve_a_read_only_vault(tmp_path):
    vault = make_vault(tmp_path, "journal")
    before = tree_state(vault)
    with read_only_view(vault, tmp_path / "ro") as view:
        params = StdioServerParameters(
            command=MEMVAULT,
            args=["--vault", str(view), "mcp"],
            cwd=str(tmp_path),
            env={"PYTHONUNBUFFERED": "1", **postgres_helpers.libpq_variables()},
        )

        async def session():
            async with Client(params, read_timeout_seconds=120) as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                recall = await client.call_tool("MemoryRecall", {"query": "Where does Priya live?"})
                journal = await client.call_tool(
                    "MemoryJournal", {"fromDate": DAY, "throughDate": DAY, "timeZone": "UTC"}
                )
                return names, recall, journal

        names, recall, journal = anyio.run(session)
    assert "MemoryRecall" in names and "MemoryJournal" in names
    assert "Remember" not in names  # a read-only vault offers no write tool
    assert not recall.is_error and "Rotterdam" in recall.content[0].text
    assert not journal.is_error and "m-priya" in journal.content[0].text
    assert tree_state(vault) == before
