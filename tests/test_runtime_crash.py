"""Real processes: concurrent writers never lose an entry, and SIGKILL at every commit boundary
leaves a runtime folder that reloads cleanly to exactly the old or the new state."""

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from memvault.vault.runtime import RuntimeMemory
from memvault.vault.runtime.commit import COMMITTED, TEMPS_WRITTEN, renamed
from memvault.vault.runtime.projection import parse_edited

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_cli(vault: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(vault.parent)}
    if crash_at:
        env["MEMVAULT_TEST_CRASH_AT"] = crash_at
    code = "from memvault.cli.main import cli; cli()"
    return subprocess.run(
        [sys.executable, "-c", code, "--vault", str(vault), *args],
        env=env, capture_output=True, text=True, timeout=60, cwd=vault.parent,
    )  # fmt: skip


def state_of(vault: Path) -> dict[str, list[str]]:
    view = RuntimeMemory(vault).load()
    return {t: [e.content for e in view.state.of(t)] for t in ("USER", "MEMORY")}


def assert_projections_match(vault: Path) -> None:
    runtime = RuntimeMemory(vault)
    view = runtime.load()
    assert view.files == {"USER": "current", "MEMORY": "current"}
    for target in ("USER", "MEMORY"):
        path = vault / f"runtime/{target}.md"
        if view.revision == 0:
            assert not path.exists()  # nothing committed: a leftover of the crashed first write is gone
            continue
        raw = path.read_bytes()
        assert parse_edited(raw, target, 1 << 20) == [e.content for e in view.state.of(target)]


CASES = [
    # (what exists before, the write, the boundary to die at, whether the write committed)
    ("fresh", ("USER", "after"), renamed("USER"), False),
    ("fresh", ("USER", "after"), renamed("MEMORY"), False),
    ("seeded", ("USER", "after"), TEMPS_WRITTEN, False),
    ("seeded", ("USER", "after"), renamed("USER"), False),
    ("seeded", ("MEMORY", "after"), renamed("MEMORY"), False),
    ("seeded", ("USER", "after"), COMMITTED, True),
]


@pytest.mark.parametrize("start, write, boundary, committed", CASES)
def test_sigkill_at_each_commit_boundary_reloads_cleanly(new_vault, start, write, boundary, committed):
    before = {"USER": [], "MEMORY": []}
    if start == "seeded":
        runtime = RuntimeMemory(new_vault)
        runtime.add("USER", "before user")
        runtime.add("MEMORY", "before memory")
        before = state_of(new_vault)
    target, text = write
    result = run_cli(new_vault, "runtime", "add", target, text, crash_at=boundary)
    assert result.returncode == -signal.SIGKILL, result.stderr
    after = {k: list(v) for k, v in before.items()}
    after[target].append(text)
    assert state_of(new_vault) == (after if committed else before)  # old or new, never a mix
    RuntimeMemory(new_vault).reconcile()
    assert_projections_match(new_vault)
    assert state_of(new_vault) == (after if committed else before)  # reconciling changed no entry
    ok = run_cli(new_vault, "runtime", "add", "MEMORY", "later")
    assert ok.returncode == 0, ok.stderr
    assert_projections_match(new_vault)
    stray = [p.name for p in (new_vault / "runtime").iterdir() if p.name.endswith(".tmp")]
    assert all(name.startswith(".") for name in stray)  # a killed writer's temps stay hidden and ignored


WRITER = textwrap.dedent(
    """
    import sys
    from memvault.vault.runtime import RuntimeMemory
    root, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    runtime = RuntimeMemory(root, memory_limit=100_000, lock_timeout=120)
    for i in range(count):
        runtime.add("MEMORY", f"worker {worker} entry {i}")
        runtime.replace("USER", f"slot {worker} v{i}", f"slot {worker} v{i + 1}")
    """
)


def test_concurrent_processes_never_lose_an_entry_or_corrupt_a_projection(new_vault):
    runtime = RuntimeMemory(new_vault)
    workers, count = 4, 6
    for worker in range(workers):
        runtime.add("USER", f"slot {worker} v0")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(new_vault), str(w), str(count)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for w in range(workers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    state = state_of(new_vault)
    assert sorted(state["MEMORY"]) == sorted(f"worker {w} entry {i}" for w in range(workers) for i in range(count))
    assert sorted(state["USER"]) == sorted(f"slot {w} v{count}" for w in range(workers))
    assert RuntimeMemory(new_vault).load().revision == workers + 2 * workers * count
    assert_projections_match(new_vault)
    assert json.loads((new_vault / "runtime/memories.json").read_text())["format"] == "memvault-runtime-v1"
