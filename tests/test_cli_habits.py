"""Habits a shell user expects: -h, shell completion, and defaults taken from the vault."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "memvault", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})  # fmt: skip


@pytest.mark.parametrize("args", [["-h"], ["search", "-h"], ["journal", "-h"], ["completion", "-h"]])
def test_dash_h_is_help(args):
    short = CliRunner().invoke(cli, args, catch_exceptions=False)
    long = CliRunner().invoke(cli, [*args[:-1], "--help"], catch_exceptions=False)
    assert short.exit_code == 0 and short.output.startswith("Usage: ")
    assert short.output == long.output


@pytest.mark.parametrize("shell, marker", [("bash", "complete -o nosort -F _memvault_completion memvault"),
                                           ("zsh", "#compdef memvault"),
                                           ("fish", "complete --no-files --command memvault")])  # fmt: skip
def test_completion_scripts_name_the_command(shell, marker):
    done = CliRunner().invoke(cli, ["completion", shell], catch_exceptions=False)
    assert done.exit_code == 0 and marker in done.output and "_MEMVAULT_COMPLETE" in done.output


def test_completion_answers_a_real_shell_request():
    """What the bash script asks the command for, and what it gets back: the matching commands."""
    done = run(env={"COMP_WORDS": "memvault se", "COMP_CWORD": "1", "_MEMVAULT_COMPLETE": "bash_complete"})
    assert done.returncode == 0, done.stderr
    assert "plain,search" in done.stdout.splitlines()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_completion_works_inside_bash():
    script = 'eval "$(memvault completion bash)"; COMP_WORDS=(memvault jour); COMP_CWORD=1; ' \
             '_memvault_completion memvault; printf "%s\\n" "${COMPREPLY[@]}"'  # fmt: skip
    bindir = os.path.dirname(sys.executable)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PATH": bindir + os.pathsep + os.environ["PATH"]})  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["journal"]


def test_an_unknown_shell_is_a_usage_error():
    done = CliRunner().invoke(cli, ["completion", "tcsh"])
    assert done.exit_code == 2 and "'tcsh' is not one of 'bash', 'zsh', 'fish'" in done.output


@pytest.mark.both_backends
def test_journal_takes_the_vaults_zone_when_no_tz_is_given(fixture_vault):
    implicit = CliRunner().invoke(cli, ["--vault", str(fixture_vault), "journal", "2026-11-01", "2026-11-02", "--json"],
                                  catch_exceptions=False)  # fmt: skip
    explicit = CliRunner().invoke(cli, ["--vault", str(fixture_vault), "journal", "2026-11-01", "2026-11-02",
                                        "--tz", "Europe/Amsterdam", "--json"], catch_exceptions=False)  # fmt: skip
    assert implicit.exit_code == 0, implicit.output
    body = json.loads(implicit.output)
    assert body["range"]["timeZone"] == "Europe/Amsterdam"
    assert body["range"]["utcStart"] == "2026-10-31T23:00:00Z"
    assert body["entries"] == json.loads(explicit.output)["entries"] != []


@pytest.mark.both_backends
def test_an_explicit_zone_still_wins(fixture_vault):
    done = CliRunner().invoke(cli, ["--vault", str(fixture_vault), "journal", "2026-11-01", "2026-11-01",
                                    "--tz", "America/New_York", "--json"], catch_exceptions=False)  # fmt: skip
    assert json.loads(done.output)["range"]["utcStart"] == "2026-11-01T04:00:00Z"
