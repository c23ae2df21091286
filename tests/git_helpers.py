"""Real git for the tests: an identity through the environment, a private global config, one runner."""

import os
import subprocess
from pathlib import Path

from tests.engine_helpers import ENV


def isolate_git(tmp_path: Path, monkeypatch) -> None:
    """Identity through the environment; a private, empty global config; no system config.
    memvault subprocesses started with engine_helpers.ENV get the same."""
    values = {
        "GIT_AUTHOR_NAME": "Person",
        "GIT_AUTHOR_EMAIL": "person@example.org",
        "GIT_COMMITTER_NAME": "Person",
        "GIT_COMMITTER_EMAIL": "person@example.org",
        "GIT_CONFIG_GLOBAL": str(tmp_path / "gitconfig-global"),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
        monkeypatch.setitem(ENV, name, value)


def git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`git ARGS` in ROOT (a merge on pull, branch main); asserts success unless check is False."""
    done = subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "pull.rebase=false", *args], cwd=root,
                          capture_output=True, text=True, timeout=120, env=os.environ.copy())  # fmt: skip
    if check:
        assert done.returncode == 0, f"git {' '.join(args)} in {root.name}: {done.stdout}{done.stderr}"
    return done
