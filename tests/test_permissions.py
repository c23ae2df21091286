"""Real permission errors (EACCES), not simulated ones: a vault whose files lack write bits.

As root the commands run with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from their
capability bounding set (root otherwise ignores file modes), so the kernel refuses exactly what it
refuses a normal user; as a normal user the modes alone do it. Reads answer; every write fails
with one clear "permission denied" error naming the path and the fix, no traceback, and not one
byte of the vault changes. A turn admitted while only `daily/` is read-only is kept, not lost,
and lands once the folder is writable again.
"""

import ctypes
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.readonly_helpers import tree_state

MEMVAULT = str(Path(sys.executable).parent / "memvault")
ENV = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2
DAY = "2026-11-30"


def _without_dac_override() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _probe(tmp_path: Path) -> None:
    """Skip unless a child really is refused a write by file modes here."""
    folder = tmp_path / "probe"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        done = subprocess.run(["touch", str(folder / "x")], capture_output=True,
                              preexec_fn=_without_dac_override if os.geteuid() == 0 else None)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE for a child process here ({exc})")
    finally:
        folder.chmod(0o755)
    if done.returncode == 0:
        pytest.skip("file modes do not refuse writes here (a capability or file system ignores them)")


def memvault(vault: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run([MEMVAULT, "--vault", str(vault), *args], input=stdin, capture_output=True, text=True,
                          env=ENV, timeout=300,
                          preexec_fn=_without_dac_override if os.geteuid() == 0 else None)  # fmt: skip
    assert "Traceback" not in done.stderr, (args, done.stderr)
    return done


def set_writable(root: Path, writable: bool, only: str | None = None) -> None:
    top = root / only if only else root
    for folder, _dirs, files in os.walk(top):
        for name in files:
            path = Path(folder) / name
            path.chmod(
                stat.S_IMODE(path.stat().st_mode) | 0o200 if writable else stat.S_IMODE(path.stat().st_mode) & ~0o222
            )
        os.chmod(
            folder,
            stat.S_IMODE(os.stat(folder).st_mode) | 0o200
            if writable
            else stat.S_IMODE(os.stat(folder).st_mode) & ~0o222,
        )


ONE_ENGINE = pytest.mark.one_engine(
    "the commands run as root without CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH, and the test server's socket "
    "sits in its pgserver-owned 0700 data folder (tests/postgres_helpers.py): a postgres run's commands "
    'are refused the connection ("Permission denied" on .s.PGSQL.5432) before any vault file'
)


@pytest.fixture()
def vault(tmp_path):
    _probe(tmp_path)
    root = tmp_path / "v"
    init = subprocess.run([MEMVAULT, "init", str(root), "--mode", "journal", "--time-zone", "UTC"], capture_output=True,
                          text=True, env=ENV, timeout=300)  # fmt: skip
    assert init.returncode == 0, init.stderr
    (root / "daily" / f"{DAY}.md").write_text(f"# {DAY}\n\n- 09:00 Priya lives in Rotterdam. ^m-priya\n")
    for args in (
        ("rebuild",),
        ("runtime", "add", "user", "Prefers short answers."),
        ("doc", "create", "Plan", "--body", "x"),
    ):
        assert memvault(root, *args).returncode == 0, args
    yield root
    set_writable(root, True)


@ONE_ENGINE
@pytest.mark.slow
def test_a_vault_without_write_permission_reads_and_refuses_every_write_cleanly(vault):
    set_writable(vault, False)
    before = tree_state(vault)
    found = memvault(vault, "search", "--json", "Where does Priya live?")
    assert found.returncode == 0 and json.loads(found.stdout)["hits"][0]["id"] == "m-priya", found.stderr
    journal = memvault(vault, "journal", DAY, DAY, "--tz", "UTC", "--json")
    assert journal.returncode == 0 and [e["id"] for e in json.loads(journal.stdout)["entries"]] == ["m-priya"]
    for args in (("health",), ("inspect",), ("runtime", "show"), ("doc", "list")):
        assert memvault(vault, *args).returncode == 0, args

    for args in (("remember", "Sam works at Acme."), ("remember", "--json", "Sam works at Acme."),
                 ("runtime", "add", "memory", "The build is green."), ("doc", "create", "Other", "--body", "text"),
                 ("rebuild",), ("consolidate",)):  # fmt: skip
        done = memvault(vault, *args)
        said = done.stdout + done.stderr
        assert done.returncode == 1, (args, said)
        assert "permission denied" in said.lower() and str(vault) in said and "owner" in said, (args, said)
        if "--json" in args:
            assert json.loads(done.stdout)["error"]["code"] == "permission_denied"
    admitted = memvault(vault, "admit", stdin=json.dumps({"runId": "run-denied", "answer": "The deploy finished."}))
    body = json.loads(admitted.stdout)
    assert admitted.returncode == 1 and body["status"] == "failed" and body["reason"] == "io_error"
    assert (
        "NOT saved" in body["message"]
        and "permission denied" in body["message"].lower()
        and str(vault) in body["message"]
    )
    assert tree_state(vault) == before  # not one byte, file or folder changed


@ONE_ENGINE
def test_a_read_only_daily_folder_keeps_admitted_turns_until_it_is_writable(vault):
    set_writable(vault, False, only="daily")
    note = vault / "daily" / f"{DAY}.md"
    before = note.read_bytes()
    refused = memvault(vault, "remember", "--json", "--at", f"{DAY}T10:00:00Z", "Sam works at Acme.")
    error = json.loads(refused.stdout)["error"]
    assert refused.returncode == 1 and "daily/" in error["message"] and "permission" in error["message"].lower(), error
    admitted = memvault(vault, "admit", stdin=json.dumps({"runId": "run-kept", "answer": "The deploy finished."}))
    assert json.loads(admitted.stdout)["status"] == "admitted"  # durable in the intake, not yet projected
    assert note.read_bytes() == before
    [record] = json.loads(memvault(vault, "inspect", "--json").stdout)["records"]
    assert record["state"] == "pending" and record["attempts"] == 1 and record["failure"], record

    set_writable(vault, True, only="daily")
    assert memvault(vault, "retry").returncode == 0  # the operator's path: the delayed turn is due now
    drained = memvault(vault, "admit", stdin=json.dumps({"runId": "run-kept", "answer": "The deploy finished."}))
    assert json.loads(drained.stdout)["status"] == "duplicate"  # the same turn again: admitted once, drained
    texts = "".join(p.read_text() for p in (vault / "daily").rglob("*.md"))
    assert texts.count("The deploy finished.") == 1
    assert json.loads(memvault(vault, "inspect", "--json").stdout)["counts"]["pending"] == 0
