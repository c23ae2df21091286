"""`memvault admit / inspect / retry / resolve` through click's runner (and one real process)."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.vault.intake.admission import intake_id_for
from tests.intake_helpers import make_vault

SECRET_WORD = "zanzibar"  # appears only in the turn's content


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def turn(run_id="run-1", answer=f"We picked {SECRET_WORD} as the codename.", **extra):
    return json.dumps({"runId": run_id, "answer": answer, "completedAt": "2026-11-30T13:03:00Z", **extra})


@pytest.fixture
def root(tmp_path):
    return make_vault(tmp_path)


@pytest.mark.both_backends
def test_admit_projects_at_once_and_answers_in_json(root):
    out = run("--vault", str(root), "admit", input=turn())
    assert out.exit_code == 0, out.output
    body = json.loads(out.output)
    assert body == {
        "status": "admitted", "id": intake_id_for("run-1"), "reason": None, "message": None,
        "state": "resolved", "worker": "drained",
    }  # fmt: skip
    assert SECRET_WORD in (root / "daily/2026-11-30.md").read_text()
    again = json.loads(run("--vault", str(root), "admit", input=turn()).output)
    assert (again["status"], again["state"]) == ("duplicate", "resolved")
    conflict = run("--vault", str(root), "admit", input=turn(answer="Something else."))
    assert conflict.exit_code == 1 and json.loads(conflict.output)["reason"] == "conflict"


@pytest.mark.parametrize(
    ("stdin", "reason"),
    [
        ("", "invalid_turn"),
        ("not json", "invalid_turn"),
        ("[1, 2]", "invalid_turn"),
        ('{"runId": "r", "answer": "a", "answer": "b"}', "invalid_turn"),
        ('{"runId": "r", "answer": "a", "prompt": "hidden instructions"}', "invalid_turn"),
        ('{"answer": "no run id"}', "invalid_turn"),
        ('{"runId": "r", "answer": "a", "completedAt": "yesterday"}', "invalid_turn"),
        ('{"runId": "r", "answer": "a", "completedAt": "2026-11-30T13:03:00"}', "invalid_turn"),
        ('{"runId": "r", "answer": "a", "trigger": "email"}', "invalid_turn"),
        ('{"runId": "r", "answer": "a", "completedAt": 5}', "invalid_turn"),
        ('{"runId": "r", "answer": "token: sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8t"}', "credential_refused"),
    ],
)
def test_admit_reports_bad_turns_as_json_failures(root, stdin, reason):
    out = run("--vault", str(root), "admit", input=stdin)
    assert out.exit_code == 1
    body = json.loads(out.output)
    assert (body["status"], body["reason"]) == ("failed", reason)
    assert not list((root / "daily").glob("*.md"))


def test_admit_skips_are_success_without_writing(root):
    out = run("--vault", str(root), "admit", input=turn(answer="All quiet.\nNOTHING_TO_REPORT"))
    assert out.exit_code == 0
    assert (json.loads(out.output)["status"], json.loads(out.output)["reason"]) == ("skipped", "nothing_to_report")


def test_admit_outside_a_vault_is_a_json_error(tmp_path):
    out = run("--vault", str(tmp_path / "nowhere"), "admit", input=turn())
    assert out.exit_code == 1 and json.loads(out.output)["error"]["code"] == "not_a_vault"


@pytest.mark.both_backends
def test_inspect_shows_states_and_counts_but_never_content(root):
    run("--vault", str(root), "admit", input=turn())
    poison = b"# 2026-12-01\n\n- \xff\n"
    (root / "daily/2026-12-01.md").write_bytes(poison)
    stuck = json.dumps({"runId": "run-2", "answer": f"{SECRET_WORD} again", "completedAt": "2026-12-01T10:00:00Z"})
    assert json.loads(run("--vault", str(root), "admit", input=stuck).output)["state"] == "pending"
    report = run("--vault", str(root), "inspect", "--json")
    assert report.exit_code == 0
    body = json.loads(report.output)
    assert body["counts"] == {"pending": 1, "awaitingCapture": 0, "dead": 0, "resolved": 1, "due": 0, "invalid": 0}
    assert body["ledger"]["ok"] and body["ledger"]["entries"] == 1
    states = {row["id"]: (row["state"], row.get("failure")) for row in body["records"]}
    assert states == {intake_id_for("run-1"): ("resolved", None), intake_id_for("run-2"): ("pending", "invalid_note")}
    plain = run("--vault", str(root), "inspect")
    one = run("--vault", str(root), "inspect", intake_id_for("run-2"), "--json")
    for output in (report.output, plain.output, one.output):
        assert SECRET_WORD not in output and "run-1" not in output and "run-2" not in output
    assert "1 pending" in plain.output and "ledger: ok" in plain.output
    assert json.loads(one.output)["entries"][0]["attempts"] == 1


def test_retry_and_resolve_from_the_command_line(root):
    (root / "daily/2026-11-30.md").write_bytes(b"\xff")
    run("--vault", str(root), "admit", input=turn())
    intake_id = intake_id_for("run-1")
    retried = run("--vault", str(root), "retry", intake_id, "--json")
    assert retried.exit_code == 0 and json.loads(retried.output) == {
        "retried": [{"id": intake_id, "outcome": "made_due"}]
    }
    assert run("--vault", str(root), "retry").output.strip() == "Nothing to retry: no dead or delayed intake records."
    bad_slug = run("--vault", str(root), "resolve", intake_id, "Bad Slug", "--json")
    assert bad_slug.exit_code == 1 and json.loads(bad_slug.output)["error"]["code"] == "invalid_record"
    done = run("--vault", str(root), "resolve", intake_id, "corrupt-note")
    assert done.exit_code == 0 and done.output.strip() == f"{intake_id}: operator_resolved"
    assert (
        json.loads(run("--vault", str(root), "resolve", intake_id, "again", "--json").output)["outcome"]
        == "already_resolved"
    )


@pytest.mark.parametrize("command", ["inspect", "retry", "resolve"])
def test_malformed_ids_are_usage_errors(root, command):
    args = ["--vault", str(root), command, "../../etc/passwd"] + (["slug"] if command == "resolve" else [])
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 2 and "not an intake id" in out.output


def test_retry_is_refused_while_a_live_process_holds_the_vault(root):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from memvault.vault.locks import LivenessFence; "
         "LivenessFence(sys.argv[1]).hold(); print('held', flush=True); sys.stdin.readline()", str(root)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        out = run("--vault", str(root), "retry", "--json")
        assert out.exit_code == 1 and json.loads(out.output)["error"]["code"] == "vault_locked"
        admitted = json.loads(run("--vault", str(root), "admit", input=turn()).output)
        assert admitted["state"] == "pending" and admitted["worker"].startswith("deferred:")
    finally:
        holder.communicate("\n", timeout=10)


@pytest.mark.both_backends
def test_admit_as_a_real_process(root):
    done = subprocess.run(
        [sys.executable, "-m", "memvault", "--vault", str(root), "admit"],
        input=turn(trigger="cron"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["state"] == "resolved"
