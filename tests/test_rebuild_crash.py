"""kill -9 of `memvault rebuild` and `memvault watch`: the old generation serves, restarts converge.

Real subprocesses, SIGKILLed at named boundaries (MEMVAULT_TEST_CRASH_AT, read by the CLI only)
and at random moments; then `health --strict` must be clean and the rows must equal a rebuild's.
"""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.generations import generation_names
from memvault.vault.config import default_config_data, render_config
from memvault.vault.ids import memory_id
from memvault.vault.init import init_vault
from memvault.vault.note import format_bullet
from tests.readonly_helpers import memvault_here, memvault_here_result

REPO = Path(__file__).resolve().parent.parent
MEMVAULT = [sys.executable, "-m", "memvault"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
pytestmark = [
    pytest.mark.slow,
    pytest.mark.one_engine(
        "these tests read Tantivy's generation folders (.index/CURRENT, generation_names(.index)); the same "
        "kills on the server (a rebuild and an owner killed halfway, the old generation serving, the next "
        "rebuild dropping the stray leaf) are tests/test_postgres_faults.py's"
    ),
]


def make_vault(root: Path, files: int, per_file: int) -> Path:
    """A vault as memvault writes it (no hand-edit findings), so strict health can be clean."""
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="Europe/Amsterdam")))
    for day in range(files):
        lines = [f"# day {day}\n\n"]
        for n in range(per_file):
            text = (
                f"Fact {n} of day {day}: the {['otter', 'heron', 'lynx', 'ibis'][n % 4]} "
                f"report number {day * per_file + n}."
            )
            lines.append(format_bullet(text, memory_id(text), f"{8 + n % 10:02d}:{n % 60:02d}"))
        (root / "daily" / f"2025-{day // 28 % 12 + 1:02d}-{day % 28 + 1:02d}.md").write_text("".join(lines))
    return root


def run(root: Path, *args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MEMVAULT, "--vault", str(root), *args],
        cwd=REPO,
        env={**ENV, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def strict_health(root: Path) -> dict:
    """`memvault health --strict --json`, in this process (a check between the killed processes)."""
    result = memvault_here_result(root, "health", "--strict", "--json")
    report = json.loads(result.stdout)
    assert result.exit_code == (0 if report["healthy"] else 1)
    return report


def assert_converged(root: Path) -> None:
    report = strict_health(root)
    assert report["healthy"], report["findings"][:5]
    with MemoryStore.open(root, sync=False) as store:
        rows = store.serving_index().all_rows()
        store.rebuild()
        assert store.serving_index().all_rows() == rows


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return make_vault(tmp_path_factory.mktemp("template") / "vault", files=70, per_file=20)


@pytest.fixture
def vault(template, tmp_path) -> Path:
    import shutil

    target = tmp_path / "vault"
    shutil.copytree(template, target)
    assert memvault_here(target, "rebuild") == 0  # set-up: in this process
    return target


@pytest.mark.parametrize("boundary", ["apply.committed:1", "rebuild.built", "rebuild.swapped"])
def test_rebuild_killed_at_a_boundary_leaves_a_serving_index_and_a_rerun_converges(vault, boundary):
    serving = (vault / ".index/CURRENT").read_text().strip()
    killed = run(vault, "rebuild", env={"MEMVAULT_TEST_CRASH_AT": boundary})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with MemoryStore.open(vault, sync=False) as store:
        result = store.recall("otter report number 42", limit=5)
        assert result.degraded is None and result.hits, "an index serves after the kill"
    pointer = (vault / ".index/CURRENT").read_text().strip()
    assert pointer == (serving if boundary != "rebuild.swapped" else pointer)
    if boundary != "rebuild.swapped":
        assert pointer == serving, "a killed rebuild never swaps a half generation in"
        assert strict_health(vault)["findings"][0]["code"] == "stray_generation"
    assert run(vault, "rebuild").returncode == 0
    assert_converged(vault)
    assert len(generation_names(vault / ".index")) <= 2, "old and stray generations are cleaned up"


def test_rebuild_killed_at_random_moments_then_rerun(vault):
    rng = random.Random(11)
    for _ in range(2):
        proc = subprocess.Popen(
            [*MEMVAULT, "--vault", str(vault), "rebuild"],
            cwd=REPO,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        with MemoryStore.open(vault, sync=False) as store:
            assert store.recall("heron report", limit=3).degraded is None
    assert run(vault, "rebuild").returncode == 0
    assert_converged(vault)


def start_watch(root: Path, env: dict | None = None, *, batches: bool = False) -> subprocess.Popen:
    """`memvault watch`, once it watches; with `batches`, its --json batch reports on its stdout."""
    proc = subprocess.Popen(
        [*MEMVAULT, "--vault", str(root), "watch", "--debounce", "0.05", *(["--json"] if batches else [])],
        cwd=REPO,
        env={**ENV, **(env or {})},
        stdout=subprocess.PIPE if batches else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stderr.readline()
    if not line.startswith("watching"):
        proc.kill()  # what it printed in full, to see why
        raise AssertionError(line + proc.stderr.read())
    return proc


def wait_for_the_first_rescan(proc: subprocess.Popen) -> None:
    """Until the restarted watch has applied its first rescan (the catch-up with what changed while
    nobody watched), read from its --json batch reports instead of sleeping."""
    for line in proc.stdout:
        if json.loads(line)["rescan"]:
            return
    raise AssertionError(f"watch exited before its first rescan: {proc.wait(30)} {proc.stderr.read()}")


def stop_watch(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def edit_some(root: Path, rng: random.Random, count: int, tag: str) -> None:
    notes = sorted((root / "daily").glob("*.md"))
    for i in range(count):
        path = rng.choice(notes)
        lines = path.read_text().splitlines(keepends=True)
        choice = rng.random()
        if choice < 0.4 and len(lines) > 3:
            del lines[rng.randrange(2, len(lines))]
        elif choice < 0.8:
            lines.append(f"- 20:{i % 60:02d} {tag} edit {i} about the capybara.\n")
        else:
            lines.insert(2, lines.pop())
        tmp = path.with_name(f".{path.name}.{i}.tmp")
        tmp.write_text("".join(lines))
        os.replace(tmp, path)


def test_watch_killed_after_the_index_commit_converges_on_restart(vault):
    proc = start_watch(vault, env={"MEMVAULT_TEST_CRASH_AT": "apply.committed"})
    edit_some(vault, random.Random(3), 5, "first")
    assert proc.wait(30) == -signal.SIGKILL, "killed between the BM25 commit and the manifest write"
    proc = start_watch(vault, batches=True)
    wait_for_the_first_rescan(proc)
    stop_watch(proc)
    assert_converged(vault)


def test_watch_killed_at_random_moments_during_edit_bursts(vault):
    rng = random.Random(5)
    for round_ in range(2):
        proc = start_watch(vault)
        edit_some(vault, rng, 60, f"round{round_}")
        time.sleep(rng.uniform(0.05, 1.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    proc = start_watch(vault, batches=True)  # restart: the first rescan catches up with everything
    wait_for_the_first_rescan(proc)
    stop_watch(proc)
    assert_converged(vault)


READER = textwrap.dedent(
    """
    import os, sys
    from memvault.indexer.engine.store import MemoryStore
    vault, stop = sys.argv[1], sys.argv[2]
    bad = reads = 0
    with MemoryStore.open(vault, sync=False) as store:
        while not os.path.exists(stop):
            result = store.recall("Fact 3 of day 7", limit=100)
            reads += 1
            if result.degraded or not any(h.text.startswith("Fact 3 of day 7:") for h in result.hits):
                bad += 1
            if reads == 1:
                print("reading", flush=True)
    print(reads, bad)
    """
)


def test_readers_never_see_a_half_index_during_rebuilds(vault, tmp_path):
    """A reader recalls in a loop, as fast as it can, across three rebuilds (counted, not timed)."""
    stop = tmp_path / "stop-reading"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(vault), str(stop)], cwd=REPO, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert reader.stdout.readline().strip() == "reading"
    for _ in range(3):
        assert run(vault, "rebuild").returncode == 0
    stop.touch()
    out, err = reader.communicate(timeout=120)
    reads, bad = map(int, out.split())
    assert reads >= 1, err
    assert bad == 0, f"{bad} of {reads} reads saw a missing or half index"
    assert len(generation_names(vault / ".index")) <= 2
