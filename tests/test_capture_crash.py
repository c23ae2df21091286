"""The crash matrix through capture: a real subprocess SIGKILLed at each capture commit boundary.

The killed process is a real subprocess (tests/capture_crash_driver.py); the restart runs in
this process (the same library calls the driver makes), which keeps the matrix fast.

After a restart every run is captured exactly once: one bullet per fact, one graph line per
fact association, a replay sidecar the index projection matches exactly (strict health clean),
no plan or temp file left, and, once the plan was durable, no model call repeated (the
loopback server counts every request across both processes).
"""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.vault.capture import CAPTURE_BOUNDARIES
from memvault.vault.clock import utc_now
from memvault.vault.graph import parse_graph
from memvault.vault.intake.admission import intake_id_for
from memvault.vault.intake.files import IntakeDirs
from memvault.vault.intake.snapshot import inspect_run
from memvault.vault.replay import read_sidecar
from tests.capture_crash_driver import COMPLETED_AT, TURNS, wait_until_settled
from tests.capture_helpers import (
    EMBED_PATH,
    OLLAMA_PATH,
    ChatScript,
    daily_text,
    entity,
    extraction,
    hash_embeddings,
    make_capture_vault,
    memory,
)
from tests.loopback import LoopbackServer

DRIVER = Path(__file__).resolve().parent / "capture_crash_driver.py"
RUNS = ("cap-run-0", "cap-run-1", "cap-run-2")

pytestmark = pytest.mark.slow


def extract(turn: str) -> str:
    atlas = entity("e1", "Atlas")
    if "Morgan" in turn:
        return extraction(memory("Morgan leads Atlas.", 0.6, ["e1", "e2"]),
                          entities=[atlas, entity("e2", "Morgan", "person")],
                          relations=[{"from": "e2", "relation": "leads", "to": "e1"}])  # fmt: skip
    if "moved" in turn:
        return extraction(memory("The Atlas deadline is March 15.", 0.9, ["e1"]), entities=[atlas])
    return extraction(memory("The Atlas deadline is February 1.", 0.9, ["e1"]), entities=[atlas])


def reconcile(memories: list) -> str:
    decisions = []
    for item in memories:
        deadline = next((c for c in item["candidates"] if "deadline" in c["text"]), None)
        if "March" in item["text"] and deadline is not None:
            decisions.append(
                {"index": item["index"], "action": "SUPERSEDE", "target": deadline["id"], "text": item["text"]}
            )
        else:
            decisions.append({"index": item["index"], "action": "ADD"})
    return json.dumps({"decisions": decisions})


@pytest.fixture(scope="module")
def model():
    with LoopbackServer() as server:
        script = ChatScript(extract, reconcile)
        server.route(OLLAMA_PATH, script)
        server.route(EMBED_PATH, hash_embeddings)
        yield server, script


def drive(vault: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DRIVER), str(vault), *args], capture_output=True, text=True, timeout=120)


def vault_for(server, tmp_path) -> Path:
    return make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)


def restart(vault: Path) -> list[str]:
    """What the driver does, in this process: the host retries its turns, the worker recovers."""
    with MemoryStore.open(vault, env={}) as store:
        statuses = [store.persist_completed_turn(run, text, capture_text=text, completed_at=COMPLETED_AT).status
                    for run, text in TURNS]  # fmt: skip
        store.start_intake(poll_seconds=0.05)
        assert wait_until_settled(vault)  # a busy machine may need longer than the 10 s drain
        assert store.stop(timeout=10.0).drained
    return statuses


def calls(script) -> tuple[int, int]:
    return script.calls["extraction"], script.calls["reconciliation"]


def state_of(vault: Path) -> dict:
    """What a finished vault holds, without timestamps: facts, graph lines, sidecar identities."""
    text = daily_text(vault)
    graph = parse_graph((vault / "graph.jsonl").read_bytes())
    sidecar, _ = read_sidecar(vault)
    return {
        "facts": sorted(line.split()[-1] for line in text.splitlines() if "^f-" in line),
        "texts": sorted(line.split(" ", 2)[2].rsplit(" ^", 1)[0] for line in text.splitlines() if "^f-" in line),
        "graph": (
            sorted(graph.entities),
            sorted((f.id, f.entities) for f in graph.facts.values()),
            sorted(graph.relations),
        ),
        "sidecar": sorted(sidecar.entries),
    }


def assert_consistent(vault: Path) -> None:
    dirs = IntakeDirs(vault)
    for run in RUNS:
        [entry] = inspect_run(dirs, intake_id_for(run), utc_now())["entries"]
        assert (entry["state"], entry["outcome"]) == ("resolved", "captured"), entry
    text = daily_text(vault)
    facts = [line.split()[-1] for line in text.splitlines() if "^f-" in line]
    assert len(facts) == len(set(facts)) == 3, text  # exactly one copy of each fact
    graph = parse_graph((vault / "graph.jsonl").read_bytes())
    assert sorted(graph.facts) == sorted(f[1:] for f in facts)
    assert all(set(link.entities) <= set(graph.entities) for link in graph.facts.values())
    assert not list((vault / ".capture-intake").rglob(".*.tmp")) and not list(vault.glob(".*.tmp"))
    assert not (vault / ".capture-intake/plans").exists() or not list((vault / ".capture-intake/plans").iterdir())
    with MemoryStore.open(vault) as store:
        errors = [f for f in store.health_report(strict=True)["findings"] if f["severity"] == "error"]
        assert errors == [], [f["message"] for f in errors]  # the store's own engine's checks
        hits = [h.text for h in store.recall("When is the Atlas deadline?").hits]
    assert "The Atlas deadline is March 15." in hits and "The Atlas deadline is February 1." not in hits


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory):
    server, script = model
    vault = vault_for(server, tmp_path_factory.mktemp("reference"))
    before = calls(script)
    assert set(restart(vault)) == {"admitted"}
    after = calls(script)
    assert_consistent(vault)
    return state_of(vault), (after[0] - before[0], after[1] - before[1])


#: (boundary, nth, whether the plan was durable when the process died). nth 3 is the third run,
#: the one that supersedes the first run's deadline. The intake's own resolve boundaries are
#: all in tests/test_intake_crash.py; here the two that bracket a capture's resolution.
MATRIX = [
    ("capture.extracted", 3, False),
    ("capture.reconciled", 2, False),
    ("capture.plan_written", 3, True),
    ("capture.facts_written", 3, True),
    ("capture.graph_written", 3, True),
    ("capture.sidecar_written", 3, True),
    ("capture.indexed", 3, True),
    ("resolve.receipt_written", 3, True),
    ("resolve.active_removed", 3, True),
    ("capture.plan_retired", 3, True),
]


#: every boundary on both engines (capture.indexed writes the serving generation's projection, in
#: .index/ or on the server, and proves it; the postgres runs replace the three server-only ones)
@pytest.mark.both_backends
@pytest.mark.parametrize(("boundary", "nth", "planned"), MATRIX)
def test_killed_at_a_capture_boundary_then_restarted(model, reference, tmp_path, boundary, nth, planned):
    server, script = model
    expected_state, expected_calls = reference
    vault = vault_for(server, tmp_path)
    before = calls(script)
    killed = drive(vault, "--crash", boundary, "--nth", str(nth))
    assert killed.returncode == -signal.SIGKILL, (
        f"{boundary} never reached: {killed.stderr[-2000:]} {killed.stdout[-3000:]}"
    )
    assert set(restart(vault)) == {"duplicate"}
    assert_consistent(vault)
    assert state_of(vault) == expected_state
    used = calls(script)
    used = (used[0] - before[0], used[1] - before[1])
    if planned:  # the plan was durable: the replay made no model call at all
        assert used == expected_calls
    else:  # killed before the plan: that run's calls are made again, never more
        assert used[0] <= expected_calls[0] + 1 and used[1] <= expected_calls[1] + 1 and used >= expected_calls


def test_every_capture_boundary_is_in_the_matrix():
    assert {b for b, _, _ in MATRIX if b.startswith("capture.")} == set(CAPTURE_BOUNDARIES)
