"""A task's state is kept in what is indexed and shown, and can be asked about (issue 24, item 5):
`- [x] Book the room` and `- [ ] Ask Alice` no longer come back alike."""

import json
from datetime import date

import pytest
from click.testing import CliRunner

from memvault.cli.main import cli
from memvault.vault.note import parse
from memvault.vault.plaintext import plain_text, task_state
from memvault.vault.records import records_from_note

NOTE = (
    "# 2026-12-02\n\n"
    "- [x] Book the room for the offsite\n"
    "- [ ] Ask Alice about the budget\n"
    "- [X] Send the invoice to Delta\n"
    "1. [ ] Renew the domain name\n"
    "- Morgan chose blue as the deployment color.\n"
    "- The release train leaves on Thursdays.\n"
    "- [ ]\n"
    "- [handbook](https://example.org) link for newcomers\n"
)


def test_the_box_stays_in_the_text_normalised():
    texts = [text for bullet in parse(NOTE).bullets if (text := plain_text(bullet.text))]  # empty: no memory
    assert texts[:4] == ["[x] Book the room for the offsite", "[ ] Ask Alice about the budget",
                         "[x] Send the invoice to Delta", "[ ] Renew the domain name"]  # fmt: skip
    assert [task_state(text) for text in texts] == ["done", "open", "done", "open", None, None, None]
    assert texts[-1] == "handbook link for newcomers"  # a link is not a box; an empty task is no memory
    assert plain_text("[ ] **Call** [[Bob|Robert]]") == "[ ] Call Robert"


def test_ids_of_hand_typed_tasks_are_what_they_were():
    # derived ids and content hashes come from the line's own markdown, which this change leaves
    # alone: ids people may already link to and vectors keyed by content stay valid (pinned literals)
    records = records_from_note("daily/2026-12-02.md", "daily", date(2026, 12, 2), parse(NOTE), "Europe/Amsterdam")
    by_text = {record.text: record.id for record in records}
    assert by_text["[x] Book the room for the offsite"] == "d-fb7e94abe6"
    assert by_text["[ ] Ask Alice about the budget"] == "d-00ce72480a"


def _search(root, query: str) -> list[dict]:
    done = CliRunner().invoke(cli, ["--vault", str(root), "search", query, "--json"], catch_exceptions=False)
    return json.loads(done.output)["hits"]


@pytest.mark.both_backends
def test_open_and_done_tasks_are_found_and_shown_apart(new_vault):
    (new_vault / "daily" / "2026-12-02.md").write_text(NOTE)
    for query in ("which tasks are still open?", "open tasks"):
        hits = _search(new_vault, query)
        assert {hit["task"] for hit in hits[:2]} == {"open"}, (query, hits)
        assert {hit["text"] for hit in hits[:2]} == {"[ ] Ask Alice about the budget", "[ ] Renew the domain name"}
    hits = _search(new_vault, "completed tasks")
    assert {hit["text"] for hit in hits[:2]} == {"[x] Book the room for the offsite", "[x] Send the invoice to Delta"}
    assert "task" not in _search(new_vault, "deployment color")[0]
    text = CliRunner().invoke(cli, ["--vault", str(new_vault), "search", "Alice budget"], catch_exceptions=False)
    assert "[ ] Ask Alice about the budget" in text.output
