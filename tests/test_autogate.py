"""The auto-mode gate: score band, direct-fact shapes, abstentions, caps and hostile input.

Tables name the spec's shapes ("Recall scoring"): every admitted shape and every abstaining shape
has at least two cases that must admit and two that must not.
"""

import math
import re
from datetime import UTC, datetime

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memvault.indexer.search import directfacts
from memvault.indexer.search.autogate import WINDOW as GATE_WINDOW
from memvault.indexer.search.autogate import Candidate, GateResult, gate_auto, score_band
from memvault.indexer.search.directfacts import classify_question, record_value
from memvault.indexer.search.routing import Route

#: the spec's caps on automatic recall: "capped at five hits / 8 KB"
SPEC_MAX_HITS = 5
SPEC_MAX_BYTES = 8 * 1024
#: "the 0.65 absolute / 77% top-relative score band"
SPEC_BAND_FLOOR = 0.65


def cand(text, strength=0.9, score=None, id=None, source=""):
    """A candidate; ids default to the text so duplicates are easy to build on purpose."""
    return Candidate(
        id or f"m-{abs(hash(text)) % 10**10:010d}", text, strength if score is None else score, strength, source
    )


def admitted(question, *records, **kw):
    return gate_auto(question, [cand(text, **kw) for text in records])


# --- admitted shapes ----------------------------------------------------------------------------

ADMITTED = [
    # possessive property
    ("possessive_property", "What is Morgan's phone number?", "Morgan's phone number is +31 6 1234 5678."),
    ("possessive_property", "What's Priya's favourite colour?", "Priya's favorite color is teal."),
    ("possessive_property", "What are James' shoe sizes?", "James' shoe size is 44."),
    ("possessive_property", "what is the team's standup time", "The team's standup time is 10:00."),
    ("possessive_property", "What is Morgan's email?", "Morgan's email is morgan@example.org ^m-1f3a9c0d2e"),
    # direct choice
    ("direct_choice", "Which color did Morgan choose for deployment?", "Morgan selected blue as the deployment color."),
    (
        "direct_choice",
        "What colour did Morgan pick for the deployment?",
        "Morgan chose blue as the color for the deployment.",
    ),
    ("direct_choice", "Which database did Priya select?", "Priya picked Postgres as the database."),
    (
        "direct_choice",
        "What did Morgan choose as the deployment color?",
        "Morgan has chosen blue as the deployment colour.",
    ),
    ("direct_choice", "Which font has Lena picked for the slides?", "Lena selected Inter for the slides font."),
    # direct event date/time
    ("event_time", "When is the offsite?", "The offsite is on 14 January."),
    ("event_time", "When is the offsite?", "The offsite is on Tuesday 14 January at 10:00 CET."),
    ("event_time", "What time is the standup?", "The standup is at 10:00."),
    ("event_time", "What date is the launch?", "The launch is scheduled for 2026-11-30."),
    ("event_time", "When is Release 2.4?", "Release 2.4 is planned for the first Tuesday of December."),
    ("event_time", "When is Morgan's birthday?", "Morgan's birthday is on 3 May."),
    ("event_time", "When does the workshop start?", "The workshop starts at 9am."),
    ("event_time", "When will the review be?", "The review will be on Friday 16:30 Europe/Amsterdam."),
    # direct work/live location
    ("work_live_location", "Where does Priya live?", "Priya lives in Rotterdam."),
    ("work_live_location", "Where did Priya live?", "Priya lived in Rotterdam, Netherlands."),
    ("work_live_location", "Where does Priya work?", "Priya works at Acme Corp."),
    ("work_live_location", "Where does Sam work?", "Sam worked for the city council."),
    ("work_live_location", "Where is Lena working?", "Lena is working at the Utrecht office."),
    ("work_live_location", "Where does Morgan live?", "Morgan has lived in Den Haag."),
]


@pytest.mark.parametrize(("shape", "question", "record"), ADMITTED)
def test_admitted_shapes(shape, question, record):
    result = admitted(question, record)
    assert result.reason == "admitted", result.to_json()
    assert result.shape == shape
    assert [hit.text for hit in result.hits] == [record]
    assert result.bytes == len(record.encode("utf-8"))


@pytest.mark.parametrize("shape", sorted({shape for shape, _, _ in ADMITTED}))
def test_every_admitted_shape_has_at_least_two_cases(shape):
    assert sum(1 for s, _, _ in ADMITTED if s == shape) >= 2


@pytest.mark.parametrize(
    ("question", "record", "value"),
    [
        ("What is Morgan's phone number?", "Morgan's phone number is +31 6 1234 5678.", "+31 6 1234 5678"),
        ("Which color did Morgan choose for deployment?", "Morgan selected blue as the deployment color.", "blue"),
        ("When is the offsite?", "The offsite is on 14 January.", "on 14 january"),
        ("Where does Priya live?", "Priya lives in Rotterdam.", "rotterdam"),
    ],
)
def test_the_bound_value_is_the_records_own(question, record, value):
    q, _ = classify_question(question)
    assert record_value(q, record) == value


# --- shapes that do not match: subject, property, verb or value kind differs ----------------------

MISMATCHED = [
    ("What is Morgan's phone number?", "Priya's phone number is 555 0101."),  # subject
    ("What is Morgan's phone number?", "Morgan's fax number is 555 0101."),  # property
    ("What is Morgan's phone number?", "Morgan's manager's phone number is 555 0101."),  # nested owner
    ("Which color did Morgan choose for deployment?", "Morgan chose blue as the logo color."),
    ("Which color did Morgan choose for deployment?", "Morgan chose blue."),  # no property
    ("Which color did Morgan choose?", "Morgan chose blue as the deployment color."),  # property is narrower
    ("When is the offsite?", "The offsite is in Lisbon."),  # a place, not a date
    ("When is the offsite?", "The team offsite is on 14 January."),  # a different event
    ("When is the offsite?", "The offsite is on 14 January at the Lisbon office."),  # not only a date
    ("What time is the standup?", "The standup is on Monday."),  # a date where a time was asked
    ("What date is the launch?", "The launch is at 10:00."),  # a time where a date was asked
    ("When is the offsite?", "The offsite is tomorrow."),  # relative to an unknown day
    ("Where does Priya live?", "Priya works in Rotterdam."),  # work is not live
    ("Where does Priya work?", "Priya lives in Rotterdam."),
    ("Where does Priya live?", "Priya loves Rotterdam."),
    ("Where does Priya live?", "Morgan lives in Rotterdam."),
]


@pytest.mark.parametrize(("question", "record"), MISMATCHED)
def test_shape_mismatches_inject_nothing(question, record):
    result = admitted(question, record)
    assert result.hits == ()
    assert result.reason == "no_direct_fact"


# --- abstaining shapes: the question --------------------------------------------------------------

ABSTAINING_QUESTIONS = [
    ("abstain:coordination", "Which color did Morgan and Priya choose for deployment?"),
    ("abstain:coordination", "Where do Morgan or Priya live?"),
    ("abstain:coordination", "When is the offsite and the retro?"),
    ("abstain:reported_speech", "Which color did Sam say Morgan chose for deployment?"),
    ("abstain:reported_speech", "What phone number did Morgan give Priya?"),
    ("abstain:reported_speech", "Where did Morgan tell Priya she lives?"),
    ("abstain:negation", "Where does Priya not live?"),
    ("abstain:negation", "Which color did Morgan never choose for deployment?"),
    ("abstain:negation", "Where doesn't Priya work anymore?"),
    ("abstain:actor_question", "Who chose blue?"),
    ("abstain:actor_question", "Who is Morgan's manager?"),
    ("abstain:actor_question", "Whose phone number is 555 0101?"),
    ("abstain:actor_question", "Which person chose blue as the deployment color?"),
    ("abstain:relationship", "What is Morgan's manager?"),
    ("abstain:relationship", "What is Priya's partner?"),
    ("abstain:subordinate_clause", "Where does Priya live because of work?"),
    ("abstain:subordinate_clause", "When is the offsite if it rains?"),
    ("abstain:subordinate_clause", "Which color did Morgan choose for the deployment that failed?"),
    ("abstain:multi_hop", "What is Morgan's manager's phone number?"),
    ("abstain:multi_hop", "Where does Morgan's sister live?"),
    ("abstain:multi_hop", "When is Morgan's partner's birthday?"),
    ("unsupported_question", "Tell me about Morgan."),
    ("unsupported_question", "What is her phone number?"),
    ("unsupported_question", "Where does she live?"),
    ("unsupported_question", "Why did Morgan choose blue?"),
]


@pytest.mark.parametrize(("reason", "question"), ABSTAINING_QUESTIONS)
def test_abstaining_questions(reason, question):
    # even a record that would bind the words is not injected
    records = [
        "Morgan's phone number is 555 0101.",
        "Priya lives in Rotterdam.",
        "Morgan chose blue as the deployment color.",
    ]
    result = admitted(question, *records)
    assert result.hits == ()
    assert result.reason == reason


# --- abstaining shapes: the record ---------------------------------------------------------------

# Each record below has a shape the positional parser would bind (the control test proves it);
# only the abstaining word stops it.
ABSTAINING_RECORDS = [
    # coordination
    (
        "coordination",
        "Which color did Morgan choose for deployment?",
        "Morgan chose blue or green as the deployment color.",
    ),
    ("coordination", "Where does Morgan live?", "Morgan lives in Rotterdam and commutes by train."),
    ("coordination", "What is Morgan's phone number?", "Morgan's phone number is 555 0101 or 555 0102."),
    ("coordination", "Where does Priya work?", "Priya works at Acme as well as at Initech."),
    # reported speech
    ("reported", "Where does Priya live?", "Priya lives in Rotterdam, Sam said."),
    ("reported", "What is Morgan's phone number?", "Morgan's phone number is 555 0101 according to Sam."),
    # ditransitive speech
    ("ditransitive", "What is Priya's gift?", "Priya's gift is the book Morgan gave her."),
    ("ditransitive", "What is Morgan's phone number?", "Morgan's phone number is the one Sam sent Priya."),
    ("ditransitive", "Where does Priya work?", "Priya works at the shop Morgan showed her."),
    # negation and unknown values
    ("negation", "What is Priya's phone number?", "Priya's phone number is on the team wiki, not in Slack."),
    ("negation", "What is Morgan's phone number?", "Morgan's phone number is unknown."),
    ("negation", "What is Morgan's phone number?", "Morgan's phone number is probably 555 0101."),
    ("negation", "Where does Priya work?", "Priya works at Acme until March."),
    ("negation", "Where does Priya live?", "Priya lives in Rotterdam no longer."),
    ("negation", "What is Morgan's desk?", "Morgan's desk is the one Morgan isn't sure about."),
    # subordinate clauses
    ("subordinate", "Where does Priya live?", "Priya lives in Rotterdam because the rent is lower."),
    ("subordinate", "Where does Priya work?", "Priya works at Acme, which builds trains."),
    ("subordinate", "What is Morgan's desk?", "Morgan's desk is where the plants are."),
    ("subordinate", "Where does Priya live?", "Priya lives in Rotterdam if the move went through."),
]

# Records whose shape itself cannot bind the asked fact (some also carry an abstaining word).
UNBINDABLE_RECORDS = [
    (
        "coordination",
        "Which color did Morgan choose for deployment?",
        "Morgan and Priya chose blue as the deployment color.",
    ),
    ("coordination", "When is the offsite?", "The offsite is on 14 January or 21 January."),
    (
        "reported",
        "Which color did Morgan choose for deployment?",
        "Sam said Morgan chose blue as the deployment color.",
    ),
    ("reported", "Where does Priya live?", "Morgan: Priya lives in Rotterdam."),
    ("ditransitive", "What is Morgan's phone number?", "Morgan told Priya Morgan's phone number is 555 0101."),
    (
        "ditransitive",
        "Which color did Morgan choose for deployment?",
        "Morgan showed Priya blue as the deployment color.",
    ),
    ("negation", "Where does Priya live?", "Priya no longer lives in Rotterdam."),
    ("negation", "When is the offsite?", "The offsite is tentatively on 14 January."),
    ("subordinate", "When is the offsite?", "The offsite that Morgan planned is on 14 January."),
    ("subordinate", "When is the offsite?", "If the budget allows, the offsite is on 14 January."),
    (
        "reported",
        "Which color did Morgan choose for deployment?",
        "Morgan chose blue as the deployment color Priya claims.",
    ),
    (
        "subordinate",
        "Which color did Morgan choose for deployment?",
        "Morgan chose blue as the deployment color although Sam objected.",
    ),
    # multi-hop: a pronoun subject needs another record (or the chat) to say who it is
    ("multi_hop", "What is Morgan's phone number?", "Her phone number is 555 0101."),
    ("multi_hop", "Where does Priya live?", "She lives in Rotterdam."),
    ("multi_hop", "When is the offsite?", "It is on 14 January."),
    # not one canonical sentence
    ("sentences", "Where does Priya live?", "Priya lives in Rotterdam. Sam lives in Delft."),
    ("sentences", "What is Morgan's phone number?", "Morgan's phone number is 555 0101; call after 10."),
    ("sentences", "Where does Priya live?", "Does Priya live in Rotterdam?"),
]


@pytest.mark.parametrize(("kind", "question", "record"), ABSTAINING_RECORDS + UNBINDABLE_RECORDS)
def test_abstaining_records(kind, question, record):
    assert classify_question(question)[0] is not None  # the question itself is supported
    result = admitted(question, record)
    assert result.hits == ()
    assert result.reason == "no_direct_fact"


@pytest.mark.parametrize(("kind", "question", "record"), ABSTAINING_RECORDS)
def test_the_abstaining_word_is_what_stops_the_record(monkeypatch, kind, question, record):
    """Control: with the abstention vocabulary switched off the same record would be injected,
    so the abstention (not an accident of parsing) is what the test above observes."""
    monkeypatch.setattr(directfacts, "_abstain_reason", lambda words: None)
    assert admitted(question, record).reason == "admitted"


@pytest.mark.parametrize("kind", sorted({kind for kind, _, _ in ABSTAINING_RECORDS + UNBINDABLE_RECORDS}))
def test_every_abstaining_record_shape_has_at_least_two_cases(kind):
    assert sum(1 for k, _, _ in ABSTAINING_RECORDS + UNBINDABLE_RECORDS if k == kind) >= 2


def test_every_abstaining_question_shape_has_at_least_two_cases():
    reasons = [reason for reason, _ in ABSTAINING_QUESTIONS]
    for reason in set(reasons):
        assert reasons.count(reason) >= 2, reason


@pytest.mark.parametrize(
    ("question", "records"),
    [
        # the answer needs two records: Morgan's manager is Priya, and Priya's number
        (
            "What is Morgan's manager's phone number?",
            ["Morgan's manager is Priya.", "Priya's phone number is 555 0101."],
        ),
        ("Where does Morgan's manager live?", ["Morgan's manager is Priya.", "Priya lives in Rotterdam."]),
        (
            "Where does the person who chose blue live?",
            ["Morgan chose blue as the deployment color.", "Morgan lives in Delft."],
        ),
    ],
)
def test_multi_hop_evidence_abstains(question, records):
    result = admitted(question, *records)
    assert result.hits == ()
    assert result.reason.startswith("abstain:")


def test_records_that_disagree_abstain():
    result = admitted("Where does Priya live?", "Priya lives in Rotterdam.", "Priya lives in Delft.")
    assert result.hits == () and result.reason == "conflicting_facts"


def test_agreeing_records_are_all_injected_once():
    records = ["Priya lives in Rotterdam.", "Priya lived in Rotterdam.", "Priya lives in Rotterdam."]
    result = gate_auto(
        "Where does Priya live?",
        [cand(records[0], id="a"), cand(records[1], id="b"), cand(records[2], id="c"), cand(records[0], id="a")],
    )
    assert [hit.id for hit in result.hits] == ["a", "b"]  # same text (c) and same id (a) collapse


def test_unrelated_candidates_in_the_window_do_not_block_a_match():
    result = gate_auto(
        "Where does Priya live?",
        [
            cand("Priya prefers async code reviews.", 0.95),
            cand("Priya lives in Rotterdam.", 0.9),
            cand("Sam lives in Delft.", 0.85),
        ],
    )
    assert [hit.text for hit in result.hits] == ["Priya lives in Rotterdam."]


# --- routes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "reason"),
    [
        ("What was your previous reply?", "route:active_chat"),
        ("What did you send in the last message?", "route:active_chat"),
        ("continue where you left off", "route:resume_work"),
        ("resume the last run", "route:resume_work"),
        ("What did we work on last week?", "route:broad_period"),
        ("what happened in September?", "route:broad_period"),
    ],
)
def test_routed_questions_inject_nothing(question, reason):
    result = admitted(question, "Morgan's phone number is 555 0101.", "Priya lives in Rotterdam.")
    assert result.hits == () and result.reason == reason
    assert result.route is Route(reason.split(":")[1])


# --- the score band -------------------------------------------------------------------------------

FACT = "Priya lives in Rotterdam."
QUESTION = "Where does Priya live?"


@pytest.mark.parametrize("scale", [1.0, 0.001, 1_000_000.0, -1.0, 0.0, math.nan])
def test_band_reads_strength_not_the_providers_score_scale(scale):
    """Raw fused scores differ by provider (RRF ~0.03, BM25 ~12, cosine ~0.8); only strength counts."""
    candidates = [
        Candidate("a", "Priya prefers tea.", 0.9 * scale, 0.9),
        Candidate("b", FACT, 0.8 * scale, 0.8),
        Candidate("c", "Priya lives in Delft.", 0.3 * scale, 0.5),  # below the band: no conflict
    ]
    result = gate_auto(QUESTION, candidates)
    assert [hit.id for hit in result.hits] == ["b"]
    assert (result.in_band, result.window) == (2, 2)


@pytest.mark.parametrize(
    ("strengths", "in_band"),
    [
        ([0.9, 0.7], [True, True]),  # 0.7 >= 0.65 and >= 0.693
        ([0.9, 0.69], [True, False]),  # above the floor, below 77% of the top
        ([1.0, 0.77], [True, True]),
        ([1.0, 0.769], [True, False]),
        ([0.7, 0.65], [True, True]),  # 77% of 0.7 is 0.539: the floor decides
        ([0.7, 0.649], [True, False]),
        ([0.64, 0.6], [False, False]),  # nothing reaches the absolute floor
        ([0.5, 0.9], [False, True]),  # the top is the best strength, not the first candidate
    ],
)
def test_band_edges(strengths, in_band):
    candidates = [Candidate(str(i), "x", 0.0, s) for i, s in enumerate(strengths)]
    assert [c in score_band(candidates) for c in candidates] == in_band


def test_below_band_injects_nothing_even_for_a_perfect_shape():
    result = admitted(QUESTION, FACT, strength=SPEC_BAND_FLOOR - 0.01)
    assert result.hits == () and result.reason == "below_band"


def test_a_match_outside_the_relative_band_is_not_injected():
    result = gate_auto(QUESTION, [cand("Priya prefers tea.", 1.0), cand(FACT, 0.76)])
    assert result.hits == () and result.reason == "no_direct_fact"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.1, 1.5, True, None, "0.9"])
def test_invalid_strength_keeps_a_candidate_out_of_the_band(bad):
    result = gate_auto(QUESTION, [Candidate("a", FACT, 1.0, bad)])
    assert result.hits == () and result.reason == "below_band"
    # and it does not poison the top strength for valid candidates
    result = gate_auto(QUESTION, [Candidate("a", "noise", 1.0, bad), Candidate("b", FACT, 0.5, 0.7)])
    assert [hit.id for hit in result.hits] == ["b"]


def test_window_is_the_first_ten_in_band_candidates():
    noise = [cand(f"Priya prefers tea number {i}.", 0.9, id=f"n{i}") for i in range(GATE_WINDOW - 1)]
    inside = gate_auto(QUESTION, [*noise, cand(FACT, 0.9)])
    assert inside.reason == "admitted" and inside.window == GATE_WINDOW
    outside = gate_auto(QUESTION, [*noise, cand("Priya prefers coffee.", 0.9), cand(FACT, 0.9)])
    assert outside.hits == () and outside.reason == "no_direct_fact"
    assert (outside.in_band, outside.window) == (GATE_WINDOW + 1, GATE_WINDOW)


def test_no_candidates():
    assert gate_auto(QUESTION, []).reason == "no_candidates"
    assert gate_auto(QUESTION, ()).hits == ()


# --- caps -----------------------------------------------------------------------------------------

LIVE_VARIANTS = [
    "Priya lives in {}.",
    "Priya lived in {}.",
    "Priya is living in {}.",
    "Priya has lived in {}.",
    "Priya still lives in {}.",
    "Priya currently lives in {}.",
    "Priya now lives in {}.",
]


def test_at_most_five_hits():
    result = gate_auto(QUESTION, [cand(v.format("Rotterdam"), id=f"m{i}") for i, v in enumerate(LIVE_VARIANTS)])
    assert len(LIVE_VARIANTS) > SPEC_MAX_HITS
    assert [hit.id for hit in result.hits] == [f"m{i}" for i in range(SPEC_MAX_HITS)]


@pytest.mark.parametrize(("place", "width"), [("東" * 700, 3), ("😀" * 700, 4), ("é" * 990, 2)])
def test_at_most_eight_kib_of_utf8(place, width):
    records = [v.format(place) for v in LIVE_VARIANTS]
    assert all(len(r) <= directfacts.MAX_FACT_CHARS for r in records)
    result = gate_auto(QUESTION, [cand(text, id=f"m{i}") for i, text in enumerate(records)])
    sizes = [len(r.encode("utf-8")) for r in records]
    expected = 0
    while expected < SPEC_MAX_HITS and sum(sizes[: expected + 1]) <= SPEC_MAX_BYTES:
        expected += 1
    assert 0 < expected < SPEC_MAX_HITS  # the byte cap, not the hit cap, is what binds here
    assert len(result.hits) == expected
    assert result.bytes == sum(sizes[:expected]) <= SPEC_MAX_BYTES
    assert len(place.encode("utf-8")) == width * len(place)  # multibyte, as intended


def test_records_longer_than_one_canonical_fact_are_not_admitted():
    long_record = "Priya lives in " + "R" * directfacts.MAX_FACT_CHARS + "."
    assert admitted(QUESTION, long_record).hits == ()


# --- hostile input --------------------------------------------------------------------------------

HOSTILE_QUERIES = [
    "",
    "   \t\n ",
    "a" * 50_000 + "!",
    "What is Morgan's " * 6_000 + "phone number?",  # ~100 KB
    "Where does " + "Priya " * 20_000 + "live?",
    "What is Morgan\x00's phone\x1b[2J number?",
    "Where does Pr\u200biya live?\u202e",
    "'s " * 30_000,
    "which " * 10 + "did " * 10 + "choose",
    "\ud800",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_hostile_queries(query):
    result = gate_auto(query, [cand(FACT), cand("Morgan's phone number is 555 0101.")])
    assert result == gate_auto(query, [cand(FACT), cand("Morgan's phone number is 555 0101.")])
    assert result.hits == ()
    assert isinstance(result.reason, str) and result.reason


HOSTILE_RECORDS = [
    "a" * 50_000 + "!",
    "Priya lives in " + "Rotterdam " * 10_000,
    "Priya lives in Rotter\x00dam.",
    "",
    "\ud800\udfff",
    "Priya's " * 5_000 + "is x",
    "Priya lives in" + " in" * 300,
]


@pytest.mark.parametrize("record", HOSTILE_RECORDS, ids=range(len(HOSTILE_RECORDS)))
def test_hostile_records(record):
    result = gate_auto(QUESTION, [cand(record, id="x")])
    assert len(result.hits) <= 1 and result.bytes <= SPEC_MAX_BYTES


def test_malformed_candidates_are_skipped():
    result = gate_auto(
        QUESTION, [Candidate("a", None, 1.0, 0.9), Candidate(None, FACT, 1.0, 0.9), cand(FACT, 0.9, id="ok")]
    )
    assert [hit.id for hit in result.hits] == ["ok"]


def test_non_text_query():
    assert gate_auto(None, [cand(FACT)]).reason == "empty_query"  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    query=st.text(max_size=200),
    texts=st.lists(st.text(max_size=300), max_size=12),
    strengths=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=12, max_size=12),
)
def test_gate_is_total_bounded_and_deterministic(query, texts, strengths):
    candidates = [Candidate(f"m{i}", t, 0.0, strengths[i]) for i, t in enumerate(texts)]
    result = gate_auto(query, candidates)
    assert result == gate_auto(query, candidates)
    assert len(result.hits) <= SPEC_MAX_HITS
    assert sum(len(hit.text.encode("utf-8", "replace")) for hit in result.hits) <= SPEC_MAX_BYTES
    assert bool(result.hits) == (result.reason == "admitted")


_VOCABULARY = frozenset().union(
    *(value for value in vars(directfacts).values() if isinstance(value, frozenset)),
    *directfacts.LIVE_VERBS.values(),
    {"where", "does", "in"},
)


@settings(max_examples=200, deadline=None)
@given(name=st.from_regex(r"[A-Z][a-z]{2,9}", fullmatch=True), place=st.from_regex(r"[A-Z][a-z]{2,12}", fullmatch=True))
def test_any_named_subject_and_place_round_trip(name, place):
    assume(name.casefold() not in _VOCABULARY and place.casefold() not in _VOCABULARY)
    result = admitted(f"Where does {name} live?", f"{name} lives in {place}.")
    assert result.reason == "admitted"
    assert admitted(f"Where does {name} live?", f"{name}x lives in {place}.").hits == ()


# --- results and diagnostics ----------------------------------------------------------------------


def test_result_json_is_content_free():
    secret = "Priya lives in Rotterdam."
    result = gate_auto(
        "Where does Priya live?",
        [Candidate("m-1", secret, 3.2, 0.9, "daily/2026-11-30.md#^m-1", datetime(2026, 11, 30, tzinfo=UTC))],
    )
    assert result.admitted and result.hits[0].source == "daily/2026-11-30.md#^m-1"
    body = result.to_json()
    assert body == {
        "reason": "admitted",
        "route": "targeted",
        "shape": "work_live_location",
        "inBand": 1,
        "window": 1,
        "hits": 1,
        "bytes": len(secret),
    }
    assert "Rotterdam" not in repr(body) and "Priya" not in repr(body)


def test_reasons_never_carry_query_text():
    for question in ["Where does Priya live?", "Who chose blue?", "What was your previous reply?", "zzz qqq"]:
        reason = admitted(question, "Priya lives in Rotterdam.", strength=0.5).reason
        assert re.fullmatch(r"[a-z_]+(?::[a-z_]+)?", reason), reason


def test_gate_result_is_frozen():
    result = GateResult((), "no_candidates", Route.TARGETED)
    with pytest.raises(AttributeError):
        result.reason = "admitted"  # type: ignore[misc]


@pytest.mark.parametrize(
    "pattern",
    [
        directfacts._DATE_RE,
        directfacts._TIME_RE,
        directfacts._ZONE_RE,
        directfacts._SENTENCE_BREAK_RE,
        directfacts._BLOCK_ID_RE,
    ],
    ids=lambda p: p.pattern[:30],
)
def test_no_pattern_repeats_a_group_without_bound(pattern):
    assert not re.search(r"\)(?:[*+]|\{\d*,\})", pattern.pattern)
