"""`memvault mcp` as an MCP client sees it: a real subprocess driven by the SDK's own stdio client.

Servers are launched concurrently where a test needs several (each pays the SDK's import once).
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from memvault.cli import mcp_tools
from memvault.cli.mcp_runtime import READ_TOOLS, WRITE_TOOLS
from memvault.cli.mcp_tools import JOURNAL, RECALL, REMEMBER, VaultSession
from memvault.vault.config import default_config_data, render_config
from memvault.vault.errors import VaultLocked
from memvault.vault.init import init_vault
from memvault.vault.locks import LivenessFence
from tests.postgres_helpers import libpq_variables, on_test_backend

MEMVAULT = str(Path(sys.executable).parent / "memvault")
AMS = "Europe/Amsterdam"
RUNTIME_TOOLS = [*READ_TOOLS, *WRITE_TOOLS]
ALL_TOOLS = [RECALL, JOURNAL, REMEMBER, *RUNTIME_TOOLS]


def make_vault(parent: Path, name: str, memory: dict | None = None, tools: dict | None = None) -> Path:
    data = default_config_data(mode="lite", time_zone=AMS)
    data["memory"].update(memory or {})
    data["tools"].update(tools or {})
    root = parent / name
    init_vault(root, render_config(data))
    daily = root / "daily" / "2026-09-01.md"
    daily.write_text(
        "# 2026-09-01\n\n- 09:00 Morgan chose blue as the deployment color. ^m-blue\n"
        "- 10:00 The release train leaves on Thursdays. ^m-train\n"
        "- 11:00 Standup moved to 10:00. ^m-standup\n"
    )
    return root


def backend_vault(parent: Path, name: str, memory: dict | None = None, tools: dict | None = None) -> Path:
    """`make_vault`'s vault on the test's index backend (a both_backends test's postgres run: on the server,
    under its own name, as a test's vaults share one database)."""
    return on_test_backend(make_vault(parent, name, memory, tools), name=name)


def params(vault: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=MEMVAULT,
        args=["--vault", str(vault), "mcp"],
        cwd=str(vault.parent),
        # the PG* variables a both_backends test's postgres run set: the server reaches its index there too
        env={"PYTHONUNBUFFERED": "1", **libpq_variables()},
    )


async def with_client(vault: Path, body):
    async with Client(params(vault), read_timeout_seconds=120) as client:
        return await body(client)


def run_all(jobs: dict) -> dict:
    """Run `{key: (vault, body)}` concurrently, each against its own server process."""
    results = {}

    async def one(key, vault, body):
        results[key] = await with_client(vault, body)

    async def main():
        async with anyio.create_task_group() as group:
            for key, (vault, body) in jobs.items():
                group.start_soon(one, key, vault, body)

    anyio.run(main)
    return results


async def tool_names(client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


def body_of(result) -> dict:
    payload = json.loads(result.content[0].text)
    assert payload == result.structured_content
    return payload


@pytest.mark.slow
@pytest.mark.both_backends
def test_tools_offered_under_each_policy(tmp_path):
    policies = {
        "default": ({}, {}, ALL_TOOLS),
        "recall off": ({"recallTool": {"enabled": False}}, {}, [REMEMBER, *RUNTIME_TOOLS]),
        "remember off": ({"rememberTool": {"enabled": False}}, {}, [RECALL, JOURNAL, *RUNTIME_TOOLS]),
        "writeEnabled false": ({"runtime": {"writeEnabled": False}}, {}, [RECALL, JOURNAL, *READ_TOOLS]),
        "allow SpaceRecall": (
            {},
            {"allowedTools": ["SpaceRecall", "RuntimeMemory"]},
            [RECALL, "SpaceRecall", "RuntimeMemory"],
        ),
        "empty allow-list": ({}, {"allowedTools": []}, [RECALL]),
        "allow Remember": ({}, {"allowedTools": ["Remember"]}, [RECALL, REMEMBER]),
        "allow MemoryJournal": ({}, {"allowedTools": ["MemoryJournal"]}, [RECALL, JOURNAL]),
        "deny wins": (
            {},
            {
                "allowedTools": ["MemoryRecall", "MemoryJournal", "Remember"],
                "deniedTools": ["MemoryRecall", "Remember"],
            },
            [JOURNAL],
        ),
    }
    jobs = {
        name: (backend_vault(tmp_path, f"v{i}", memory, tools), tool_names)
        for i, (name, (memory, tools, _)) in enumerate(policies.items())
    }
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "memvault.json").write_text('{"memory": {"mode": "nope"}}')
    jobs["invalid config"] = (broken, tool_names)
    listed = run_all(jobs)
    expected = {name: offered for name, (_, _, offered) in policies.items()} | {"invalid config": [RECALL]}
    assert listed == expected


@pytest.mark.both_backends
def test_each_tool_answers_and_malformed_arguments_are_tool_errors(tmp_path):
    from memvault.vault.archive_export import export_vault
    from memvault.vault.archive_import import restore_archive

    vault = backend_vault(tmp_path, "v")
    archive = tmp_path / "backup.tar.gz"
    export_vault(vault, archive)
    with open(vault / "daily" / "2026-09-01.md", "a") as note:  # the vault moves on after the backup
        note.write("- 12:00 Added after the backup. ^m-after\n")

    async def session(client):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        # no host tool is configured: the descriptions name none that this server does not offer
        assert not any("RunHistory" in t.description or "SessionHistory" in t.description for t in tools.values())
        assert "run history" in tools[RECALL].description and "conversation" in tools[RECALL].description
        assert "timeZone" in tools[JOURNAL].description and tools[JOURNAL].annotations.read_only_hint is True
        assert tools[REMEMBER].input_schema["additionalProperties"] is False
        out = {"fence held": LivenessFence(vault).is_held_elsewhere()}
        with pytest.raises(VaultLocked):  # import needs a stopped vault: the server owns this one
            restore_archive(vault, archive)
        out["recall"] = await client.call_tool(RECALL, {"query": "which deployment color did we choose?"})
        out["chat"] = await client.call_tool(RECALL, {"query": "What was your previous reply?"})
        out["added"] = await client.call_tool(REMEMBER, {"text": "The retro is on Fridays."})
        out["again"] = await client.call_tool(REMEMBER, {"text": "The retro is on Fridays."})
        out["recall new"] = await client.call_tool(RECALL, {"query": "when is the retro?", "limit": 3})
        first = await client.call_tool(
            JOURNAL, {"fromDate": "2026-09-01", "throughDate": "2026-09-01", "timeZone": AMS, "limit": 2}
        )
        out["journal"] = first
        cursor = body_of(first)["cursor"]
        out["override"] = await client.call_tool(JOURNAL, {"cursor": cursor, "limit": 5})
        out["next"] = await client.call_tool(JOURNAL, {"cursor": cursor})
        out["replay"] = await client.call_tool(JOURNAL, {"cursor": cursor})
        out["empty"] = await client.call_tool(
            JOURNAL, {"fromDate": "2026-08-01", "throughDate": "2026-08-02", "timeZone": "Pacific/Chatham"}
        )
        malformed = [
            (RECALL, {}),
            (RECALL, {"query": 5}),
            (RECALL, {"query": "x", "limit": 0}),
            (RECALL, {"query": "x", "limit": "5"}),
            (RECALL, {"query": "x", "mode": "auto"}),
            (RECALL, {"query": "x" * 5000}),
            (JOURNAL, {}),
            (JOURNAL, {"fromDate": "2026-13-01", "throughDate": "2026-13-02", "timeZone": AMS}),
            (JOURNAL, {"fromDate": "2026-09-01", "throughDate": "2026-09-01", "timeZone": "Not/AZone"}),
            (JOURNAL, {"fromDate": "2026-09-01", "throughDate": "2026-09-01"}),
            (JOURNAL, {"cursor": "mj1.forged"}),
            (JOURNAL, {"fromDate": "2026-09-01", "unknown": True}),
            (REMEMBER, {}),
            (REMEMBER, {"text": ""}),
            (REMEMBER, {"text": ["a"]}),
            (REMEMBER, {"text": "y" * 5000}),
            (REMEMBER, {"text": "db password postgres://admin:hunter2secret@db.internal/prod"}),
            ("Nope", {}),
        ]
        out["malformed"] = [(name, await client.call_tool(name, args)) for name, args in malformed]
        concurrent = []

        async def call(name, args):
            concurrent.append(await client.call_tool(name, args))

        async with anyio.create_task_group() as group:  # calls overlap on the wire; the server serialises them
            for n in range(6):
                group.start_soon(call, REMEMBER, {"text": f"Concurrent fact number {n} about the rollout."})
                group.start_soon(call, RECALL, {"query": "rollout"})
        out["concurrent"] = concurrent
        return out

    out = run_all({"v": (vault, session)})["v"]
    assert out["fence held"] is True  # the server owns the vault while it runs, so restore was refused
    hits = body_of(out["recall"])["hits"]
    assert hits[0]["source"] == "daily/2026-09-01.md#^m-blue" and "blue" in hits[0]["text"]
    chat = body_of(out["chat"])
    assert chat["hits"] == [] and "conversation" in chat["guidance"]
    assert body_of(out["added"])["status"] == "added" and body_of(out["again"])["status"] == "duplicate"
    assert "Fridays" in body_of(out["recall new"])["hits"][0]["text"]
    journal = body_of(out["journal"])
    assert [e["id"] for e in journal["entries"]] == ["m-blue", "m-train"] and journal["page"]["remaining"] == 2
    assert journal["range"]["utcStart"] == "2026-08-31T22:00:00Z"
    assert out["override"].is_error and body_of(out["override"])["error"]["code"] == "invalid_journal_request"
    assert [e["id"] for e in body_of(out["next"])["entries"]] == ["m-standup", "m-after"]
    assert body_of(out["next"])["cursor"] is None
    assert out["replay"].is_error and body_of(out["replay"])["error"]["code"] == "invalid_journal_cursor"
    assert body_of(out["empty"])["noData"] is True
    for name, result in out["malformed"]:
        assert result.is_error, (name, result.content[0].text)
        assert body_of(result)["error"]["message"]
    codes = [body_of(result)["error"]["code"] for _, result in out["malformed"]]
    assert codes[:6] == ["invalid_arguments"] * 6
    assert codes[6:12] == ["invalid_journal_request"] * 4 + ["invalid_journal_cursor", "invalid_journal_request"]
    assert codes[12:] == ["invalid_arguments"] * 4 + ["credential_refused", "unknown_tool"]
    assert not any(result.is_error for result in out["concurrent"])
    statuses = sorted(body_of(r)["status"] for r in out["concurrent"] if "status" in body_of(r))
    assert statuses == ["added"] * 6
    stored = "".join(p.read_text() for p in (vault / "daily").iterdir())
    assert all(stored.count(f"Concurrent fact number {n} about") == 1 for n in range(6))
    assert "^m-after" in (vault / "daily" / "2026-09-01.md").read_text()  # the refused restore changed nothing
    assert not any("hunter2" in p.read_text() for p in (vault / "daily").iterdir())
    assert not LivenessFence(vault).is_held_elsewhere()  # released when the client closed the server


@pytest.mark.both_backends
def test_a_broken_vault_gets_explicit_degraded_answers_not_a_crash(tmp_path):
    from tests import postgres_helpers

    invalid = tmp_path / "invalid"
    invalid.mkdir()
    (invalid / "memvault.json").write_text('{"memory": {"mode": "lite", "timeZone": "Nowhere/City"}}')
    missing = tmp_path / "no-such-vault"
    damaged = backend_vault(tmp_path, "damaged")
    if postgres_helpers.TEST_BACKEND == "local":  # its pointer names a generation that is not there
        (damaged / ".index").mkdir(exist_ok=True)
        (damaged / ".index" / "CURRENT").write_text("gen-999999\n")
    else:  # the server's pointer names a generation whose row is gone
        from memvault.indexer.engine.store import MemoryStore

        with MemoryStore.open(damaged) as store:
            store.rebuild()
            postgres_helpers.break_the_serving_index(store)

    async def ask_everything(client):
        names = await tool_names(client)
        answers = {}
        for name, args in ((RECALL, {"query": "deployment color"}),
                           (JOURNAL, {"fromDate": "2026-09-01", "throughDate": "2026-09-01", "timeZone": AMS}),
                           (REMEMBER, {"text": "A fact for a damaged vault."}),
                           (RECALL, {"query": "still answering?"})):  # fmt: skip
            if name in names:
                answers.setdefault(name, []).append(await client.call_tool(name, args))
        return names, answers

    results = run_all({"invalid": (invalid, ask_everything), "missing": (missing, ask_everything),
                       "damaged": (damaged, ask_everything)})  # fmt: skip
    for key in ("invalid", "missing"):
        names, answers = results[key]
        assert names == [RECALL]
        for answer in answers[RECALL]:
            body = body_of(answer)
            assert not answer.is_error and body["hits"] == [] and body["degraded"].startswith("memory is unavailable")
    assert "Nowhere/City" in body_of(results["invalid"][1][RECALL][0])["degraded"]
    names, answers = results["damaged"]
    assert names == ALL_TOOLS
    recall = body_of(answers[RECALL][0])
    assert recall["hits"] == [] and "rebuild" in recall["degraded"]
    assert answers[JOURNAL][0].is_error and body_of(answers[JOURNAL][0])["error"]["code"] == "journal_unavailable"
    assert answers[REMEMBER][0].is_error and body_of(answers[REMEMBER][0])["error"]["code"] == "index_unavailable"
    assert "rebuild" in body_of(answers[REMEMBER][1 - 1])["error"]["message"]
    assert body_of(answers[RECALL][1])["degraded"]  # and it is still serving after all that


@pytest.mark.both_backends
def test_session_policy_in_process(tmp_path):
    """The same policy without a subprocess: Remember also needs a writable vault."""
    vault = backend_vault(tmp_path, "v")
    session = VaultSession(str(vault), {}, tmp_path)
    session.prepare()
    try:
        assert session.offered_tools() == ALL_TOOLS
        session.writable = lambda: False  # what a read-only vault reports (tests run as root)
        assert session.offered_tools() == [RECALL, JOURNAL, *READ_TOOLS]
        assert session.call(REMEMBER, {"text": "x"}).payload["error"]["code"] == "unknown_tool"
        assert session.call(RECALL, ["not", "an", "object"]).is_error

        def bug(_session, _arguments):
            raise RuntimeError("a bug")

        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(mcp_tools._HANDLERS, RECALL, bug)
            crashed = session.call(RECALL, {"query": "x"})
        assert crashed.is_error and crashed.payload["error"]["code"] == "internal_error"
        assert session.call(RECALL, {"query": "deployment color"}).payload["hits"]  # still serving
    finally:
        session.close()
    assert not os.path.exists(vault / ".locks" / "live.json")


@pytest.mark.both_backends
def test_sigterm_releases_the_fence(tmp_path):
    vault = backend_vault(tmp_path, "v")
    server = subprocess.Popen(
        [MEMVAULT, "--vault", str(vault), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-11-25", "capabilities": {},
                            "clientInfo": {"name": "t", "version": "0"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):  # fmt: skip
            server.stdin.write(json.dumps(message) + "\n")
            server.stdin.flush()
        replies = [json.loads(server.stdout.readline()) for _ in range(2)]
        assert [tool["name"] for tool in replies[1]["result"]["tools"]] == ALL_TOOLS
        assert LivenessFence(vault).is_held_elsewhere()
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0  # stdin is still open: the signal alone ends it
    finally:
        server.kill()
    assert not LivenessFence(vault).is_held_elsewhere() and not (vault / ".locks" / "live.json").exists()
