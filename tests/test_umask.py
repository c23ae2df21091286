"""Under umask 000 memvault still creates every file and folder with an explicit mode: canonical
notes and their folders readable but never group/world-writable (0644 / 0755 or narrower), machine
state owner-only (0600 / 0700). Every command runs in a real process with umask 000; the test
prints the full listing (path, kind, mode) of what they created."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres_helpers import init_flags

MEMVAULT = str(Path(sys.executable).parent / "memvault")

#: what people read, edit and version: at most 0644 (files) / 0755 (folders)
CANONICAL_FILES = {
    ".gitignore",
    ".gitattributes",
    "memvault.json",
    "index.md",
    "graph.jsonl",
    "runtime/USER.md",
    "runtime/MEMORY.md",
    "runtime/memories.json",
}
CANONICAL_PREFIXES = ("daily/", "audit/", "documents/", "spaces/")
CANONICAL_DIRS = {".", "daily", "audit", "documents", "documents/archived", "runtime", "spaces"}


def env() -> dict[str, str]:
    """The commands' environment: no MEMVAULT_* variables, and the libpq ones of a both_backends
    test's postgres run (tests.engine_helpers.ENV, which its fixture extends)."""
    from tests import engine_helpers

    return {k: v for k, v in engine_helpers.ENV.items() if k != "PYTHONPATH"}


def run(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [MEMVAULT, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=env(),
        timeout=300,
        preexec_fn=lambda: os.umask(0),
    )
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


#: runs each command line of argv[1] (JSON: [args, stdin or null] pairs) through memvault's click group
#: in this process, as `memvault ARGS` would; prints [exit code, stdout] per command as JSON
_STEPS_SCRIPT = """
import json, sys, traceback
from click.testing import CliRunner
from memvault.cli.main import cli

answers = []
for args, stdin in json.loads(sys.argv[1]):
    done = CliRunner().invoke(cli, args, input=stdin)
    if done.exception is not None and not isinstance(done.exception, SystemExit):
        tb = "".join(traceback.format_exception(done.exception))
        sys.exit(f"{args}: Traceback {tb}")
    if "Traceback" in done.stderr:
        sys.exit(f"{args}: {done.stderr}")
    answers.append([done.exit_code, done.stdout])
print(json.dumps(answers))
"""


def run_in_one_process(cwd: Path, steps: list[tuple[str, ...]], stdin: dict[int, str]) -> list[tuple[int, str]]:
    """(exit code, stdout) of each command, all run in one process under umask 000."""
    commands = [[list(args), stdin.get(n)] for n, args in enumerate(steps)]
    done = subprocess.run(
        [sys.executable, "-c", _STEPS_SCRIPT, json.dumps(commands)],
        capture_output=True,
        text=True,
        cwd=str(cwd),
        env=env(),
        timeout=600,
        preexec_fn=lambda: os.umask(0),
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return [tuple(answer) for answer in json.loads(done.stdout)]


def listing(root: Path) -> list[tuple[str, str, int]]:
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if folder == str(root) else [*dirs, *files]:
            path = Path(folder) / name if name != "." else Path(folder)
            try:
                info = os.lstat(path)
            except FileNotFoundError:  # a running owner's temp file, renamed into place since the walk saw it
                continue
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
            found.append((os.path.relpath(path, root), kind, stat.S_IMODE(info.st_mode)))
    return sorted(found)


def is_canonical(relpath: str, kind: str) -> bool:
    if kind == "dir":
        return relpath in CANONICAL_DIRS or (relpath.startswith("spaces/") and "/." not in f"/{relpath}")
    return relpath in CANONICAL_FILES or (relpath.startswith(CANONICAL_PREFIXES) and "/." not in f"/{relpath}")


def wrong_modes(entries: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
    print("\n".join(f"{mode:04o} {kind:4} {path}" for path, kind, mode in entries))
    wrong = []
    for path, kind, mode in entries:
        if kind == "link":
            wrong.append((path, "a symlink"))
        elif is_canonical(path, kind):
            if mode & 0o022:  # readable by the people who share the vault, writable only by its owner
                wrong.append((path, f"{mode:04o} is group/world-writable"))
        elif mode & 0o077:  # machine state: the index, locks, intake, cursors, telemetry
            wrong.append((path, f"{mode:04o} is not owner-only"))
    return wrong


@pytest.mark.both_backends
@pytest.mark.slow
def test_every_created_file_has_an_explicit_mode_under_umask_000(tmp_path):
    vault = tmp_path / "v"
    steps = [
        ("init", str(vault), "--mode", "journal", "--time-zone", "UTC", *init_flags()),
        ("--vault", str(vault), "remember", "Priya lives in Rotterdam."),
        ("--vault", str(vault), "rebuild"),
        ("--vault", str(vault), "remember", "Morgan chose blue as the deployment color."),
        ("--vault", str(vault), "search", "Priya"),
        ("--vault", str(vault), "search", "--mode", "auto", "Where does Priya live?"),
        ("--vault", str(vault), "journal", "2020-01-01", "2020-01-01", "--tz", "UTC"),
        ("--vault", str(vault), "runtime", "add", "user", "Prefers short answers."),
        ("--vault", str(vault), "runtime", "add", "memory", "The build is green."),
        ("--vault", str(vault), "doc", "create", "Plan", "--body", "The plan."),
        ("--vault", str(vault), "consolidate"),
        ("--vault", str(vault), "health"),
        ("--vault", str(vault), "export", str(tmp_path / "backup.tar.gz")),
    ]
    steps.append(("--vault", str(vault), "admit"))
    turn = json.dumps({"runId": "r-1", "answer": "Deploy done."})
    # one process with umask 000 runs the commands one after another through the `memvault` entry
    # point's click group (as `memvault ARGS` does), instead of 14 processes that each pay the
    # interpreter's and memvault's start-up: the same commands make the same files, under the same umask
    answers = run_in_one_process(tmp_path, steps, stdin={len(steps) - 1: turn})
    for args, (code, _) in zip(steps, answers, strict=True):
        assert code == 0, args
    assert json.loads(answers[-1][1])["status"] == "admitted"

    entries = listing(vault)
    assert not wrong_modes(entries)
    kinds = {path for path, _, _ in entries}
    # the listing covers every kind of thing memvault makes
    for expected in (
        ".",
        "daily",
        "documents",
        "runtime",
        ".index",
        ".locks",
        ".capture-intake",
        "memvault.json",
        "index.md",
        ".index/journal",
    ):
        assert expected in kinds, expected
    from tests import postgres_helpers

    if postgres_helpers.TEST_BACKEND == "local":  # the local engine's own files (the server holds rows instead)
        assert ".index/CURRENT" in kinds
        assert any(path.startswith(".index/gen-") and "/bm25/" in path and path.endswith(".idx") for path in kinds)
        assert any("/vectors/log-" in path and path.endswith(".bin") for path in kinds)  # the vector log
    assert stat.S_IMODE(os.stat(tmp_path / "backup.tar.gz").st_mode) == 0o600  # a copy of every memory


@pytest.mark.both_backends
def test_a_bujo_owner_under_umask_000_creates_capture_and_engine_files_with_explicit_modes(tmp_path):
    """A BuJo vault served by `memvault serve` (umask 000) captures an admitted turn through a
    loopback model: the audit note, graph.jsonl, the replay sidecar, the engine's socket and
    status file all get explicit modes."""
    from memvault.indexer.engine.address import socket_path, status_path
    from tests.capture_helpers import (
        EMBED_PATH,
        OLLAMA_PATH,
        ChatScript,
        entity,
        extraction,
        hash_embeddings,
        make_capture_vault,
        memory,
    )
    from tests.engine_helpers import wait_for
    from tests.loopback import LoopbackServer

    with LoopbackServer() as server:
        server.route(EMBED_PATH, hash_embeddings)
        server.route(
            OLLAMA_PATH,
            ChatScript(
                lambda _turn: extraction(
                    memory("Morgan leads Project Atlas.", 0.8, ["e1"]), entities=[entity("e1", "Project Atlas")]
                )
            ),
        )
        vault = make_capture_vault(tmp_path, server.url, embed_endpoint=server.url)
        owner = subprocess.Popen(
            [MEMVAULT, "--vault", str(vault), "serve"],
            env=env(),
            cwd=str(tmp_path),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: os.umask(0),
        )
        try:
            sock = socket_path(vault)
            wait_for(lambda: sock.exists() and status_path(vault).exists(), what="the owner's socket")
            turn = {
                "runId": "r-1",
                "answer": "Morgan leads Project Atlas.",
                "captureText": "user: who leads Atlas?\nassistant: Morgan.",
            }
            admitted = run(tmp_path, "--vault", str(vault), "admit", stdin=json.dumps(turn))
            assert json.loads(admitted.stdout)["status"] == "admitted", admitted.stdout
            wait_for(
                lambda: (
                    (vault / "graph.jsonl").exists()
                    and "Morgan leads Project Atlas." in "".join(p.read_text() for p in (vault / "daily").rglob("*.md"))
                ),
                what="the capture",
            )
            engine_files = [
                (str(sock), "socket", stat.S_IMODE(os.lstat(sock).st_mode)),
                (str(sock.parent), "dir", stat.S_IMODE(os.lstat(sock.parent).st_mode)),
            ]
            print("\n".join(f"{mode:04o} {kind:6} {path}" for path, kind, mode in engine_files))
            assert engine_files[0][2] == 0o600 and engine_files[1][2] == 0o700, engine_files
            # while the owner runs: its status file and fence (the rest is listed once it stopped,
            # when no Tantivy segment is half-written: those sit in the 0700 .index meanwhile)
            running = [entry for entry in listing(vault) if entry[0].startswith(".locks")]
        finally:
            owner.terminate()
            _, err = owner.communicate(timeout=120)
        assert "Traceback" not in err, err
    entries = listing(vault)
    assert not wrong_modes(running) and not wrong_modes(entries)
    assert stat.S_IMODE(os.lstat(vault / ".index").st_mode) == 0o700
    kinds = {path for path, _, _ in running + entries}
    for expected in ("audit", "graph.jsonl", ".replay-projection-v1.json", ".locks/engine.json", ".locks/live.lock"):
        assert expected in kinds, expected
    assert any(path.startswith("audit/") and path.endswith(".md") for path in kinds)
