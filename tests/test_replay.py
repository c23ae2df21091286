"""The replay sidecar: strict canonical file, bounds, exact health comparison, adopt-replay."""

import dataclasses
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.indexer.maintenance.replay_index import write_projection
from memvault.indexer.search.supersession import read_projection
from memvault.indexer.services.intake_worker import IntakeWorker
from memvault.vault.errors import Conflict, InvalidRecord, UnsafePath
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.replay import (
    MAX_ENTRIES,
    MAX_SIDECAR_BYTES,
    ReplayState,
    SidecarInvalid,
    parse_state,
    read_sidecar,
    render_state,
    sidecar_path,
    write_sidecar,
)
from tests.capture_helpers import (
    EMBED_PATH,
    OLLAMA_PATH,
    ChatScript,
    daily_text,
    extraction,
    hash_embeddings,
    make_capture_vault,
    memory,
)
from tests.intake_helpers import Clock, store_for
from tests.loopback import LoopbackServer
from tests.postgres_helpers import set_up_the_tests_backend

REPO = Path(__file__).resolve().parent.parent
HOLD_FENCE = "import sys; from pathlib import Path; from memvault.vault.locks import LivenessFence; " \
             "LivenessFence(Path(sys.argv[1])).hold(); print('held', flush=True); sys.stdin.read()"  # fmt: skip
AUTH = {"digest": "a" * 64, "kind": "capture"}
TS = "2026-11-30T13:03:00.000000Z"
CAPTURE = {"at": TS, "authority": AUTH, "facts": ["f-0000000001"], "kind": "capture", "run": "b" * 64}
LIFECYCLE = {
    "at": TS,
    "authority": AUTH,
    "by": "f-0000000001",
    "id": "m-0000000002",
    "kind": "lifecycle",
    "state": "superseded",
}
EDGE = {
    "authority": AUTH,
    "from": "f-0000000001",
    "kind": "edge",
    "to": "m-0000000002",
    "type": "supersedes",
    "weight": 1,
}


def state_of(*entries) -> ReplayState:
    state = ReplayState()
    state.merge(list(entries))
    return state


def test_canonical_bytes_round_trip_and_merge_is_idempotent():
    state = state_of(LIFECYCLE, EDGE, CAPTURE)
    data = render_state(state)
    assert data.startswith(b'{"entries":[{"at":') and data.endswith(b',"v":1}\n') and data.count(b"\n") == 1
    assert [e["kind"] for e in json.loads(data)["entries"]] == ["capture", "edge", "lifecycle"]
    assert parse_state(data, "x").entries == state.entries
    assert state.merge([CAPTURE, EDGE, LIFECYCLE]) == 0  # a replay adds nothing
    assert state.merge([{**LIFECYCLE, "by": "f-0000000009"}]) == 0  # first commit wins the lifecycle
    with pytest.raises(Conflict, match="other content"):
        state.merge([{**CAPTURE, "facts": ["f-0000000003"]}])


@pytest.mark.parametrize(
    ("mangle", "problem"),
    [
        (lambda d: d.replace(b'"v":1}', b'"v": 1}'), "canonical"),
        (lambda d: d.replace(b'{"entries"', b'{"v":1,"entries"').replace(b',"v":1}\n', b"}\n"), "canonical"),
        (
            lambda d: d.replace(b'"kind":"capture"', b'"kind":"capture","text":"Morgan chose blue"'),
            "exactly the fields",
        ),
        (lambda d: d.replace(b'"weight":1', b'"weight":1,"weight":1'), "duplicate key"),
        (lambda d: d.replace(b'"weight":1', b'"weight":0'), "weight"),
        (lambda d: d.replace(b'"state":"superseded"', b'"state":"forgotten"'), "state"),
        (lambda d: d.replace(b'"kind":"capture"}', b'"kind":"migration"}'), "kind"),
        (lambda d: d.replace(TS.encode(), b"yesterday", 1), "timestamp"),
        (lambda d: d[:-10], "not strict JSON"),
        (lambda d: b"\xef\xbb\xbf" + d, "not strict JSON"),
    ],
)
def test_anything_but_the_exact_canonical_rendering_is_refused(mangle, problem):
    data = render_state(state_of(CAPTURE, LIFECYCLE, EDGE))
    with pytest.raises(SidecarInvalid, match=problem):
        parse_state(mangle(data), "sidecar")


def test_bounds_are_enforced():
    too_many = b'{"entries":[' + b",".join([b"0"] * (MAX_ENTRIES + 1)) + b'],"v":1}\n'
    with pytest.raises(SidecarInvalid, match="at most 131072"):
        parse_state(too_many, "sidecar")
    with pytest.raises(SidecarInvalid, match="33554432"):
        parse_state(b" " * (MAX_SIDECAR_BYTES + 1), "sidecar")
    full = ReplayState({("capture", f"{i:064x}"): {} for i in range(MAX_ENTRIES)})
    with pytest.raises(InvalidRecord, match="131072 limit"):
        full.merge([CAPTURE])


def test_the_file_must_be_an_owner_only_0600_single_link_regular_file(tmp_path):
    root = tmp_path
    data = write_sidecar(root, None, state_of(CAPTURE))
    path = sidecar_path(root)
    assert os.stat(path).st_mode & 0o777 == 0o600 and read_sidecar(root)[1] == data
    for mode in (0o644, 0o640, 0o604):  # git's checkout modes: narrowed on the first read
        path.chmod(mode)
        assert read_sidecar(root)[1] == data and os.stat(path).st_mode & 0o7777 == 0o600
    for mode in (0o400, 0o200, 0o666, 0o660, 0o606, 0o700, 0o744, 0o4644, 0o1644):
        path.chmod(mode)
        with pytest.raises(UnsafePath):
            read_sidecar(root)
        assert os.stat(path).st_mode & 0o7777 == mode  # never narrowed: someone else may have written it
    path.chmod(0o644)
    os.link(path, tmp_path / "second-name")
    with pytest.raises(UnsafePath, match="hard links"):
        read_sidecar(root)
    assert os.stat(path).st_mode & 0o777 == 0o644  # a second name is never narrowed either
    os.unlink(tmp_path / "second-name")
    path.rename(tmp_path / "real")
    os.symlink(tmp_path / "real", path)
    with pytest.raises(UnsafePath):
        read_sidecar(root)
    assert os.stat(tmp_path / "real").st_mode & 0o777 == 0o644  # a link is never followed to narrow
    os.unlink(path)
    os.mkfifo(path, 0o644)
    with pytest.raises(UnsafePath, match="regular"):
        read_sidecar(root)
    os.unlink(path)
    with open(path, "wb") as handle:  # a huge planted file is refused by its size, never read
        handle.truncate(MAX_SIDECAR_BYTES + 1)
    path.chmod(0o600)
    with pytest.raises(InvalidRecord, match="at most"):
        read_sidecar(root)


# --- a captured vault: health, tampering, adoption -------------------------------------------------


def supersede_first(memories):
    return json.dumps({"decisions": [{"index": m["index"], "action": "SUPERSEDE", "target": m["candidates"][0]["id"],
                                      "text": m["text"]} for m in memories]})  # fmt: skip


@pytest.fixture
def captured(tmp_path, request):
    set_up_the_tests_backend(request)  # its vault follows a both_backends test's backend
    turns = iter([extraction(memory("The Atlas deadline is February 1.")),
                  extraction(memory("The Atlas deadline is March 15.")),
                  extraction(memory("Dana owns the Atlas billing migration."))])  # fmt: skip
    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        script = ChatScript(lambda _t: next(turns), supersede_first)
        server.route(OLLAMA_PATH, script)
        root = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)
        clock = Clock()
        store = store_for(root, clock)
        for run in ("run-1", "run-2"):
            store.persist_completed_turn(run, run, capture_text=run)
            IntakeWorker(store, clock=clock).process_due()
        assert store._semantic.drain(90)  # vectors are embedded off the write path: let them land first
        yield root, store, clock, script
        store.close()


def codes(store, strict=True):
    """Health's finding codes, as the store's own engine reports them (a folder's or a server's)."""
    return [f["code"] for f in store.health_report(strict=strict)["findings"]]


@pytest.mark.both_backends
def test_health_compares_sidecar_and_index_exactly(captured):
    _root, store, _, _ = captured
    assert codes(store) == [] and codes(store, strict=False) == []
    generation = store.serving_index().generation
    state, _ = read_projection(generation)
    forged = {"at": TS, "authority": next(iter(state.entries.values()))["authority"], "by": "f-0000000009",
              "id": "f-0000000008", "kind": "lifecycle", "state": "superseded"}  # fmt: skip
    state.merge([forged])  # structurally plausible lifecycle written straight into the index
    write_projection(generation, render_state(state))  # the index's own copy, whichever backend
    report = store.health_report(strict=True)
    [finding] = [f for f in report["findings"] if f["check"] == "replay"]
    assert (finding["code"], finding["severity"], finding["fix"]) == ("canonical_mismatch", "error", "memvault rebuild")
    assert "1 entries not attested by the sidecar" in finding["message"]
    store.rebuild()
    assert codes(store) == []


@pytest.mark.both_backends
def test_lite_and_journal_reject_replay_state_in_their_index(captured):
    root, _store, _, _ = captured
    journal = store_for(root)
    journal.config = dataclasses.replace(
        journal.config, memory=dataclasses.replace(journal.config.memory, mode="journal")
    )
    assert "replay_state_in_tier" in codes(journal)


@pytest.mark.both_backends
def test_adopt_replay_then_rebuild_restores_the_exact_sidecar(captured):
    root, store, clock, script = captured
    original = sidecar_path(root).read_bytes()
    sidecar_path(root).unlink()  # a vault restored without its sidecar
    assert "unadopted_replay_state" in codes(store)
    with pytest.raises(Conflict, match="adopt-replay"):
        store.rebuild()
    store.persist_completed_turn("run-3", "run-3", capture_text="run-3")
    worker = IntakeWorker(store, clock=clock)
    worker.process_due()  # capture is deferred, spending no attempt
    assert script.calls["extraction"] == 2 and "adopt-replay" in worker.last_error
    runner = CliRunner()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_FENCE, str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, cwd=str(REPO))  # fmt: skip
    try:
        assert holder.stdout.readline() == b"held\n"
        result = runner.invoke(cli, ["--vault", str(root), "adopt-replay", "--json"])  # a live agent: refused
        assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == "vault_locked"
        assert not sidecar_path(root).exists()
    finally:
        holder.communicate(b"", timeout=30)
    result = runner.invoke(cli, ["--vault", str(root), "adopt-replay", "--json"])
    body = json.loads(result.output)
    assert result.exit_code == 0 and body["adopted"] is True and body["next"] == "memvault rebuild"
    assert body["attested"] == {"pendingIntents": 0, "receipts": 2, "ledger": 0, "direct": 0}
    assert sidecar_path(root).read_bytes() == original and os.stat(sidecar_path(root)).st_mode & 0o777 == 0o600
    assert "adoption_pending" in codes(store)
    worker.process_due()
    assert script.calls["extraction"] == 2  # still paused until the rebuild
    again = json.loads(runner.invoke(cli, ["--vault", str(root), "adopt-replay", "--json"]).output)
    assert again == {"adopted": False, "reason": "sidecar_present", "next": None}
    assert runner.invoke(cli, ["--vault", str(root), "rebuild"]).exit_code == 0
    assert codes(store) == ["waiting_intake"]  # run-3 is due again and waits for the next owner
    worker.process_due()
    assert script.calls["extraction"] == 3 and "Dana owns" in daily_text(root)
    texts = [h.text for h in store.recall("Atlas deadline").hits]
    assert texts[0] == "The Atlas deadline is March 15." and "The Atlas deadline is February 1." not in texts


@pytest.mark.both_backends
def test_an_unattested_entry_refuses_the_whole_adoption(captured):
    root, store, _, _ = captured
    sidecar_path(root).unlink()
    generation = store.serving_index().generation
    state, _ = read_projection(generation)
    key, entry = next((k, e) for k, e in state.entries.items() if e["kind"] == "capture")
    state.entries[key] = {**entry, "authority": {"digest": "f" * 64, "kind": "capture"}}
    write_projection(generation, render_state(state))  # the index's own copy, whichever backend
    result = CliRunner().invoke(cli, ["--vault", str(root), "adopt-replay", "--json"])
    assert result.exit_code == 1 and json.loads(result.output)["error"]["code"] == "conflict"
    assert "cannot be attested" in json.loads(result.output)["error"]["message"]
    assert not sidecar_path(root).exists() and not (root / ".replay-adoption-pending").exists()


@pytest.mark.both_backends
def test_a_pending_capture_intent_is_attested_and_finished_without_the_model(captured):
    root, store, clock, script = captured

    def stop_after_index(boundary):
        if boundary == "capture.indexed":
            raise RuntimeError("killed")

    store.persist_completed_turn("run-3", "run-3", capture_text="run-3")
    IntakeWorker(store, clock=clock, crash_hook=stop_after_index).process_due()
    assert script.calls["extraction"] == 3
    sidecar_path(root).unlink()
    body = json.loads(CliRunner().invoke(cli, ["--vault", str(root), "adopt-replay", "--json"]).output)
    assert body["attested"]["pendingIntents"] == 1 and body["attested"]["receipts"] == 2
    assert CliRunner().invoke(cli, ["--vault", str(root), "rebuild"]).exit_code == 0
    clock.advance(timedelta(minutes=5))
    IntakeWorker(store, clock=clock).process_due()
    assert script.calls["extraction"] == 3 and daily_text(root).count("Dana owns the Atlas billing migration.") == 1
    assert codes(store) == []


@pytest.mark.both_backends
def test_nothing_to_adopt_and_the_wrong_tier(captured, tmp_path):
    _root, _store, _, _ = captured
    empty = make_capture_vault(tmp_path, "http://127.0.0.1:9", name="empty")
    assert (
        json.loads(CliRunner().invoke(cli, ["--vault", str(empty), "adopt-replay", "--json"]).output)["reason"]
        == "no_replay_state"
    )
    lite = make_capture_vault(
        tmp_path, "http://127.0.0.1:9", name="lite", mode="lite", write_mode="append-host-summary"
    )
    result = CliRunner().invoke(cli, ["--vault", str(lite), "adopt-replay", "--json"])
    assert result.exit_code == 1 and "bujo" in json.loads(result.output)["error"]["message"]
    assert intake_id_for("run-1")  # (the captured fixture stays untouched)
