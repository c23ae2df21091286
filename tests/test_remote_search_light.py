"""`memvault --remote NAME search` loads what a search needs and nothing else (issue 42 item 8).

A CLI process per remote search paid for the whole team stack: the run ledger and turn admission
(credential scanning, the intake files), bulk remember, the journal's cursor files and their locks,
before its one query. The search runs here in a process of its own against the real server, and
what it imported is read from its `sys.modules` afterwards: no assertion depends on time
(bench/bench_remote_cli.py prints the time beside a local search with the owner up)."""

import json
import subprocess
import sys

import pytest

from memvault.cli.remote_commands import REMOTE_FORM_COMMANDS
from memvault.cli.remote_store import REMOTE_FORMS
from tests.engine_helpers import ENV, REPO
from tests.test_team_store import NAME, home  # noqa: F401 - the fixture

pytestmark = pytest.mark.one_engine("`--remote NAME` reaches a vault through its index server")

#: loaded by no remote search: the remote forms' own code, the owner's and other commands' stacks
MUST_NOT_LOAD = (
    "memvault.cli.remote_commands",  # admit, inspect, engine status, mcp
    "memvault.indexer.team.ledger",
    "memvault.vault.intake.admission",
    "memvault.vault.credentials",  # its patterns: a remember, a config being checked
    "memvault.indexer.engine.bulk",
    "memvault.indexer.journal.cursor",
    "psycopg_pool",  # one connection, no pool
    "hnswlib",  # the server holds the vectors
    "wordllama",  # its files are read, the package never runs
    "mcp",
    "anyio",
    "jinja2",
    "starlette",
    "uvicorn",
    "watchdog",
    "mistune",
    "http.client",
    "urllib.request",
)

#: runs the CLI in this process, then writes the names of every module it imported
DRIVER = """
import json, sys
from memvault.cli.main import cli
out = sys.argv.pop(1)
try:
    cli.main(sys.argv[1:], prog_name="memvault")
finally:
    with open(out, "w") as handle:
        json.dump(sorted(sys.modules), handle)
"""


def run_remote_search(dsn, tmp_path, *args):
    listing = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(listing), "--remote", NAME, "search", *args],
        env={**ENV, "MEMVAULT_INDEX_DSN": dsn},
        cwd=REPO,
        text=True,
        capture_output=True,
        timeout=120,
    )
    return done, set(json.loads(listing.read_text()))


def test_a_remote_search_imports_only_what_a_search_needs(home, tmp_path):  # noqa: F811
    _root, owner, dsn = home
    receipt = owner.remember("Jonas owns the staging certificates.")
    done, loaded = run_remote_search(dsn, tmp_path, "--json", "who owns the staging certificates?")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hits"][0]["id"] == receipt.id
    assert {"psycopg", "numpy", "tokenizers", "memvault.indexer.search.recall"} <= loaded  # it did search
    assert sorted(loaded & set(MUST_NOT_LOAD)) == []


def test_the_remote_forms_are_the_ones_the_group_dispatches_on():
    assert tuple(REMOTE_FORM_COMMANDS) == REMOTE_FORMS
