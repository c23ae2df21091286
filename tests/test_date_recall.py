"""Date-aware recall: the periods a question names, resolved to local dates, favour memories dated
in them or up to a week after; one grammar for routing and recall; no period, no change."""

import datetime as dt
import json
from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.search import routing
from memvault.indexer.search.periods import PERIOD, question_periods
from memvault.indexer.search.routing import Route, route_query
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from tests.postgres_helpers import on_test_backend, on_the_tests_backend

# both_backends tests name no vault fixture that asks for index_backend: without this, their postgres run
# never sets it up and runs locally again (TEST_BACKEND stays "local", no server is checked)
pytestmark = pytest.mark.usefixtures("index_backend")

TODAY = date(2026, 12, 2)  # a Wednesday

RESOLVED = [
    ("Which city was Calvin in on October 3, 2023?", "2023-10-03", "2023-10-03"),
    ("What did Nate make on 9 November, 2022?", "2022-11-09", "2022-11-09"),
    ("What did Tim finish reading on 8th December, 2023?", "2023-12-08", "2023-12-08"),
    ("Where was the picture shared on December 1,2023 taken?", "2023-12-01", "2023-12-01"),
    ("notes from 2023-10-03", "2023-10-03", "2023-10-03"),
    ("What was Dave doing in the first weekend of October 2023?", "2023-10-07", "2023-10-08"),
    ("Which country was Tim visiting in the second week of November 2023?", "2023-11-08", "2023-11-14"),
    ("Where was John between August 11 and August 15 2023?", "2023-08-11", "2023-08-15"),
    ("Where was Tim in the week before 16 November 2023?", "2023-11-09", "2023-11-15"),
    ("What filling did Nate use in May 2022?", "2022-05-01", "2022-05-31"),
    ("what happened in early May 2023", "2023-05-01", "2023-05-10"),
    ("What did we plan in the summer of 2022?", "2022-06-01", "2022-08-31"),
    ("Where did we ski in winter 2023?", "2022-12-01", "2023-02-28"),
    ("What charity event did John organize in 2024?", "2024-01-01", "2024-12-31"),
    # relative to today, in the vault's zone
    ("What did we decide two days ago?", "2026-11-30", "2026-11-30"),
    ("what did Morgan say yesterday", "2026-12-01", "2026-12-01"),
    ("which bug did we fix last week", "2026-11-23", "2026-11-29"),
    ("what did I cook last Friday", "2026-11-27", "2026-11-27"),
    ("the rollout decision last month", "2026-11-01", "2026-11-30"),
    ("deploys in the past 3 days", "2026-11-29", "2026-12-02"),
    ("what did we buy in March", "2026-03-01", "2026-03-31"),  # the latest March that has begun
    ("what did we buy in December", "2026-12-01", "2026-12-31"),
    ("the trip last summer", "2026-06-01", "2026-08-31"),
    ("3 weeks ago at the offsite", "2026-11-08", "2026-11-14"),
]


@pytest.mark.parametrize(("question", "start", "end"), RESOLVED)
def test_a_named_period_resolves_to_local_dates(question, start, end):
    (period,) = question_periods(question, TODAY)
    assert (period.start.isoformat(), period.end.isoformat()) == (start, end)


@pytest.mark.parametrize(
    "question",
    [
        "Which color did Morgan choose?",
        "What may I bring?",
        "the fall of Rome",
        "Did the price spring back?",
        "What is 2023 times 4?",
        "Remember the 40 days of rain",
        "February 30 2023 deadline",
        "x" * 5000,
    ],
)
def test_questions_without_a_period_resolve_to_nothing(question):
    assert question_periods(question, TODAY) == ()


def test_two_periods_in_one_question_are_both_read_in_order():
    periods = question_periods("What changed between last week and on 3 May 2024?", TODAY)
    assert [(p.start.isoformat(), p.end.isoformat()) for p in periods] == [
        ("2026-11-23", "2026-11-29"),
        ("2024-05-03", "2024-05-03"),
    ]


def test_routing_builds_its_broad_period_pattern_from_the_same_grammar():
    assert routing._PERIOD is PERIOD
    for question in ("What did we work on last week?", "what happened in September?", "summarize last month"):
        assert route_query(question) is Route.BROAD_PERIOD
        assert question_periods(question, TODAY)  # and recall resolves what routing recognised


# --- recall ------------------------------------------------------------------------------------------

UTC = ZoneInfo("UTC")
#: the out-of-period memory matches the words better: only its date can put the other first
OCTOBER = "Dave: Last Friday I went to the car show with my dad."
JUNE = "Dave: The car show! I went to the car show and loved the car show."


@pytest.fixture
def dated_vault(tmp_path, request):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="UTC")))
    on_the_tests_backend(request, root)
    with MemoryStore.open(root) as store:
        store.remember(OCTOBER, at=datetime(2023, 10, 9, 18, 0, tzinfo=UTC))
        store.remember(JUNE, at=datetime(2023, 6, 1, 18, 0, tzinfo=UTC))
    return root


@pytest.mark.both_backends
def test_a_named_period_puts_the_memory_dated_just_after_it_first(dated_vault):
    with MemoryStore.open(dated_vault) as store:
        plain = store.recall("What did Dave do at the car show?", limit=2)
        dated = store.recall("What did Dave do at the car show in the first weekend of October 2023?", limit=2)
    assert plain.hits[0].text == JUNE  # without a period, words decide
    assert dated.hits[0].text == OCTOBER  # 9 October is within a week after the 7-8 October weekend
    assert dated.hits[0].explain["date"]["rank"] == 1 and "date" not in dated.hits[1].explain
    assert dated.explain["periods"] == [
        {"from": "2023-10-07", "through": "2023-10-08", "phrase": "the first weekend of october 2023"}
    ]


@pytest.mark.both_backends
def test_a_memory_more_than_a_week_after_the_period_is_not_favoured(dated_vault):
    with MemoryStore.open(dated_vault) as store:
        late = store.recall("What did Dave do at the car show in September 2023?", limit=2)
    assert late.hits[0].text == JUNE and all("date" not in hit.explain for hit in late.hits)


@pytest.mark.both_backends
def test_relative_periods_are_read_in_the_vaults_zone(tmp_path):
    root = tmp_path / "v"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="Pacific/Auckland")))
    on_test_backend(root)
    auckland = ZoneInfo("Pacific/Auckland")
    with MemoryStore.open(root) as store:
        store.remember(
            "We fixed the login bug in the billing service.", at=datetime(2026, 12, 2, 15, 0, tzinfo=auckland)
        )
        store.remember(
            "The login bug in the billing service is back, the login bug again.",
            at=datetime(2026, 11, 20, 15, 0, tzinfo=auckland),
        )
    with MemoryStore.open(root) as store:  # every vector in place: the order is the same every run
        # 23:30 UTC on 2 December is already 3 December in Auckland: "yesterday" there is 2 December
        store._clock = lambda: datetime(2026, 12, 2, 23, 30, tzinfo=dt.UTC)
        result = store.recall("what happened to the login bug yesterday?", limit=2)
    assert result.explain["periods"][0]["from"] == "2026-12-02"
    assert result.hits[0].text == "We fixed the login bug in the billing service."


@pytest.mark.both_backends
def test_explain_shows_the_period_in_the_cli(dated_vault):
    from click.testing import CliRunner

    from memvault.cli.main import cli

    out = CliRunner().invoke(
        cli, ["--vault", str(dated_vault), "search", "car show on 9 October 2023", "--explain"], catch_exceptions=False
    )
    assert "period: '9 october 2023' = 2023-10-09 .. 2023-10-09 (and a week after)" in out.output
    as_json = CliRunner().invoke(
        cli,
        ["--vault", str(dated_vault), "search", "car show on 9 October 2023", "--explain", "--json"],
        catch_exceptions=False,
    )
    assert json.loads(as_json.output)["explain"]["periods"][0]["from"] == "2023-10-09"
