"""Papercuts a new user meets on the command line (issue 24, section 7), each through the CLI."""

import importlib
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import memvault
from memvault.cli.main import cli
from tests.postgres_helpers import on_test_backend

REPO = Path(__file__).resolve().parent.parent


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def ok(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


# --- remember: a fact may start with '-' -----------------------------------------------------


@pytest.mark.parametrize("fact", ["- [ ] Ask Alice about the budget", "- [x] Book the room", "---", "-> ship it",
                                  "-5 degrees at the site"])  # fmt: skip
@pytest.mark.both_backends
def test_remember_takes_text_that_starts_with_a_dash_as_the_fact(new_vault, fact):
    receipt = json.loads(ok("--vault", str(new_vault), "remember", fact, "--json").output)
    assert receipt["status"] == "added"
    note = (new_vault / receipt["source"].split("#")[0]).read_text(encoding="utf-8")
    assert f" {fact} ^{receipt['id']}\n" in note
    again = json.loads(ok("--vault", str(new_vault), "remember", "--json", fact).output)  # option first, too
    assert again["status"] == "duplicate" and again["id"] == receipt["id"]


@pytest.mark.both_backends
def test_a_mistyped_option_still_fails_and_says_how_to_store_such_text(new_vault):
    typo = invoke("--vault", str(new_vault), "remember", "--jsn", "Standup moved.")
    assert typo.exit_code == 2 and "No such option '--jsn'" in typo.output
    assert "put `--` before it" in typo.output
    assert not (new_vault / "daily").exists() or not list((new_vault / "daily").glob("*.md"))
    stored = json.loads(ok("--vault", str(new_vault), "remember", "--json", "--", "--jsn").output)
    assert stored["status"] == "added"


# --- did you mean ------------------------------------------------------------------------------


def _fresh_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real command in a new process: commands load lazily, so only a fresh process shows
    what a person sees (click alone suggests only among the commands already loaded)."""
    return subprocess.run([sys.executable, "-m", "memvault", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_a_mistyped_command_is_answered_with_the_closest_ones(new_vault):
    typo = _fresh_cli("serach", "blue", cwd=new_vault)
    assert typo.returncode == 2 and "Did you mean 'search'?" in typo.stderr, typo.stderr
    nested = _fresh_cli("runtime", "ad", "user", "x", cwd=new_vault)
    assert nested.returncode == 2 and "Did you mean 'add'?" in nested.stderr, nested.stderr
    nothing_close = _fresh_cli("zzzzzz", cwd=new_vault)
    assert nothing_close.returncode == 2 and "No such command 'zzzzzz'" in nothing_close.stderr
    assert "Did you mean" not in nothing_close.stderr


# --- journal: the CLI's own names, one date for one day ---------------------------------------

MCP_NAMES = ("fromDate", "throughDate", "timeZone", "{cursor}")


# local only: each request is refused before any index is read (a server run never reaches the server); what
# counts the local run as opening an index is `.index/journal/cursor.key`, the CLI's journal cursor key
@pytest.mark.one_engine("refused before any index is read; locally only the CLI's journal cursor key is written")
@pytest.mark.parametrize(
    "args, says",
    [
        ([], "FROM is required"),
        (["2026-09-03", "2026-09-01"], "THROUGH 2026-09-01 is before FROM 2026-09-03"),
        (["2026-09-31"], "FROM 2026-09-31 does not exist"),
        (["2026-09-01", "--tz", "Mars/Olympus"], "--tz 'Mars/Olympus' is not an IANA zone"),
        (["2026-09-01", "--limit", "0"], "--limit must be at least 1"),
        (["--cursor", "abc", "2026-09-01"], "a continuation takes only --cursor; FROM cannot be given"),
        (["--cursor", "abc"], "start again with FROM, THROUGH and --tz"),
    ],
)
def test_journal_errors_name_the_cli_arguments_not_the_mcp_fields(new_vault, args, says):
    for as_json in (False, True):
        result = invoke("--vault", str(new_vault), "journal", *args, *(["--json"] if as_json else []))
        assert result.exit_code == 1 and says in result.output, result.output
        assert not any(name in result.output for name in MCP_NAMES), result.output


@pytest.mark.both_backends
def test_journal_of_one_day_needs_its_date_once(new_vault):
    ok("--vault", str(new_vault), "remember", "Standup moved to 10:00.", "--at", "2026-09-01T09:30:00+02:00")
    body = json.loads(ok("--vault", str(new_vault), "journal", "2026-09-01", "--json").output)
    assert (body["range"]["fromDate"], body["range"]["throughDate"]) == ("2026-09-01", "2026-09-01")
    assert [entry["text"] for entry in body["entries"]] == ["Standup moved to 10:00."]


# --- remember --at a bare date ----------------------------------------------------------------


@pytest.mark.both_backends
def test_remember_at_a_bare_date_is_the_start_of_that_day_in_the_vaults_zone(new_vault):
    out = ok("--vault", str(new_vault), "remember", "Kickoff held.", "--at", "2026-09-01", "--json").output
    receipt = json.loads(out)
    assert receipt["source"].startswith("daily/2026-09-01.md#^")
    assert "- 00:00 Kickoff held. ^" in (new_vault / "daily" / "2026-09-01.md").read_text(encoding="utf-8")
    naive = invoke("--vault", str(new_vault), "remember", "x", "--at", "2026-09-01T10:00")
    assert naive.exit_code == 2 and "UTC offset" in naive.output and "bare date" in naive.output
    impossible = invoke("--vault", str(new_vault), "remember", "x", "--at", "2026-02-30")
    assert impossible.exit_code == 2 and "does not exist in the calendar" in impossible.output


@pytest.mark.both_backends
def test_a_bare_date_whose_midnight_never_happened_starts_when_the_day_did(tmp_path):
    vault = tmp_path / "chile"
    ok("init", str(vault), "--mode", "lite", "--time-zone", "America/Santiago")
    on_test_backend(vault)
    # 2026-09-06: Chile's clocks jump from 00:00 to 01:00, so the day begins at 01:00
    ok("--vault", str(vault), "remember", "Clocks went forward.", "--at", "2026-09-06")
    assert "- 01:00 Clocks went forward. ^" in (vault / "daily" / "2026-09-06.md").read_text(encoding="utf-8")


# --- memvault.__version__ ----------------------------------------------------------------------


def test_the_package_says_its_version():
    assert memvault.__version__ == importlib.metadata.version("memvault")
    assert ok("--version").output.strip().endswith(memvault.__version__)


# --- docs name modules that exist ----------------------------------------------------------------

_DOTTED = re.compile(r"`(memvault(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
_UNPREFIXED = re.compile(r"`((?:vault|indexer|cli)\.[A-Za-z_][A-Za-z0-9_.]*)`")
_FILE_SUFFIXES = {"json", "jsonl", "md", "fish", "toml", "py", "bash", "zsh"}


def _doc_files() -> list[Path]:
    return sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(target, attr):
                return False
            target = getattr(target, attr)
        return True
    return False


def test_every_module_path_the_docs_name_imports():
    named = {
        (doc.name, match)
        for doc in _doc_files()
        for match in _DOTTED.findall(doc.read_text(encoding="utf-8"))
        if match.rsplit(".", 1)[-1] not in _FILE_SUFFIXES
    }
    assert len(named) >= 15  # python-api.md alone names a table of them
    assert sorted(path for path in named if not _resolves(path[1])) == []
    stale = [(doc.name, m) for doc in _doc_files() for m in _UNPREFIXED.findall(doc.read_text(encoding="utf-8"))]
    assert stale == []  # pre-rename paths (`vault.errors…`): the package is memvault.vault


def test_the_python_api_table_names_each_class_where_it_lives():
    text = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (.+?) \| `(memvault\.[a-z_.]+)` \|$", text, re.MULTILINE)
    assert len(rows) >= 12
    for names, module in rows:
        loaded = importlib.import_module(module)
        for name in re.findall(r"`([A-Z][A-Za-z]+)`", names):
            assert hasattr(loaded, name), f"{module} has no {name}"


# --- health names the file ---------------------------------------------------------------------


@pytest.mark.both_backends
def test_health_text_names_the_file_a_not_indexed_warning_is_about(new_vault):
    (new_vault / "daily" / "meeting notes.md").write_text("- 09:00 a person's own page\n", encoding="utf-8")
    result = invoke("--vault", str(new_vault), "health")
    line = next(line for line in result.output.splitlines() if "not indexed" in line)
    assert "daily/meeting notes.md" in line


# --- engine status: exit 1 without an owner, and says so -----------------------------------------


def test_engine_status_exits_1_without_an_owner_and_its_help_says_so(new_vault):
    help_text = ok("engine", "status", "--help").output
    assert "1 when no owner runs" in " ".join(help_text.split())
    result = invoke("--vault", str(new_vault), "engine", "status", "--json")
    assert result.exit_code == 1 and json.loads(result.output)["running"] is False


# --- the fixture vault does not contradict what is indexed ---------------------------------------


@pytest.mark.both_backends
def test_the_fixture_callout_is_a_memory_and_says_so(fixture_vault):
    hits = json.loads(ok("--vault", str(fixture_vault), "search", "callout", "--json").output)["hits"]
    callout = [hit for hit in hits if hit["source"].startswith("daily/2026-11-02.md")]
    assert callout and "not a memory" not in callout[0]["text"]
    assert "memory too" in callout[0]["text"]
