"""A host turn's own loopback MCP endpoint (`HostSession.begin_turn(holds_slot=True)`).

The specification ("How it is provisioned"): an agent host gets a request-scoped loopback MCP
endpoint for MemoryRecall over the same open store as automatic recall; identical normalized
automatic and tool questions share one lookup per turn; the endpoint exists only once the turn
holds its concurrency slot; a start failure is a warning and no tool while automatic recall goes
on; a backend failure is an explicit degraded answer. Tested with the MCP SDK's own HTTP client
and `http.client`, against a real vault, its real index and real sockets.
"""

import http.client
import json
import socket
import threading

import anyio
import psutil
import pytest
from mcp import Client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

from memvault.indexer.runtime.host_session import HostSession
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from memvault.vault.layout import CONFIG_FILE
from tests import postgres_helpers
from tests.capture_helpers import EMBED_DIM, EMBED_PATH, hash_embeddings
from tests.engine_helpers import TIMEOUT, wait_for
from tests.loopback import LoopbackServer

FACTS = [
    "- 09:00 Morgan chose blue as the deployment color. ^m-blue\n",
    "- 10:00 The release train leaves on Thursdays. ^m-train\n",
    "- 11:00 Standup moved to 10:00 because of the new hires. ^m-standup\n",
]


@pytest.fixture
def vault(new_vault):
    (new_vault / "daily" / "2026-09-01.md").write_text("# 2026-09-01\n\n" + "".join(FACTS))
    return new_vault


def client(info) -> Client:
    transport = streamable_http_client(info.url, http_client=create_mcp_http_client(headers=info.headers))
    return Client(transport, read_timeout_seconds=120)


def over_mcp(info, calls: list[tuple[str, dict]]) -> dict:
    """The tools the endpoint lists and each call's (is_error, JSON body), through the SDK."""
    seen = {}

    async def main():
        async with client(info) as session:
            seen["tools"] = [tool.name for tool in (await session.list_tools()).tools]
            seen["answers"] = []
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                seen["answers"].append((result.is_error, json.loads(result.content[0].text)))

    anyio.run(main)
    return seen


def raw_post(port: int, headers: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("POST", "/mcp", body=b"{}", headers={"Content-Type": "application/json", **headers})
        return conn.getresponse().status
    finally:
        conn.close()


def listening_ports() -> set[int]:
    return {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.both_backends
def test_a_turn_serves_recall_and_journal_and_shares_one_lookup_with_automatic_recall(vault):
    with HostSession.open(vault, env={}) as session:
        start = session.begin_turn(holds_slot=True)
        assert start.endpoint is not None and start.warnings == ()
        assert start.endpoint.url.startswith("http://127.0.0.1:")
        injected = start.memory.auto("What deployment color did Morgan choose?")
        assert start.memory.lookups == 1
        seen = over_mcp(start.endpoint, [
            ("MemoryRecall", {"query": "  what DEPLOYMENT color did   Morgan choose? "}),  # the same, normalized
            ("MemoryRecall", {"query": "When does the release train leave?"}),  # another question
            ("MemoryJournal", {"fromDate": "2026-09-01", "throughDate": "2026-09-01", "timeZone": "Europe/Amsterdam"}),
            ("MemoryRecall", {"query": 7}),
            ("Remember", {"text": "not offered to a turn"}),
        ])  # fmt: skip
        assert seen["tools"] == ["MemoryRecall", "MemoryJournal"]
        (_, same), (_, other), (_, journal), (bad_error, bad), (unknown_error, unknown) = seen["answers"]
        assert start.memory.lookups == 2 and start.memory.shared == 1  # the repeated question searched nothing
        assert [hit["id"] for hit in same["hits"]][:1] == ["m-blue"] == [hit.id for hit in injected.hits][:1]
        assert other["hits"][0]["id"] == "m-train" and not other["degraded"]
        assert "release train" in json.dumps(journal)
        assert bad_error and bad["error"]["code"] == "invalid_arguments"
        assert unknown_error and unknown["error"]["code"] == "unknown_tool"
        session.end_turn(user_text="ok", assistant_text="ok")
        assert port_is_closed(int(start.endpoint.url.split(":")[2].split("/")[0]))


@pytest.mark.both_backends
def test_a_queued_turn_holds_no_listener_and_the_recall_tool_off_opens_none(vault):
    before = listening_ports()
    with HostSession.open(vault, env={}) as session:
        queued = session.begin_turn()  # waiting for its slot: no endpoint yet
        assert queued.endpoint is None and queued.warnings == ()
        assert listening_ports() == before
        assert queued.memory.tool("deployment color", 5).hits  # automatic recall needs no endpoint
    config = json.loads((vault / CONFIG_FILE).read_text())
    config["memory"]["recallTool"] = {"enabled": False}
    (vault / CONFIG_FILE).write_text(json.dumps(config))
    with HostSession.open(vault, env={}) as session:
        start = session.begin_turn(holds_slot=True)
        assert start.endpoint is None and start.warnings == ()  # nothing to serve, nothing to warn about
    assert listening_ports() == before


@pytest.mark.both_backends
def test_strangers_are_refused_by_a_turns_endpoint(vault):
    with HostSession.open(vault, env={}) as session:
        info = session.begin_turn(holds_slot=True).endpoint
        port = int(info.url.split(":")[2].split("/")[0])
        accept = {"Accept": "application/json, text/event-stream"}
        assert raw_post(port, accept) == 401
        assert raw_post(port, {**accept, "Authorization": "Bearer " + "z" * 43}) == 401
        assert raw_post(port, {**accept, **info.headers, "Host": f"rebound.example:{port}"}) == 400
        assert raw_post(port, {**accept, **info.headers, "Origin": "https://evil.example"}) == 403
        second = session.begin_turn(holds_slot=True).endpoint  # the next turn: a fresh token and port
        assert second.token != info.token
        assert port_is_closed(port)  # the turn the host never ended keeps no listener
        seen = over_mcp(second, [("MemoryRecall", {"query": "When does the release train leave?"})])
        assert seen["tools"] == ["MemoryRecall", "MemoryJournal"]
        assert seen["answers"][0][1]["hits"][0]["id"] == "m-train"  # and it serves its own caller the vault's index


@pytest.mark.both_backends
def test_fifty_turns_open_and_close_their_endpoints_and_leave_no_listener_behind(vault):
    before, threads = listening_ports(), threading.active_count()
    ports = []
    with HostSession.open(vault, env={}) as session:
        for turn in range(50):
            start = session.begin_turn(holds_slot=True)
            assert start.endpoint is not None, start.warnings
            port = int(start.endpoint.url.split(":")[2].split("/")[0])
            ports.append(port)
            if turn % 10 == 0:  # every tenth turn is used, the others only opened
                answer = over_mcp(start.endpoint, [("MemoryRecall", {"query": "release train"})])["answers"][0][1]
                assert answer["hits"][0]["id"] == "m-train"
            session.end_turn(user_text="thanks", assistant_text="done")
            assert port_is_closed(port)
    assert listening_ports() == before
    wait_for(lambda: threading.active_count() <= threads, what="the endpoints' threads to end")


@pytest.mark.both_backends
def test_an_endpoint_that_cannot_start_is_a_warning_and_automatic_recall_goes_on(vault):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        with HostSession.open(vault, env={}, endpoint_port=taken) as session:
            start = session.begin_turn(holds_slot=True)
            assert start.endpoint is None
            (warning,) = start.warnings
            assert f"127.0.0.1:{taken}" in warning and "MemoryRecall is left out of this turn" in warning
            assert [hit.id for hit in start.memory.tool("deployment color Morgan", 5).hits][:1] == ["m-blue"]


@pytest.mark.both_backends
def test_a_backend_failure_mid_turn_is_a_degraded_answer_with_no_hits(vault):
    with HostSession.open(vault, env={}) as session:
        start = session.begin_turn(holds_slot=True)
        assert start.memory.tool("deployment color", 5).hits  # the store is open and answering
        postgres_helpers.lose_the_index(vault)  # behind the open store's back: its folder, or its tables
        seen = over_mcp(start.endpoint, [("MemoryRecall", {"query": "When does the release train leave?"})])
        ((is_error, answer),) = seen["answers"]
        assert is_error is False  # an answer that says it is degraded, not a failed call
        assert answer["hits"] == [] and answer["degraded"], answer
        assert "Traceback" not in answer["degraded"]
        assert start.memory.auto("standup").degraded  # automatic recall says so too, and does not raise


@pytest.mark.both_backends
def test_the_shared_lookup_is_one_embedding_request_at_the_provider(tmp_path):
    """Counted where it costs: the embedding provider (a loopback Ollama /api/embed server) sees
    one request for a question asked by automatic recall and then by the tool, whatever its case
    and spacing, and one more for a different question."""
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        data = default_config_data(mode="journal", time_zone="Europe/Amsterdam")
        data["memory"]["embeddings"] = {"provider": "ollama", "model": "hash-embed", "dim": EMBED_DIM,
                                        "endpoint": server.url}  # fmt: skip
        root = tmp_path / "v"
        init_vault(root, render_config(data))
        postgres_helpers.on_test_backend(root)
        (root / "daily" / "2026-09-01.md").write_text("# 2026-09-01\n\n" + "".join(FACTS))

        def asked(words: str) -> int:
            return sum(1 for r in server.requests if r.path == EMBED_PATH and any(
                text.lower().startswith(words) for text in r.json["input"]))  # fmt: skip

        with HostSession.open(root, env={}) as session:
            start = session.begin_turn(holds_slot=True)
            start.memory.auto("Which deployment color did Morgan choose?")
            assert asked("which deployment color") == 1
            over_mcp(start.endpoint, [
                ("MemoryRecall", {"query": "which  DEPLOYMENT color did Morgan choose?"}),
                ("MemoryRecall", {"query": "When does the release train leave?"}),
            ])  # fmt: skip
            assert asked("which deployment color") == 1
            assert asked("when does the release train") == 1
            session.end_turn(user_text="ok", assistant_text="ok")
            nxt = session.begin_turn(holds_slot=True)  # a new turn looks up again
            nxt.memory.auto("Which deployment color did Morgan choose?")
            assert asked("which deployment color") == 2
