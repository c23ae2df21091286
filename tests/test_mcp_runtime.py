"""The runtime layer over MCP: a real `memvault mcp` subprocess driven by the SDK's own stdio client.

Every limit below is written as the spec's literal number (spec/001, "Agent Recall" and the
Document search bound), never read back from the module under test.
"""

import json
import warnings

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from memvault.indexer.runtime.service import RuntimeService
from memvault.vault.config import load_config
from tests.test_mcp import ALL_TOOLS, MEMVAULT, backend_vault, body_of, params, run_all, tool_names

WAKE, PROTOCOL = "memvault://wake", "memvault://protocol"
FILLER = "the field team logged this observation carefully with dates places and names for later review "


def turn(turn_id: str) -> dict:
    return {"memvault/turnId": turn_id}


def bullets(word: str, count: int, size: int) -> str:
    lines = []
    for i in range(count):
        text = f"{word.capitalize()} record {i} {word} " + (FILLER * 40)
        lines.append(f"- 09:{i:02d} {text[:size].strip()} ^m-{word}-{i}")
    return "# 2026-09-01\n\n" + "\n".join(lines) + "\n"


def runtime_vault(tmp_path, name="v", memory=None, tools=None):
    """A vault with two active spaces (long 'zebra' records, short 'okapi' ones), 16 inactive
    spaces, and documents: 3 long 'runbook' ones and 6 short 'checklist' ones."""
    vault = backend_vault(tmp_path, name, memory, tools)
    service = RuntimeService(vault, load_config(vault, {}))
    zebra, okapi = service.create_space("Wildlife A"), service.create_space("Wildlife B")
    for space, text in ((zebra, bullets("zebra", 8, 1500)), (okapi, bullets("okapi", 8, 300))):
        (service.spaces.path_of(space.id) / "daily" / "2026-09-01.md").write_text(text)
    for i in range(16):
        service.create_space(f"Archive {i:02d}", active=False)
    for i in range(3):
        service.create_document(f"Runbook {i}", f"Runbook {i}. " + FILLER * 60)
    for i in range(6):
        service.create_document(f"Checklist {i}", f"Checklist {i}: " + FILLER * 10)
    return vault, (zebra.id, okapi.id)


@pytest.mark.both_backends
def test_space_recall_envelope_refinement_replay_and_turns(tmp_path):
    vault, (zebra, okapi) = runtime_vault(tmp_path)

    async def session(client):
        out = {}
        call = client.call_tool
        only_zebra = {"memoryBodyIds": [zebra]}
        out["initial"] = body_of(await call("SpaceRecall", {"query": "zebra record observation"} | only_zebra,
                                            meta=turn("a")))  # fmt: skip
        out["repeat"] = body_of(await call("SpaceRecall", {"query": "Zebra record observation?"} | only_zebra,
                                           meta=turn("a")))  # fmt: skip
        out["refine"] = body_of(await call("SpaceRecall", {"query": "zebra field team dates places"} | only_zebra,
                                           meta=turn("a")))  # fmt: skip
        out["third"] = body_of(await call("SpaceRecall", {"query": "lions in the savanna"}, meta=turn("a")))
        out["narrow"] = body_of(await call("SpaceRecall", {"query": "lions in the savanna", "memoryBodyIds": [okapi]},
                                           meta=turn("a")))  # fmt: skip
        origin = out["initial"]["evidence"][0]
        related = {"memoryBodyId": origin["memoryBodyId"], "id": origin["id"]}
        out["related"] = body_of(await call("SpaceRelated", related, meta=turn("a")))
        out["related again"] = body_of(await call("SpaceRelated", related, meta=turn("a")))
        out["not admitted"] = await call("SpaceRelated", {"memoryBodyId": okapi, "id": "m-okapi-1"}, meta=turn("a"))
        out["other turn related"] = await call("SpaceRelated", related, meta=turn("b"))
        out["short"] = body_of(await call("SpaceRecall", {"query": "okapi record", "memoryBodyIds": [okapi]},
                                          meta=turn("b")))  # fmt: skip
        out["short refine"] = body_of(await call("SpaceRecall",
                                                 {"query": "okapi field team dates", "memoryBodyIds": [okapi]},
                                                 meta=turn("b")))  # fmt: skip
        parallel = []

        async def one(query):
            parallel.append(body_of(await call("SpaceRecall", {"query": query}, meta=turn("c"))))

        async with anyio.create_task_group() as group:  # parallel calls of one turn share its budget
            for query in ("zebra one", "okapi two", "field three", "team four", "dates five"):
                group.start_soon(one, query)
        out["parallel"] = parallel
        out["next turn"] = body_of(await call("SpaceRecall", {"query": "zebra one"}, meta=turn("d")))
        out["implicit"] = body_of(await call("SpaceRecall", {"query": "zebra record"}))
        out["implicit again"] = body_of(await call("SpaceRecall", {"query": "okapi habitat"}))
        out["implicit third"] = body_of(await call("SpaceRecall", {"query": "giraffe necks"}))
        await client.read_resource(WAKE)  # a host reading the Wake begins its next turn
        out["implicit next"] = body_of(await call("SpaceRecall", {"query": "giraffe necks"}))
        out["bad turn"] = await call("SpaceRecall", {"query": "x"}, meta={"memvault/turnId": 5})
        out["spaces"] = body_of(await call("SpaceList", {}))
        hostile = [("SpaceRecall", {"query": "x" * 5000}), ("SpaceRecall", {"query": "x", "memoryBodyIds": "default"}),
                   ("SpaceRecall", {"query": "x", "memoryBodyIds": [1, 2]}), ("SpaceRecall", {"query": "  "}),
                   ("SpaceRecall", {"query": "x", "mode": "all"}), ("SpaceRelated", {"memoryBodyId": zebra}),
                   ("SpaceList", {"all": True}), ("DocumentSearch", {"query": ["a"]})]  # fmt: skip
        out["hostile"] = [await call(name, args, meta=turn("e")) for name, args in hostile]
        out["after hostile"] = body_of(await call("SpaceRecall", {"query": "zebra"}, meta=turn("e")))
        return out

    out = run_all({"v": (vault, session)})["v"]
    initial = out["initial"]
    assert (initial["attempt"], initial["status"], initial["closed"]) == ("initial", "searched", False)
    assert initial["usedCharacters"] <= 3600 and initial["usedResults"] <= 4
    assert all(len(e["text"]) <= 1200 for e in initial["evidence"])
    assert [len(e["text"]) for e in initial["evidence"]] == [1200, 1200, 1200]  # 3 x 1,200 = 3,600
    assert initial["usedCharacters"] == 3600 and initial["degraded"] == []
    assert out["repeat"]["status"] == "replayed" and out["repeat"]["evidence"] == initial["evidence"]
    refine = out["refine"]
    assert (refine["attempt"], refine["status"], refine["closed"]) == ("refinement", "searched", True)
    assert (refine["usedResults"], refine["usedCharacters"]) == (4, 4800)  # the turn's 4,800 in total
    first_ids = {(e["memoryBodyId"], e["id"]) for e in initial["evidence"]}
    assert not first_ids & {(e["memoryBodyId"], e["id"]) for e in refine["evidence"]}  # deduplicated
    assert out["third"]["status"] == "replayed-latest" and out["third"]["evidence"] == refine["evidence"]
    assert out["narrow"]["evidence"] == []  # replays keep to the requested spaces
    assert out["related"]["status"] == "searched" and out["related"]["from"]["id"] == initial["evidence"][0]["id"]
    related_ids = {(e["memoryBodyId"], e["id"]) for e in out["related"]["evidence"]}
    assert related_ids and not related_ids & first_ids and len(related_ids) <= 4
    assert out["related"]["usedCharacters"] <= 3600
    assert (
        out["related again"]["status"] == "replayed" and out["related again"]["evidence"] == out["related"]["evidence"]
    )
    for key in ("not admitted", "other turn related"):  # Related starts only from this turn's admitted records
        assert out[key].is_error and body_of(out[key])["error"]["code"] == "invalid_arguments"
    short, short_refine = out["short"], out["short refine"]
    assert short["usedResults"] == 4 and {e["memoryBodyId"] for e in short["evidence"]} == {okapi}  # 4 initial
    assert short_refine["usedResults"] == 6 and len(short_refine["evidence"]) == 2  # 6 results per turn
    statuses = sorted(answer["status"] for answer in out["parallel"])
    assert statuses.count("searched") == 2 and len(statuses) == 5  # one initial + one refinement, then replays
    assert set(statuses) - {"searched"} <= {"replayed", "replayed-latest"}
    assert out["next turn"]["status"] == "searched" and out["next turn"]["attempt"] == "initial"
    assert [out[k]["status"] for k in ("implicit", "implicit again", "implicit third")] == [
        "searched", "searched", "replayed-latest"]  # fmt: skip
    assert (out["implicit next"]["attempt"], out["implicit next"]["status"]) == ("initial", "searched")
    assert out["bad turn"].is_error and body_of(out["bad turn"])["error"]["code"] == "invalid_turn"
    assert all(r.is_error and body_of(r)["error"]["code"] == "invalid_arguments" for r in out["hostile"])
    assert out["after hostile"]["status"] == "searched"  # refused calls spend no budget
    spaces = out["spaces"]["spaces"]
    assert len(spaces) == 16 and [s["id"] for s in spaces[:2]] == [zebra, okapi]  # capped at 16, active first
    assert all(set(s) == {"id", "title", "description", "active"} for s in spaces)


@pytest.mark.both_backends
def test_documents_runtime_memory_and_status(tmp_path):
    vault, _ = runtime_vault(tmp_path, memory={"runtime": {"memoryLimit": 256}})

    async def session(client):
        call, out = client.call_tool, {}
        out["long"] = body_of(await call("DocumentSearch", {"query": "runbook"}, meta=turn("a")))
        out["again"] = body_of(await call("DocumentSearch", {"query": "checklist"}, meta=turn("a")))
        out["short"] = body_of(await call("DocumentSearch", {"query": "checklist"}, meta=turn("b")))
        out["create"] = body_of(await call("DocumentCreate", {"title": "Deploy window", "body": "Tuesdays 14:00 UTC.",
                                                              "summary": "When we ship"}))  # fmt: skip
        out["add"] = body_of(await call("RuntimeMemory", {"action": "add", "target": "USER",
                                                          "content": "Prefers metric units."}))  # fmt: skip
        out["dup"] = body_of(await call("RuntimeMemory", {"action": "add", "target": "USER",
                                                          "content": "Prefers metric units."}))  # fmt: skip
        out["replace"] = body_of(
            await call(
                "RuntimeMemory",
                {"action": "replace", "target": "USER", "oldText": "metric", "content": "Prefers SI units."},
            )
        )
        out["remove"] = body_of(await call("RuntimeMemory", {"action": "remove", "target": "USER", "oldText": "SI"}))
        for i in range(6):  # MEMORY's 256-byte limit overflows: the least important entries go to a space
            out[f"memory {i}"] = body_of(
                await call(
                    "RuntimeMemory",
                    {
                        "action": "add",
                        "target": "MEMORY",
                        "importance": 1 + i % 5,
                        "content": f"Working rule {i}: always double check the deployment checklist before shipping.",
                    },
                )
            )
        bad = [
            {"action": "add", "target": "USER"},
            {"action": "nope", "target": "USER", "content": "x"},
            {"action": "add", "target": "OTHER", "content": "x"},
            {"action": "remove", "target": "USER"},
            {"action": "add", "target": "USER", "content": "x", "importance": 9},
            {"action": "add", "target": "USER", "content": "api key sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"},
            {"action": "remove", "target": "USER", "oldText": "nothing like this"},
        ]
        out["bad"] = [await call("RuntimeMemory", args) for args in bad]
        out["bad docs"] = [
            await call("DocumentCreate", {"title": "", "body": "x"}),
            await call("DocumentCreate", {"title": "t", "body": "y" * 20_000}),
            await call("DocumentSearch", {"query": 7}),
            await call("MemoryStatus", {"x": 1}),
        ]
        out["status"] = await call("MemoryStatus", {}, meta=turn("a"))
        return out

    out = run_all({"v": (vault, session)})["v"]
    long = out["long"]
    assert [len(r["excerpt"]) for r in long["records"]] == [2600, 2600, 800]  # 2,600 each, 6,000 in total
    assert long["usedCharacters"] == 6000 and long["status"] == "searched"
    assert out["again"]["status"] == "replayed" and out["again"]["records"] == long["records"]  # one slot a turn
    short = out["short"]
    assert len(short["records"]) == 4 and all(len(r["excerpt"]) < 2600 for r in short["records"])  # 4 records
    assert out["create"]["status"] == "created" and out["create"]["id"] == "deploy-window"
    assert (vault / "documents" / "deploy-window.md").read_text().count("Tuesdays 14:00 UTC.") == 1
    assert (out["add"]["status"], out["dup"]["status"]) == ("added", "duplicate")
    assert (out["replace"]["status"], out["remove"]["status"]) == ("replaced", "removed")
    assert set(out["add"]) == {"status", "target", "revision", "usedBytes", "limitBytes", "entries", "maintenance",
                               "archived", "adopted"}  # a compact receipt  # fmt: skip
    archived = [out[f"memory {i}"] for i in range(6) if out[f"memory {i}"]["maintenance"]]
    assert archived and archived[0]["maintenance"] == "archived-to-spaces" and archived[0]["limitBytes"] == 256
    assert all(out[f"memory {i}"]["usedBytes"] <= 256 for i in range(6))
    codes = [body_of(result)["error"]["code"] for result in out["bad"]]
    assert all(result.is_error for result in out["bad"] + out["bad docs"])
    assert codes[:5] == ["invalid_arguments"] * 5 and codes[5] == "credential_refused"
    assert "sk-proj" not in (vault / "runtime" / "USER.md").read_text()
    assert body_of(out["bad"][6])["error"]["message"]  # no match: the message says so
    status_text = out["status"].content[0].text
    status = json.loads(status_text)
    assert status["runtime"]["USER"]["limitBytes"] == 4096 and status["runtime"]["MEMORY"]["limitBytes"] == 256
    assert status["documents"]["active"] == 10 and status["spaces"] == {"listed": 18, "active": 2}
    assert status["writeEnabled"] is True and status["turn"] == {"recallQueries": 0, "closed": False}
    assert str(vault) not in status_text and "endpoint" not in status_text and "/" not in status_text


@pytest.mark.both_backends
def test_write_enabled_false_removes_the_write_tools_and_host_tools_are_named(tmp_path):
    read_only, _ = runtime_vault(tmp_path, "ro", memory={"runtime": {"writeEnabled": False}})
    host = backend_vault(tmp_path, "host", tools={"hostTools": {"runHistory": "HostRuns", "sessionHistory": "HostLog"}})

    async def session(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        write = await client.call_tool("RuntimeMemory", {"action": "add", "target": "USER", "content": "x y z"})
        remember = await client.call_tool("Remember", {"text": "A fact."})
        recall = await client.call_tool("SpaceRecall", {"query": "zebra"})
        return list(tools), write, remember, recall

    async def described(client):
        tools = {t.name: t.description for t in (await client.list_tools()).tools}
        resume = body_of(await client.call_tool("MemoryRecall", {"query": "continue where you left off"}))
        return tools, resume

    results = run_all({"ro": (read_only, session), "host": (host, described)})
    names, write, remember, recall = results["ro"]
    assert names == [n for n in ALL_TOOLS if n not in ("Remember", "RuntimeMemory", "DocumentCreate")]
    for result in (write, remember):
        assert result.is_error and body_of(result)["error"]["code"] == "unknown_tool"
    assert not recall.is_error  # reads keep working
    assert (
        not (read_only / "runtime" / "USER.md").exists()
        or "x y z" not in (read_only / "runtime" / "USER.md").read_text()
    )
    descriptions, resume = results["host"]
    assert "call HostRuns {} first" in descriptions["MemoryRecall"]
    assert "use HostRuns or HostLog" in descriptions["MemoryJournal"]
    assert "HostRuns {}" in resume["guidance"]


@pytest.mark.both_backends
def test_wake_and_protocol_resources_and_updated_notifications(tmp_path):
    vault = backend_vault(tmp_path, "v")

    async def modern(client):
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        protocol = (await client.read_resource(PROTOCOL)).contents[0].text
        before = (await client.read_resource(WAKE)).contents[0]
        events = []
        async with client.listen(resource_subscriptions=[WAKE]) as subscription:
            add = {"action": "add", "target": "USER", "content": "Prefers metric units."}
            await client.call_tool("RuntimeMemory", add)
            with anyio.fail_after(60):
                async for event in subscription:
                    events.append(event)
                    break
        after = (await client.read_resource(WAKE)).contents[0]
        protocol_after = (await client.read_resource(PROTOCOL)).contents[0].text
        prompt = await client.get_prompt("memvault-protocol")
        try:
            await client.read_resource("memvault://nope")
            missing = None
        except MCPError as exc:
            missing = str(exc)
        return listed, protocol, before, events, after, protocol_after, prompt, missing

    async def legacy():
        received = []

        async def on_message(message):
            if getattr(getattr(message, "root", message), "method", None) == "notifications/resources/updated":
                received.append(message)

        async with Client(params(vault), read_timeout_seconds=120, mode="legacy", message_handler=on_message) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                await client.subscribe_resource(WAKE)
            await client.read_resource(WAKE)
            counts = []
            for args in ({"action": "add", "target": "MEMORY", "content": "Deploys need a ticket."},
                         {"action": "add", "target": "MEMORY", "content": "Deploys need a ticket."},  # duplicate
                         {"action": "remove", "target": "MEMORY", "oldText": "ticket"}):  # fmt: skip
                await client.call_tool("RuntimeMemory", args)
                await client.call_tool("MemoryStatus", {})  # a round trip: earlier notifications have arrived
                counts.append(len(received))
            # another process changes runtime memory: the next call of any tool notices and says so
            other = await anyio.run_process([MEMVAULT, "--vault", str(vault), "runtime", "add", "USER", "Uses vim."])
            assert other.returncode == 0
            await client.call_tool("MemoryStatus", {})
            await client.call_tool("SpaceList", {})
            counts.append(len(received))
            return counts

    listed, protocol, before, events, after, protocol_after, prompt, missing = run_all({"m": (vault, modern)})["m"]
    assert listed == [WAKE, PROTOCOL]
    assert [event.uri for event in events] == [WAKE]
    assert before.meta["memvault/revision"] == 0 and after.meta["memvault/revision"] == 1
    assert before.meta["memvault/digest"] != after.meta["memvault/digest"]
    assert "Prefers metric units." in after.text and "Prefers metric units." not in before.text
    assert "Runtime memory is always loaded" not in after.text  # the snapshot does not repeat the protocol
    assert protocol == protocol_after and "Runtime memory is always loaded" in protocol  # byte-identical
    assert prompt.messages[0].content.text == protocol
    assert missing and "memvault://wake" in missing
    assert anyio.run(legacy) == [1, 1, 2, 3]  # a duplicate add changes nothing, so no notification


@pytest.mark.both_backends
@pytest.mark.parametrize("routing", [True, False])
def test_routing_guidance_switch_removes_only_the_routing_section(tmp_path, routing):
    vault = backend_vault(tmp_path, "v", memory={"runtime": {"routingGuidance": routing}})

    async def read(client):
        return (await client.read_resource(PROTOCOL)).contents[0].text, await tool_names(client)

    text, names = run_all({"v": (vault, read)})["v"]
    assert "Runtime memory is always loaded" in text
    assert ("Recall long-term memory only when" in text) is routing
    assert names == ALL_TOOLS


@pytest.mark.both_backends
def test_a_full_user_target_is_compacted_by_the_configured_model(tmp_path):
    """Layered capacity maintenance over MCP: the server calls the chat model (a loopback Ollama)."""
    from tests.loopback import LoopbackServer

    def compactor(body):
        asked = json.loads(body["messages"][1]["content"])
        plan = {"revision": asked["revision"], "entries": [{
            "content": "Profile: likes tea, maps, trains and quiet mornings.",
            "importance": max(e["importance"] for e in asked["entries"]),
            "sourceIndexes": [e["index"] for e in asked["entries"]]}]}  # fmt: skip
        return 200, {"model": "m", "message": {"role": "assistant", "content": json.dumps(plan)}, "done": True}

    with LoopbackServer() as chat:
        chat.route("/api/chat", compactor)
        llm = {"provider": "ollama", "model": "m", "endpoint": chat.url, "timeoutMs": 60_000}
        vault = backend_vault(tmp_path, "v", memory={"runtime": {"userLimit": 256}, "llm": llm})

        async def session(client):
            receipts = []
            for topic in ("tea", "maps", "trains", "quiet mornings", "long walks"):
                result = await client.call_tool(
                    "RuntimeMemory",
                    {
                        "action": "add",
                        "target": "USER",
                        "content": f"The user says they really like {topic}, and mentioned it more than once.",
                    },
                )
                receipts.append(body_of(result))
            return receipts

        receipts = run_all({"v": (vault, session)})["v"]
        asked = [request.json for request in chat.requests_to("/api/chat")]
    # three 68-70-byte entries fit in 256 bytes; the fourth does not, so USER is compacted then
    assert [r["maintenance"] for r in receipts] == [None, None, None, "compacted", None]
    assert receipts[3]["status"] == "added" and receipts[3]["entries"] == 2  # the profile + the pending add
    assert all(r["usedBytes"] <= 256 for r in receipts) and receipts[4]["entries"] == 3
    assert len(asked) == 1 and asked[0]["model"] == "m"  # one compaction, no tools offered to it
    user_md = (vault / "runtime" / "USER.md").read_text()
    assert "Profile: likes tea" in user_md and "long walks" in user_md


@pytest.mark.both_backends
def test_a_damaged_space_catalog_gets_clear_answers_not_a_crash(tmp_path):
    vault, _ = runtime_vault(tmp_path)
    (vault / "spaces" / "spaces.json").write_text('{"spaces": [{"id": "default"')  # truncated by hand

    async def session(client):
        out = {"status": body_of(await client.call_tool("MemoryStatus", {}))}
        out["list"] = await client.call_tool("SpaceList", {})
        out["recall"] = await client.call_tool("SpaceRecall", {"query": "zebra"})
        out["add"] = body_of(
            await client.call_tool(
                "RuntimeMemory", {"action": "add", "target": "USER", "content": "Still writes runtime memory."}
            )
        )
        try:
            await client.read_resource(WAKE)
            out["wake"] = None
        except MCPError as exc:
            out["wake"] = str(exc)
        out["docs"] = body_of(await client.call_tool("DocumentSearch", {"query": "runbook"}))
        return out

    out = run_all({"v": (vault, session)})["v"]
    assert any("memory spaces" in line for line in out["status"]["degraded"])
    assert out["list"].is_error and "spaces.json" in body_of(out["list"])["error"]["message"]
    recall = body_of(out["recall"])  # an explicit degraded answer, never a silent empty one
    assert not out["recall"].is_error and recall["evidence"] == [] and "spaces.json" in recall["degraded"][0]
    assert out["add"]["status"] == "added"
    assert out["wake"] and "spaces.json" in out["wake"]
    assert len(out["docs"]["records"]) == 3
