"""The CLI end to end through click's runner, plus the promises about its shape."""

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from memvault.cli.docgen import render
from memvault.cli.main import cli
from tests.postgres_helpers import init_flags

REPO = Path(__file__).resolve().parent.parent


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


@pytest.mark.both_backends
def test_init_remember_search_rebuild_validate(tmp_path, index_backend):
    vault = tmp_path / "v"
    assert run("init", str(vault), "--time-zone", "Europe/Amsterdam", *init_flags()).exit_code == 0
    ignored = (vault / ".gitignore").read_text().splitlines()
    assert {".index/", ".locks/", ".capture-intake/", ".capture-intake-schema"} <= set(ignored)
    added = run("--vault", str(vault), "remember", "Morgan chose blue as the deployment color.", "--json")
    receipt = json.loads(added.output)
    assert receipt["status"] == "added" and receipt["source"].startswith("daily/")
    found = json.loads(run("--vault", str(vault), "search", "deployment color", "--json").output)
    assert [hit["source"] for hit in found["hits"]] == [receipt["source"]]
    assert found["hits"][0]["date"] == receipt["source"][6:16]
    plain = run("--vault", str(vault), "search", "deployment", "--explain")
    assert "Morgan chose blue" in plain.output and "bm25" in plain.output
    rebuilt = json.loads(run("--vault", str(vault), "rebuild", "--json").output)
    assert rebuilt["memories"] == 1 and rebuilt["files"] == 1
    assert run("--vault", str(vault), "validate").exit_code == 0


@pytest.mark.both_backends
def test_remember_with_explicit_time(tmp_path, index_backend):
    vault = tmp_path / "v"
    assert run("init", str(vault), "--time-zone", "Asia/Kolkata", *init_flags()).exit_code == 0
    out = run("--vault", str(vault), "remember", "Standup moved to 10:00.", "--at", "2026-11-02T09:30:00+01:00")
    assert out.exit_code == 0
    assert "- 14:00 Standup moved to 10:00. ^m-" in (vault / "daily/2026-11-02.md").read_text()
    bad = CliRunner().invoke(cli, ["--vault", str(vault), "remember", "x", "--at", "tomorrow"])
    assert bad.exit_code == 2 and "ISO-8601" in bad.output
    naive = CliRunner().invoke(cli, ["--vault", str(vault), "remember", "x", "--at", "2026-11-02T09:30"])
    assert naive.exit_code == 2 and "UTC offset" in naive.output


@pytest.mark.both_backends
def test_errors_are_one_line_messages_or_json(tmp_path, index_backend):
    missing = CliRunner().invoke(cli, ["--vault", str(tmp_path / "none"), "search", "x"])
    assert missing.exit_code == 1 and "memvault init" in missing.output and "Traceback" not in missing.output
    as_json = CliRunner().invoke(cli, ["--vault", str(tmp_path / "none"), "search", "x", "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.output)["error"]["code"] == "not_a_vault"
    vault = tmp_path / "v"
    assert run("init", str(vault), *init_flags()).exit_code == 0
    secret = CliRunner().invoke(cli, ["--vault", str(vault), "remember", "pw postgres://u:supersecret1@h/db", "--json"])
    assert secret.exit_code == 1 and json.loads(secret.output)["error"]["code"] == "credential_refused"
    again = CliRunner().invoke(cli, ["init", str(vault)])
    assert again.exit_code == 1 and "already a vault" in again.output
    bad_limit = CliRunner().invoke(cli, ["--vault", str(vault), "search", "x", "--limit", "0"])
    assert bad_limit.exit_code == 2


@pytest.mark.both_backends
def test_validate_reports_every_problem(tmp_path, index_backend):
    vault = tmp_path / "v"
    assert run("init", str(vault), *init_flags()).exit_code == 0
    config = json.loads((vault / "memvault.json").read_text())  # its index block (the engine) stays
    config["memory"] = {"mode": "lite", "writeMode": "capture", "colour": 1}
    (vault / "memvault.json").write_text(json.dumps(config))
    out = CliRunner().invoke(cli, ["--vault", str(vault), "validate"])
    assert out.exit_code == 1
    assert "capture" in out.output and "bujo" in out.output and "colour" in out.output


def test_every_command_has_help_text():
    def walk(command, path):
        yield path, command
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                yield from walk(sub, [*path, name])

    for path, command in walk(cli, ["memvault"]):
        assert (command.help or "").strip(), f"{' '.join(path)} has no help text"
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"


def test_cli_reference_doc_is_current():
    committed = (REPO / "docs" / "cli.md").read_text()
    assert committed == render(), "docs/cli.md is stale: run `python -m memvault.cli.docgen > docs/cli.md`"


def _printed_by(probe: str) -> str:
    """What `python -c probe` prints, run from the checkout in a fresh interpreter."""
    return subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout


def test_help_imports_nothing_heavy():
    probe = (
        "import sys; from click.testing import CliRunner; from memvault.cli.main import cli; "
        "r = CliRunner().invoke(cli, ['--help']); assert r.exit_code == 0, r.output; "
        "heavy = [m for m in ('tantivy', 'hnswlib', 'wordllama', 'numpy', 'watchdog', 'mcp', 'anyio') "
        "if m in sys.modules]; "
        "engine = [m for m in sys.modules if m.startswith(('memvault.indexer.engine', 'memvault.indexer.maintenance', "
        "'memvault.indexer.search', 'memvault.indexer.backend', 'memvault.indexer.team', 'memvault.indexer.services', "
        "'memvault.vault.intake', 'memvault.vault.capture', 'memvault.vault.config'))]; "
        "print(','.join(heavy + sorted(engine)))"
    )
    # neither a heavy library nor memvault's engine, intake, capture or config: the command
    # modules defer what only their commands run (docs/contributing.md, tests/test_deferred_imports.py)
    assert _printed_by(probe).strip() == ""


def test_the_thin_client_loads_no_engine_intake_or_note_code():
    """`RemoteStore`, which every command through a running owner uses, loads what a search needs:
    the bulk import, turn admission, note and config code wait for the calls that use them."""
    probe = (
        "import sys, memvault.indexer.engine.remote; "
        "print(','.join(sorted(m for m in sys.modules if m.startswith(('memvault.indexer.engine.bulk', "
        "'memvault.vault.intake', 'memvault.vault.curated', 'memvault.vault.note', 'memvault.vault.config', "
        "'memvault.indexer.maintenance', 'memvault.indexer.search')))))"
    )
    assert _printed_by(probe).strip() == ""


@pytest.mark.both_backends
def test_a_lite_vault_never_loads_numpy(tmp_path, index_backend):
    """Lite never embeds: its searches and remembers load neither numpy nor a vector index (they
    are most of a CLI call's start-up where they are loaded)."""
    vault = tmp_path / "v"
    init = [sys.executable, "-m", "memvault", "init", str(vault), "--mode", "lite", *init_flags()]
    assert subprocess.run(init, cwd=REPO, capture_output=True).returncode == 0
    probe = (
        "import sys; from click.testing import CliRunner; from memvault.cli.main import cli; "
        f"v = {str(vault)!r}; "
        "calls = [['remember', 'Priya lives in Rotterdam.'], ['search', 'Priya'], "
        "['search', 'Where does Priya live?'], ['journal', '2026-01-01', '2026-01-02']]; "
        "codes = [CliRunner().invoke(cli, ['--vault', v, *args]).exit_code for args in calls]; "
        "print(codes, sorted(m for m in ('numpy', 'hnswlib', 'wordllama') if m in sys.modules))"
    )
    assert _printed_by(probe).strip() == "[0, 0, 0, 0] []"


def test_every_command_is_registered_by_the_module_the_group_imports_for_it():
    import importlib

    from memvault.cli.app import COMMAND_MODULES, cli

    for modules in COMMAND_MODULES.values():
        for module in modules:
            importlib.import_module(module)
    assert set(cli.commands) == set(COMMAND_MODULES)
    for name, command in cli.commands.items():
        assert command.callback.__module__ == COMMAND_MODULES[name][0], name


@pytest.mark.both_backends
def test_a_command_imports_only_its_own_module(tmp_path, index_backend):
    """`memvault search` loads neither the MCP server nor the web pages nor the archive code."""
    vault = tmp_path / "v"
    init = [sys.executable, "-m", "memvault", "init", str(vault), "--mode", "lite", *init_flags()]
    assert subprocess.run(init, cwd=REPO, capture_output=True).returncode == 0
    probe = (
        "import sys; from click.testing import CliRunner; from memvault.cli.main import cli; "
        f"r = CliRunner().invoke(cli, ['--vault', {str(vault)!r}, 'search', 'anything']); "
        "assert r.exit_code == 0, r.output; "
        "print(','.join(sorted(m for m in sys.modules if m.startswith('memvault.cli.') and m.endswith("
        "('mcp_command', 'mcp_server', 'mcp_tools', 'archive_commands', '.web.app', '.web.command')))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
