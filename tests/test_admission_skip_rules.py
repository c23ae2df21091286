"""The spec's NOTHING_TO_REPORT skip rule, exactly: "final answers that are NOTHING_TO_REPORT (the
cron/webhook no-op sentinel), or that end with it on their final line". The sentinel is a whole
word: a closing full stop does not hide it, and a longer word that merely ends in it is not it."""

import json

import pytest

from memvault.vault.intake.admission import skip_reason
from tests.engine_helpers import memvault
from tests.intake_helpers import make_vault

SKIPPED = [
    "NOTHING_TO_REPORT",
    "NOTHING_TO_REPORT.",  # issue 24: written as a memory before
    "NOTHING_TO_REPORT!",
    "  NOTHING_TO_REPORT.  \n",
    "Checked the feeds.\nNothing new today. NOTHING_TO_REPORT",
    "Checked the feeds.\nNothing new today. NOTHING_TO_REPORT.",
    "Checked the feeds.\r\nNOTHING_TO_REPORT\r\n",
    "Feeds quiet: NOTHING_TO_REPORT",
    "(quiet) NOTHING_TO_REPORT",
]

WRITTEN = [
    "Done. XNOTHING_TO_REPORT",  # issue 24: skipped before (plain endswith)
    "Done. X_NOTHING_TO_REPORT",
    "NOTHING_TO_REPORT_YET",
    "NOTHING_TO_REPORTS",
    "NOTHING_TO_REPORTED.",
    "nothing_to_report",  # the sentinel is exact, not a lowercased phrase
    "NOTHING_TO_REPORT\nbut the deploy of 2.4 failed",  # not on the final line
    "NOTHING_TO_REPORT about the feeds, except the outage at 09:00",
    "Deployed 2.4; NOTHING_TO_REPORT?",  # a question about it is not the sentinel
]


@pytest.mark.parametrize("answer", SKIPPED)
def test_the_sentinel_ending_the_final_line_is_skipped(answer):
    assert skip_reason(answer) == "nothing_to_report"


@pytest.mark.parametrize("answer", WRITTEN)
def test_near_misses_of_the_sentinel_are_written(answer):
    assert skip_reason(answer) is None


@pytest.mark.both_backends
def test_admit_skips_a_sentinel_with_a_full_stop_and_writes_a_longer_word(tmp_path):
    root = make_vault(tmp_path)
    skipped = memvault(root, "admit", input=json.dumps({"runId": "r-1", "answer": "NOTHING_TO_REPORT."}))
    assert skipped.returncode == 0, skipped.stderr
    assert (json.loads(skipped.stdout)["status"], json.loads(skipped.stdout)["reason"]) == (
        "skipped",
        "nothing_to_report",
    )
    written = memvault(root, "admit", input=json.dumps({"runId": "r-2", "answer": "Done. XNOTHING_TO_REPORT"}))
    assert written.returncode == 0 and json.loads(written.stdout)["status"] == "admitted", written.stdout
    notes = "".join(p.read_text() for p in (root / "daily").glob("*.md"))
    assert "XNOTHING_TO_REPORT" in notes and "NOTHING_TO_REPORT." not in notes
