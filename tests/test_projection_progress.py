"""An admitted turn is projected, or health says why it is not (issue 24, section 3): the host's
text that would open a comment is projected with its opener broken up, and a turn that cannot
make progress (a folder where its note goes) is named by `admit`, `health` and `remember`."""

import json

import pytest

from tests.engine_helpers import memvault
from tests.intake_helpers import make_vault
from tests.readonly_helpers import memvault_here_result

pytestmark = pytest.mark.slow


def admit(root, run_id: str, answer: str, completed_at: str = "2026-11-20T10:00:00Z") -> dict:
    done = memvault(root, "admit", input=json.dumps({"runId": run_id, "answer": answer, "completedAt": completed_at}))
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


@pytest.mark.both_backends
@pytest.mark.parametrize("mode", ["lite", "journal"])
def test_an_answer_that_would_open_a_comment_is_projected_readable_and_hides_nothing(tmp_path, mode):
    root = make_vault(tmp_path, mode=mode)
    for run_id, answer in (
        ("r-html", "Deploy paused <!-- waiting on the canary"),
        ("r-obsidian", "Rollback %% pending sign-off"),
    ):
        body = admit(root, run_id, answer)
        assert (body["status"], body["state"]) == ("admitted", "resolved"), body
        assert "problem" not in body
    note = (root / "daily" / "2026-11-20.md").read_text()
    assert "Deploy paused <! -- waiting on the canary" in note and "Rollback % % pending sign-off" in note
    later = admit(root, "r-after", "The canary is green.")  # a line after them is not hidden in a comment
    assert later["state"] == "resolved"
    for query, words in (
        ("canary waiting", "waiting on the canary"),
        ("sign-off rollback", "pending sign-off"),
        ("canary green", "The canary is green."),
    ):
        found = json.loads(memvault_here_result(root, "search", "--json", query).stdout)  # a check: in this process
        assert any(words in hit["text"] for hit in found["hits"]), (query, found)
    health = memvault(root, "health", "--strict")
    assert health.returncode == 0, health.stdout + health.stderr


@pytest.mark.both_backends
def test_a_folder_where_the_note_goes_is_named_by_admit_health_and_remember(tmp_path):
    root = make_vault(tmp_path)
    (root / "daily" / "2026-11-20.md").mkdir(parents=True)
    body = admit(root, "r-folder", "Deployed 2.6.")
    assert (body["status"], body["state"]) == ("admitted", "pending"), body
    assert "daily/2026-11-20.md is a folder" in body["problem"] and "rename or move" in body["problem"]
    health = memvault(root, "health", "--json")
    assert health.returncode == 1
    findings = [f for f in json.loads(health.stdout)["findings"] if f["code"] == "failing_intake"]
    assert [f["severity"] for f in findings] == ["error"]
    assert "daily/2026-11-20.md is a folder" in findings[0]["message"] and "invalid_note" in findings[0]["message"]
    assert f"memvault retry {body['id']}" in findings[0]["fix"] and "daily/2026-11-20.md" in findings[0]["fix"]
    remembered = memvault(root, "remember", "--at", "2026-11-20T12:00:00Z", "Sam moved to Delft.")
    assert remembered.returncode == 1 and "daily/2026-11-20.md is a folder" in remembered.stderr
    assert "Traceback" not in remembered.stderr
    (root / "daily" / "2026-11-20.md").rmdir()
    retried = memvault(root, "retry", body["id"])
    assert retried.returncode == 0, retried.stderr
    admit(root, "r-drain", "Drains the retried turn too.")  # the in-process drain projects what is due
    assert "Deployed 2.6." in (root / "daily" / "2026-11-20.md").read_text()
    healthy = memvault(root, "health")
    assert healthy.returncode == 0, healthy.stdout
