"""Under umask 000 memvault still creates every file and folder with an explicit mode: canonical
notes and their folders readable but never group/world-writable (0644 / 0755 or narrower), machine
state owner-only (0600 / 0700). Every command runs as a real subprocess with umask 000; the test
prints the full listing (path, kind, mode) of what they created."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

MEMVAULT = str(Path(sys.executable).parent / "memvault")

#: what people read, edit and version: at most 0644 (files) / 0755 (folders)
CANONICAL_FILES = {".gitignore", "memvault.json", "index.md", "graph.jsonl", "runtime/USER.md", "runtime/MEMORY.md",
                   "runtime/memories.json"}
CANONICAL_PREFIXES = ("daily/", "audit/", "documents/", "spaces/")
CANONICAL_DIRS = {".", "daily", "audit", "documents", "documents/archived", "runtime", "spaces"}


def run(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    done = subprocess.run([MEMVAULT, *args], input=stdin, capture_output=True, text=True, cwd=str(cwd), env=env,
                          timeout=300, preexec_fn=lambda: os.umask(0))
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def listing(root: Path) -> list[tuple[str, str, int]]:
    found = []
    for folder, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if folder == str(root) else [*dirs, *files]:
            path = Path(folder) / name if name != "." else Path(folder)
            info = os.lstat(path)
            kind = "dir" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
            found.append((os.path.relpath(path, root), kind, stat.S_IMODE(info.st_mode)))
    return sorted(found)


def is_canonical(relpath: str, kind: str) -> bool:
    if kind == "dir":
        return relpath in CANONICAL_DIRS or (relpath.startswith("spaces/") and "/." not in f"/{relpath}")
    return relpath in CANONICAL_FILES or (relpath.startswith(CANONICAL_PREFIXES) and "/." not in f"/{relpath}")


def test_every_created_file_has_an_explicit_mode_under_umask_000(tmp_path):
    vault = tmp_path / "v"
    steps = [
        ("init", str(vault), "--mode", "journal", "--time-zone", "UTC"),
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
    for args in steps:
        assert run(tmp_path, *args).returncode == 0, args
    admitted = run(tmp_path, "--vault", str(vault), "admit", stdin=json.dumps({"runId": "r-1", "answer": "Deploy done."}))
    assert json.loads(admitted.stdout)["status"] == "admitted"

    entries = listing(vault)
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
    assert not wrong, wrong
    kinds = {path for path, _, _ in entries}
    # the listing covers every kind of thing memvault makes
    for expected in (".", "daily", "documents", "runtime", ".index", ".index/CURRENT", ".locks", ".capture-intake",
                     "memvault.json", "index.md", ".index/journal"):
        assert expected in kinds, expected
    assert any(path.startswith(".index/gen-") and "/bm25/" in path and path.endswith(".idx") for path in kinds)
    assert any(path.endswith("vectors/vectors.hnsw") for path in kinds)
    assert stat.S_IMODE(os.stat(tmp_path / "backup.tar.gz").st_mode) == 0o600  # a copy of every memory
