"""Layered capacity maintenance over loopback chat servers (Ollama and OpenAI wire formats).

Every invalid compactor or planner answer must leave runtime/ byte-identical (and, for archival,
write nothing to any memory space)."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memvault.indexer.runtime.service import RuntimeService
from memvault.indexer.services.chat import HttpChatModel
from memvault.vault.config import load_config
from memvault.vault.errors import Conflict, CredentialRefused, InvalidRecord, ProviderUnavailable
from memvault.vault.runtime import CapacityExceeded, RuntimeMemory
from memvault.vault.runtime.activity import Switches
from tests.loopback import LoopbackServer, Reply

USER_FACTS = [f"User fact number {i} about preferences." for i in range(6)]  # 38 bytes each


class Clock:
    def __init__(self):
        self.now = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def __call__(self):
        self.now += timedelta(seconds=1)
        return self.now


def make_service(root: Path, chat=None, strategy="layered") -> RuntimeService:
    (root / "memvault.json").write_text(
        json.dumps({"memory": {"mode": "lite", "timeZone": "UTC", "runtime": {"userLimit": 256, "memoryLimit": 512}}})
    )
    return RuntimeService(root, load_config(root, {}), chat=chat, switches=Switches(strategy=strategy), clock=Clock())


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "runtime").iterdir()) if p.is_file()}


def space_notes(root: Path) -> dict[str, list[str]]:
    found = {}
    for daily in sorted((root / "spaces").glob("*/daily/*.md")):
        found.setdefault(daily.parent.parent.name, []).extend(
            line for line in daily.read_text().splitlines() if line.startswith("- ")
        )
    return found


@pytest.fixture(params=["ollama", "openai"])
def chat_server(request):
    """(server, model, reply): `reply(text)` scripts the next completions in this wire format."""
    provider = request.param
    path = "/api/chat" if provider == "ollama" else "/v1/chat/completions"
    with LoopbackServer() as server:
        model = HttpChatModel(provider, server.url, "m", timeout_ms=5000)

        def reply(text_or_handler):
            def handler(body):
                text = text_or_handler(body) if callable(text_or_handler) else text_or_handler
                if isinstance(text, Reply):
                    return text
                if provider == "ollama":
                    return 200, {"message": {"role": "assistant", "content": text}, "done": True}
                return 200, {"choices": [{"message": {"role": "assistant", "content": text}}]}

            server.route(path, handler)

        yield server, model, reply, path


def full_user(root, chat):
    service = make_service(root, chat)
    for index, fact in enumerate(USER_FACTS):
        service.add("USER", fact, importance=2 + index % 3)
    service.add("MEMORY", "Working rule that must never reach the compactor.")
    return service


def plan(entries, revision=None):
    data = {"entries": [{"content": c, "importance": i, "sourceIndexes": s} for c, i, s in entries]}
    if revision is not None:
        data["revision"] = revision
    return json.dumps(data)


VALID = [
    ("User facts 0-2 about preferences.", 4, [0, 1, 2]),
    ("User facts 3-5 about preferences.", 4, [3, 4, 5]),
]


# --- USER compaction -------------------------------------------------------------------------


def test_a_valid_compaction_is_packed_and_the_pending_add_retried(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = full_user(new_vault, model)
    service.create_space("Work")  # a space exists, yet the user profile never goes to one
    reply(plan(VALID, revision=7))
    receipt = service.add("USER", "New durable fact about the user's timezone.", importance=3)
    assert (receipt.status, receipt.maintenance, receipt.revision) == ("added", "compacted", 8)
    user = service.show().state.of("USER")
    assert [(e.content, e.importance) for e in user] == [
        ("User facts 0-2 about preferences.", 4), ("User facts 3-5 about preferences.", 4),
        ("New durable fact about the user's timezone.", 3),
    ]  # fmt: skip
    assert receipt.used_bytes <= 256
    sent = json.dumps(server.requests_to(path)[0].json)
    assert "User fact number 5" in sent and "never reach the compactor" not in sent  # USER only
    assert service.show().files == {"USER": "current", "MEMORY": "current"}
    assert space_notes(new_vault) == {}


INVALID_PLANS = {
    "missing index": (plan([VALID[0], ("rest", 4, [3, 4])]), "index 5 is missing"),
    "duplicate index": (plan([VALID[0], ("rest", 4, [2, 3, 4, 5])]), "more than once"),
    "out of range": (plan([VALID[0], ("rest", 4, [3, 4, 5, 6])]), "out of range"),
    "negative index": (plan([VALID[0], ("rest", 4, [3, 4, 5, -1])]), "out of range"),
    "lowered importance": (plan([VALID[0], ("rest", 3, [3, 4, 5])]), "lowers importance"),
    "over budget": (plan([("x" * 150, 4, [0, 1, 2]), ("y" * 100, 4, [3, 4, 5])]), "do not fit"),
    "stale revision": (plan(VALID, revision=3), "revision 3"),
    "not json": ("I compacted it for you!", "not one JSON object"),
    "json array": ("[]", "not a JSON object"),
    "no entries": ('{"entries": []}', "non-empty list"),
    "extra key": (
        json.dumps({"entries": [{"content": "a", "importance": 4, "sourceIndexes": [0], "note": 1}]}),
        "exactly",
    ),
    "bool importance": (plan([("a", True, [0, 1, 2]), ("b", 4, [3, 4, 5])]), "importance"),
    "same content twice": (plan([("same", 4, [0, 1, 2]), ("same", 4, [3, 4, 5])]), "same content"),
    "multi-line content": (plan([("a\x07b", 4, [0, 1, 2]), ("c", 4, [3, 4, 5])]), "control characters"),
}


@pytest.mark.parametrize("chat_server", ["ollama"], indirect=True)  # plan checks are wire-format independent
@pytest.mark.parametrize("name", sorted(INVALID_PLANS))
def test_every_invalid_compaction_preserves_the_original(new_vault, chat_server, name):
    server, model, reply, path = chat_server
    service = full_user(new_vault, model)
    before = snapshot(new_vault)
    text, problem = INVALID_PLANS[name]
    reply(text)
    with pytest.raises((InvalidRecord, Conflict)) as caught:
        service.add("USER", "New durable fact about the user's timezone.")
    assert problem in str(caught.value)
    assert snapshot(new_vault) == before


def test_a_credential_in_the_compacted_text_is_refused(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = full_user(new_vault, model)
    before = snapshot(new_vault)
    reply(plan([("token: ghp_abcdefghijklmnopqrstuvwxyz0123456789", 4, [0, 1, 2]), VALID[1]]))
    with pytest.raises(CredentialRefused):
        service.add("USER", "New durable fact about the user's timezone.")
    assert snapshot(new_vault) == before


def test_a_concurrent_write_during_compaction_is_a_conflict_that_keeps_the_original(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = full_user(new_vault, model)
    other = RuntimeMemory(new_vault, user_limit=256, memory_limit=512)

    def racing(_body):
        other.add("MEMORY", "Written by another process meanwhile.")
        return plan(VALID)

    reply(racing)
    with pytest.raises(Conflict, match="kept unchanged"):
        service.add("USER", "New durable fact about the user's timezone.")
    assert [e.content for e in service.show().state.of("USER")] == USER_FACTS
    assert "Written by another process meanwhile." in [e.content for e in service.show().state.of("MEMORY")]


def test_a_failing_or_missing_model_preserves_the_original(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = full_user(new_vault, model)
    before = snapshot(new_vault)
    reply(Reply(500, "model crashed"))
    with pytest.raises(ProviderUnavailable):
        service.add("USER", "New durable fact about the user's timezone.")
    assert snapshot(new_vault) == before
    without_model = make_service(new_vault, chat=None)
    with pytest.raises(CapacityExceeded, match="no chat model"):
        without_model.add("USER", "New durable fact about the user's timezone.")
    assert snapshot(new_vault) == before


def test_the_general_strategy_rejects_instead_of_maintaining(new_vault, chat_server):
    server, model, reply, path = chat_server
    full_user(new_vault, model)
    general = make_service(new_vault, model, strategy="general")
    for index in range(4):
        general.add("MEMORY", f"Memory rule {index} " + "x" * 80)
    before = snapshot(new_vault)
    with pytest.raises(CapacityExceeded, match="General strategy"):
        general.add("USER", "New durable fact about the user's timezone.")
    with pytest.raises(CapacityExceeded, match="General strategy"):
        general.add("MEMORY", "One rule too many " + "y" * 80)
    assert snapshot(new_vault) == before
    assert server.requests == []  # no model call at all


# --- MEMORY archival -------------------------------------------------------------------------


def full_memory(service):
    for index in range(8):
        service.add("MEMORY", f"Memory rule {index} " + "x" * 40, importance=5 if index in (1, 6) else 2)
    return [e.content for e in service.show().state.of("MEMORY")]


def test_without_any_space_the_left_out_entries_go_to_the_local_archive_without_a_model(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    original = full_memory(service)
    receipt = service.add("MEMORY", "A new important rule " + "z" * 100, importance=4)
    assert (receipt.status, receipt.maintenance) == ("added", "archived-locally")
    hot = [e.content for e in service.show().state.of("MEMORY")]
    archive = next((new_vault / "runtime/archived").iterdir()).read_text()
    archived = [line[2:] for line in archive.splitlines() if line.startswith("- ")]
    assert sorted(hot[:-1] + archived) == sorted(original)  # nothing lost, nothing rewritten
    assert original[1] in hot and original[6] in hot  # the important ones stay hot
    assert receipt.archived == len(archived) > 0 and receipt.used_bytes <= 512
    assert server.requests == []


def test_one_space_is_a_direct_route_with_each_write_verified(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    service.create_space("Work", "work memory")
    original = full_memory(service)
    receipt = service.add("MEMORY", "A new important rule " + "z" * 100, importance=4)
    assert receipt.maintenance == "archived-to-spaces" and server.requests == []
    hot = [e.content for e in service.show().state.of("MEMORY")]
    moved = sorted(set(original) - set(hot))
    assert len(moved) == receipt.archived > 0
    notes = space_notes(new_vault)["default"]
    assert all(any(text in line for line in notes) for text in moved)
    assert service.spaces.get("default").last_write is not None
    found = service.recall("Memory rule " + moved[0].split()[2])
    assert any(hit.text == moved[0] for hit in found.hits)


def test_several_spaces_follow_the_planners_routes(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    first = service.create_space("Work", "work")
    second = service.create_space("Infra", "infrastructure")
    service.create_space("Dormant", "inactive spaces are not destinations", active=False)
    original = full_memory(service)

    def routes(body):
        request = json.loads(body["messages"][1]["content"])
        assert sorted(s["id"] for s in request["spaces"]) == sorted([first.id, second.id])
        return json.dumps({"routes": [{"sourceIndex": e["sourceIndex"],
                                       "space": second.id if e["sourceIndex"] % 2 else first.id}
                                      for e in request["entries"]]})  # fmt: skip

    reply(routes)
    receipt = service.add("MEMORY", "A new important rule " + "z" * 100, importance=4)
    assert receipt.maintenance == "archived-to-spaces"
    notes = space_notes(new_vault)
    moved = [(i, t) for i, t in enumerate(original) if t not in [e.content for e in service.show().state.of("MEMORY")]]
    for index, text in moved:
        expected = second.id if index % 2 else first.id
        assert any(text in line for line in notes[expected])


INVALID_ROUTES = {
    "missing index": lambda entries, a, b: [{"sourceIndex": e["sourceIndex"], "space": a} for e in entries[1:]],
    "unknown space": lambda entries, a, b: [{"sourceIndex": e["sourceIndex"], "space": "s-00000000"} for e in entries],
    "duplicate": lambda entries, a, b: [{"sourceIndex": e["sourceIndex"], "space": a} for e in entries + entries[:1]],
    "create a space": lambda entries, a, b: [{"sourceIndex": e["sourceIndex"], "space": "new"} for e in entries],
}


@pytest.mark.parametrize("chat_server", ["openai"], indirect=True)
@pytest.mark.parametrize("name", sorted(INVALID_ROUTES))
def test_an_invalid_route_plan_writes_nothing_anywhere(new_vault, chat_server, name):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    a, b = service.create_space("Work").id, service.create_space("Infra").id
    full_memory(service)
    before = snapshot(new_vault)

    def routes(body):
        entries = json.loads(body["messages"][1]["content"])["entries"]
        return json.dumps({"routes": INVALID_ROUTES[name](entries, a, b)})

    reply(routes)
    with pytest.raises(InvalidRecord, match="planner"):
        service.add("MEMORY", "A new important rule " + "z" * 100)
    assert snapshot(new_vault) == before
    assert space_notes(new_vault) == {}


def test_a_stale_revision_before_the_space_writes_writes_nothing(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    a, _b = service.create_space("Work").id, service.create_space("Infra").id
    full_memory(service)
    other = RuntimeMemory(new_vault, user_limit=256, memory_limit=512)

    def racing(body):
        other.add("USER", "Changed meanwhile.")
        entries = json.loads(body["messages"][1]["content"])["entries"]
        return json.dumps({"routes": [{"sourceIndex": e["sourceIndex"], "space": a} for e in entries]})

    reply(racing)
    with pytest.raises(Conflict):
        service.add("MEMORY", "A new important rule " + "z" * 100)
    assert space_notes(new_vault) == {}


def test_a_failing_planner_falls_back_to_the_first_destination(new_vault, chat_server):
    server, model, reply, path = chat_server
    service = make_service(new_vault, model)
    service.create_space("Work")
    service.create_space("Infra")
    full_memory(service)
    reply(Reply(503, "overloaded"))
    receipt = service.add("MEMORY", "A new important rule " + "z" * 100)
    assert receipt.maintenance == "archived-to-spaces"
    assert set(space_notes(new_vault)) == {"default"}
