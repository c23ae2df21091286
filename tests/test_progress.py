"""Rebuild progress tells the truth: each phase with counts, nothing drawn off a terminal, and no
phase shown complete while its work remains."""

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bench.generate import make_vault
from memvault.cli.main import cli
from memvault.cli.progress import TerminalProgress, describe
from memvault.indexer.maintenance.progress import PhaseLog
from tests.postgres_helpers import on_test_backend


def run_in_terminal(args: list[str]) -> str:
    """Run memvault with a real pseudo-terminal as stdout/stderr; everything it drew, as text."""
    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "memvault", *args], stdin=subprocess.DEVNULL,
                               stdout=follower, stderr=follower)  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode()


def journal_vault(root: Path, memories: int) -> Path:
    return on_test_backend(make_vault(root, memories, per_day=50, mode="journal"))


#: what each engine shows after embedding: the local one saves its hnswlib file, a server's
#: vectors went in with each batch of rows; and the generation's name
SAVED_VECTORS = {"local": ["saving the vector index"], "postgres": []}
GENERATION = {"local": "gen-", "postgres": "postgres-test-vault-g"}


@pytest.mark.both_backends
def test_a_journal_rebuild_on_a_terminal_reports_every_phase_in_order(tmp_path: Path, index_backend):
    vault = journal_vault(tmp_path / "v", 1200)
    drawn = run_in_terminal(["--vault", str(vault), "rebuild"])
    lines = [line.strip() for line in re.split(r"[\r\n]+", drawn) if line.strip()]
    assert lines[0] == "Opening the vault…"
    finals = [line for line in lines if " in " in line and line.split(":")[0] in
              ("reading notes", "embedding", "saving the vector index", "switching to the new index")]  # fmt: skip
    assert [line.split(":")[0] for line in finals] == [
        "reading notes", "embedding", *SAVED_VECTORS[index_backend], "switching to the new index"]  # fmt: skip
    assert finals[0].startswith("reading notes: 24/24 files in ")
    assert finals[1].startswith("embedding: 1,200/1,200 memories in ")
    assert not any("100%" in line for line in lines)
    assert lines[-1].startswith(f"Rebuilt {GENERATION[index_backend]}") and "1200 memories from 24 files" in lines[-1]


@pytest.mark.both_backends
def test_off_a_terminal_nothing_is_drawn_and_json_reports_the_phases(tmp_path: Path, index_backend):
    vault = journal_vault(tmp_path / "v", 600)
    quiet = CliRunner().invoke(cli, ["--vault", str(vault), "rebuild"], catch_exceptions=False)
    assert quiet.exit_code == 0
    assert quiet.output.splitlines() == [quiet.output.splitlines()[0]]
    assert quiet.output.startswith(f"Rebuilt {GENERATION[index_backend]}")
    done = CliRunner().invoke(cli, ["--vault", str(vault), "rebuild", "--json"], catch_exceptions=False)
    phases = json.loads(done.output)["phases"]
    saved = ["vectors"] if SAVED_VECTORS[index_backend] else []
    assert [p["phase"] for p in phases] == ["notes", "embedding", *saved, "swap"]
    assert phases[0]["done"] == phases[0]["total"] == 12
    assert phases[1]["done"] == phases[1]["total"] == 600
    assert all(p["seconds"] >= 0 for p in phases)


@pytest.mark.both_backends
def test_a_lite_rebuild_has_no_vector_phases(fixture_vault: Path):
    done = CliRunner().invoke(cli, ["--vault", str(fixture_vault), "rebuild", "--json"], catch_exceptions=False)
    assert [p["phase"] for p in json.loads(done.output)["phases"]] == ["notes", "swap"]


def test_a_phase_never_reads_one_hundred_percent_until_it_is_over():
    log = PhaseLog()
    log.phase("notes", total=4)
    log.advance("notes", 4)
    (state,) = log.snapshot()
    assert "4/4 (99%)" in describe(state, finished=False)
    assert describe(state, finished=True).startswith("reading notes: 4/4 files in ")


def test_the_terminal_reporter_prints_each_finished_phase_once_and_in_order():
    stream = io.StringIO()
    reporter = TerminalProgress(stream)
    log = reporter.log
    log.phase("notes", total=2)
    log.start_beside("embedding")
    log.advance("notes", 2)
    log.advance("embedding", 5)
    log.phase("embedding", total=5)
    log.phase("vectors")
    log.phase("swap")
    log.done()
    finals = [line.strip() for line in stream.getvalue().split("\n") if " in " in line or "done in" in line]
    finals = [line.split("\r")[-1].strip() for line in finals]
    assert [line.split(":")[0] for line in finals] == [
        "reading notes", "embedding", "saving the vector index", "switching to the new index"]  # fmt: skip
