"""Real `memvault` processes for the engine tests: start an owner, wait for conditions, run commands."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MEMVAULT = [sys.executable, "-m", "memvault"]
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}, "PYTHONPATH": str(REPO)}
#: generous: the suite shares two cores with other work
TIMEOUT = 90.0


def memvault(root: Path, *args: str, input: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MEMVAULT, "--vault", str(root), *args],
        input=input,
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        cwd=REPO,
        timeout=TIMEOUT * 2,
    )


def memvault_json(root: Path, *args: str, input: str | None = None) -> dict:
    done = memvault(root, *args, "--json", input=input) if args[0] != "admit" else memvault(root, *args, input=input)
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


class OwnerProcess:
    """`memvault watch` / `serve` / `mcp` as a child process; stderr lines are collected."""

    def __init__(self, root: Path, command: str = "watch", env: dict | None = None, *args: str):
        self.root = root
        extra = ["--debounce", "0.05"] if command == "watch" else []
        self.proc = subprocess.Popen(
            [*MEMVAULT, "--vault", str(root), command, *extra, *args],
            env={**ENV, **(env or {})},
            cwd=REPO,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.reader = self.proc.stdout  # an MCP server's protocol replies
        self.lines: list[str] = []

    def wait_serving(self) -> "OwnerProcess":
        """Until the owner answers on its socket (its pid, not another process's)."""
        from memvault.indexer.engine.client import find_owner

        def serving():
            assert self.proc.poll() is None, f"owner exited {self.proc.returncode}: {self.proc.stderr.read()}"
            owner = find_owner(self.root)
            return owner is not None and owner.pid == self.proc.pid

        wait_for(serving, what="the owner's socket")
        return self

    def stop(self, sig=signal.SIGTERM) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            _, err = self.proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT)


def wait_for(predicate, timeout: float = TIMEOUT, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def pending_count(root: Path) -> int:
    pending = root / ".capture-intake" / "pending"
    return len([p for p in pending.iterdir() if not p.name.startswith(".")]) if pending.is_dir() else 0


def turn_json(run_id: str, answer: str, completed_at: str = "2026-11-30T13:03:00Z") -> str:
    return json.dumps({"runId": run_id, "answer": answer, "completedAt": completed_at})
