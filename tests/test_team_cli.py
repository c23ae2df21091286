"""`memvault --remote NAME …` from a machine without the vault's files: the same commands and
output shapes as against the vault, and `memvault --remote NAME mcp` through the MCP SDK's client."""

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.engine_helpers import ENV, REPO, wait_for
from tests.test_team_store import NAME, files_text, home  # noqa: F401 - the fixture

pytestmark = pytest.mark.one_engine(
    "`--remote NAME` reaches a vault through its index server: the team path exists only on a server"
)

MEMVAULT = str(Path(sys.executable).parent / "memvault")
SECRET = "hunter2-not-for-output"


def remote(dsn, *args, input=None, cwd=None, state=None):
    env = {**ENV, "MEMVAULT_INDEX_DSN": dsn, **({"XDG_STATE_HOME": str(state)} if state else {})}
    return subprocess.run(
        [MEMVAULT, "--remote", NAME, *args],
        input=input,
        env=env,
        cwd=cwd or "/",
        text=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.slow
def test_remote_commands_admit_remember_search_journal_inspect_health(home, tmp_path):  # noqa: F811
    root, _owner, dsn = home
    turn = {"runId": "cli-run-1", "answer": "The load balancer now drains connections for 30 seconds."}
    admitted = remote(dsn, "admit", "--wait", input=json.dumps(turn))
    assert admitted.returncode == 0, admitted.stderr
    body = json.loads(admitted.stdout)
    assert (body["status"], body["worker"]) == ("admitted", "drained")
    assert "30 seconds" in files_text(root)  # --wait answered once the owner had it in its files
    again = json.loads(remote(dsn, "admit", input=json.dumps(turn)).stdout)
    assert again["status"] == "duplicate"
    conflicting = remote(dsn, "admit", input=json.dumps({**turn, "answer": "The load balancer drains for 5 s."}))
    assert conflicting.returncode == 1 and json.loads(conflicting.stdout)["reason"] == "conflict"

    remembered = remote(dsn, "remember", "--json", "Jonas owns the staging certificates.")
    assert remembered.returncode == 0, remembered.stderr
    receipt = json.loads(remembered.stdout)
    found = json.loads(remote(dsn, "search", "--json", "who owns the staging certificates?").stdout)
    assert found["hits"][0]["id"] == receipt["id"]
    wait_for(lambda: "30 seconds" in files_text(root) and receipt["id"] in files_text(root), what="the owner's files")
    today = datetime.now(UTC).date().isoformat()
    wait_for(
        lambda: any(
            e["text"] == "Jonas owns the staging certificates."
            for e in json.loads(remote(dsn, "journal", today, "--json").stdout)["entries"]
        ),
        what="the fact in the journal from the server's rows",
    )
    first = json.loads(remote(dsn, "journal", today, "--limit", "1", "--json", state=tmp_path).stdout)
    assert first["cursor"] and len(first["entries"]) == 1
    nxt = remote(dsn, "journal", "--cursor", first["cursor"], "--json", state=tmp_path)  # another process
    assert nxt.returncode == 0, nxt.stderr
    assert json.loads(nxt.stdout)["entries"][0]["text"] != first["entries"][0]["text"]
    inspected = json.loads(remote(dsn, "inspect", "--json").stdout)
    assert inspected["ownerRunning"] is True and inspected["remote"]["turnsWaiting"] == 0
    status = remote(dsn, "engine", "status", "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["running"] is True
    health = remote(dsn, "health", "--json")
    assert health.returncode == 0, health.stdout
    refused = remote(dsn, "rebuild")
    assert refused.returncode == 2 and "needs the vault's folder" in refused.stderr


def test_an_unreachable_server_is_a_typed_error_without_the_password(tmp_path):
    dsn = f"host={tmp_path} port=1 user=memvault password={SECRET} dbname=nowhere"
    admitted = remote(dsn, "admit", input=json.dumps({"runId": "r", "answer": "The deploy moved to Mondays."}))
    searched = remote(dsn, "search", "anything")
    failed = json.loads(admitted.stdout)  # the AdmissionResult shape a host turns into its warning
    assert (failed["status"], failed["reason"]) == ("failed", "index_server_unavailable")
    for done in (admitted, searched):
        assert done.returncode == 1
        assert SECRET not in done.stdout + done.stderr and "Traceback" not in done.stderr
        assert "unreachable" in done.stdout + done.stderr


def test_remote_mcp_serves_recall_journal_and_remember(home):  # noqa: F811
    root, _owner, dsn = home
    params = StdioServerParameters(
        command=MEMVAULT,
        args=["--remote", NAME, "mcp"],
        cwd="/",
        env={"PYTHONUNBUFFERED": "1", "MEMVAULT_INDEX_DSN": dsn, "PYTHONPATH": str(REPO)},
    )
    out = {}

    async def main():
        async with Client(params, read_timeout_seconds=120) as client:
            out["tools"] = [tool.name for tool in (await client.list_tools()).tools]
            out["remember"] = await client.call_tool("Remember", {"text": "The design review is on Wednesdays."})
            out["recall"] = await client.call_tool("MemoryRecall", {"query": "when is the design review?"})
            out["bad"] = await client.call_tool("MemoryRecall", {"query": ""})
            today = datetime.now(UTC).date().isoformat()
            out["journal"] = await client.call_tool(
                "MemoryJournal", {"fromDate": today, "throughDate": today, "timeZone": "UTC"}
            )

    anyio.run(main)
    assert out["tools"] == ["MemoryRecall", "MemoryJournal", "Remember"]
    receipt = out["remember"].structured_content
    assert not out["remember"].is_error and receipt["status"] == "added"
    assert out["recall"].structured_content["hits"][0]["id"] == receipt["id"]
    assert out["bad"].is_error and out["bad"].structured_content["error"]["code"] == "invalid_arguments"
    assert not out["journal"].is_error
    wait_for(lambda: receipt["id"] in files_text(root), what="the owner's daily note")
