"""Query routing: active-chat questions, resume requests and broad periods leave targeted recall.

Each table pairs clear positives with near misses that must stay TARGETED: a question that names
an archived target, a date or a topic is a durable-memory question, whatever words it shares
with the chat or resume patterns.
"""

import re

import pytest

from memvault.indexer.search import query_text, routing
from memvault.indexer.search.routing import (
    ACTIVE_CHAT_GUIDANCE,
    JOURNAL_GUIDANCE,
    RUN_HISTORY_HANDOFF,
    Route,
    guidance_for,
    normalize_query,
    route_query,
    run_history_handoff,
)

ACTIVE_CHAT = [
    # the spec's own examples
    "What did you send in the last message?",
    "What was your previous reply?",
    "What happened in this conversation?",
    # the brief's
    "repeat what you just said",
    # variants
    "What did you just say?",
    "what did you say earlier",
    "What did I just ask you?",
    "What did I ask you?",
    "What did we just discuss?",
    "What did you recommend in your last message?",
    "What were we talking about?",
    "What was my last question?",
    "what's your latest answer?",
    "What was the previous message?",
    "What were your last few messages in this chat?",
    "What did your last message say?",
    "What was the last thing you said?",
    "What have we talked about so far?",
    "What did we discuss in this conversation?",
    "What are we talking about?",
    "What is this conversation about?",
    "Summarize this conversation so far.",
    "summarise what we have discussed",
    "Give me a recap of our chat so far",
    "Repeat your last answer, please.",
    "Say that again",
    "repeat that",
    "Can you repeat that?",
    "Hey, can you tell me what you just said?",
    "Ok so, what was your previous reply??",
    "WHAT WAS YOUR PREVIOUS REPLY?",
    "What\u2019s your last message?",
    "  what   did you\tsend in the last   message ?  ",
]

RESUME_WORK = [
    "continue where you left off",
    "pick up the interrupted task",
    "resume the last run",
    "Please continue from where we left off.",
    "Pick up where you left off with the migration",
    "carry on where we stopped",
    "Resume the interrupted run",
    "recover the crashed job",
    "Continue the unfinished work",
    "restart the failed build",
    "finish the previous task",
    "get back to the interrupted task",
    "continue the task",
    "resume your work",
    "keep working where you left off",
    "Where did we leave off?",
    "where were you interrupted",
    "What were you doing before you were interrupted?",
    "Could you resume the paused deployment?",
]

BROAD_PERIOD = [
    "What did we work on last week?",
    "what happened in September?",
    "What did I do yesterday?",
    "What did you do on 2026-09-03?",
    "What happened between 1 September and 7 September?",
    "what have we been working on this week",
    "What did the team ship last month?",
    "What did we discuss on Monday?",
    "What did we decide last week?",
    "summarize last month",
    "Give me a recap of last week",
    "what happened in the past 3 days",
    "What got done this sprint?",
    "What did we talk about in October 2026?",
    "what happened on 14 January",
]

TARGETED = [
    # the spec's and the brief's archived questions
    "Which release color did we decide on?",
    "What did we decide in last week's meeting about the rollout?",
    # active-chat near misses: an archived target, topic or date
    "What did you send to Morgan last Tuesday?",
    "What was your previous reply about the database migration?",
    "What happened in the conversation with Morgan?",
    "What did Priya say in the last message?",
    "What was Morgan's last message?",
    "What did you say about the deployment color?",
    "What was the last message Morgan sent about the offsite?",
    "What was your previous reply in the session on 3 September?",
    "Repeat the deployment steps Morgan sent",
    "What did you say last time?",
    "What did we decide?",
    # ambiguous in a fresh session (may ask about an earlier one): search memory
    "What did we talk about?",
    "What did we discuss?",
    "What did you recommend?",
    "What did I ask you before?",
    "What did you say previously about the budget?",
    "summarize what we discussed",
    # resume near misses: a how-to, an archived question, the noun "resume"
    "How do I resume a paused Kubernetes deployment?",
    "When did we resume the hiring process?",
    "Did Morgan continue working on the migration?",
    "Where is Priya's resume?",
    "What did we decide about resuming the project?",
    "Continue the discussion about pricing",
    "Which task did Morgan pick up last week?",
    "Pick up milk on the way home",
    "Update Priya's resume template",
    # broad-period near misses: a target, a subject or a topic inside the period
    "What did we work on with Morgan last week?",
    "What happened to the deployment in September?",
    "When did we work on the migration?",
    "What did Morgan choose last week?",
    "What color did we pick last week?",
    "What happened in September 2026 with the launch?",
    "What happened in yesterday's session?",
    # ordinary targeted questions
    "What is Morgan's phone number?",
    "Where does Priya live?",
    "continue",
    "",
    "   ",
]


@pytest.mark.parametrize("query", ACTIVE_CHAT)
def test_active_chat_questions(query):
    assert route_query(query) is Route.ACTIVE_CHAT


@pytest.mark.parametrize("query", RESUME_WORK)
def test_resume_requests(query):
    assert route_query(query) is Route.RESUME_WORK


@pytest.mark.parametrize("query", BROAD_PERIOD)
def test_broad_period_questions(query):
    assert route_query(query) is Route.BROAD_PERIOD


@pytest.mark.parametrize("query", TARGETED)
def test_targeted_questions_and_near_misses(query):
    assert route_query(query) is Route.TARGETED


def test_chat_wins_over_period_when_both_could_apply():
    # "in this conversation" names the chat, so it is not a journal question
    assert route_query("What did we discuss in this conversation so far?") is Route.ACTIVE_CHAT


def test_guidance_texts_are_the_documented_model_facing_texts():
    assert guidance_for(Route.ACTIVE_CHAT) == ACTIVE_CHAT_GUIDANCE
    assert guidance_for(Route.RESUME_WORK, "RunHistory") == RUN_HISTORY_HANDOFF
    # without a host tool the handoff names none: memvault's own server offers no run history
    assert guidance_for(Route.RESUME_WORK) == run_history_handoff(None)
    assert "RunHistory" not in run_history_handoff(None) and "run history" in run_history_handoff(None)
    assert "HostRuns {}" in guidance_for(Route.RESUME_WORK, "HostRuns")
    assert guidance_for(Route.BROAD_PERIOD) == JOURNAL_GUIDANCE
    assert guidance_for(Route.TARGETED) is None
    assert "conversation history" in ACTIVE_CHAT_GUIDANCE and "not searched" in ACTIVE_CHAT_GUIDANCE
    # the handoff is conditional and names the exact call
    assert "RunHistory {}" in RUN_HISTORY_HANDOFF and RUN_HISTORY_HANDOFF.startswith("If ")
    assert "available" in RUN_HISTORY_HANDOFF
    for field in ('"fromDate"', '"throughDate"', '"timeZone"', "MemoryJournal"):
        assert field in JOURNAL_GUIDANCE


def test_route_values_are_stable_strings():
    assert [route.value for route in Route] == ["active_chat", "resume_work", "broad_period", "targeted"]


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("Hey, can you tell me what you just said?", "what you just said"),
        ("What\u2019s   YOUR\nlast message?!", "what's your last message"),
        ("ok so please repeat that, thanks", "repeat that"),
        ("the standup is at 10:00, right?", "the standup is at 10:00 right"),
        ("release 2.4?", "release 2.4"),
        ("a\x00b\u200bc", "a b c"),
    ],
)
def test_normalisation(raw, normalised):
    assert normalize_query(raw) == normalised


HOSTILE = [
    "a" * 50_000 + "!",
    "what did you say " * 6_000,  # ~100 KB
    "what " + "did you " * 60 + "say",
    "continue where you left off " + "x" * 100_000,
    "\x00\x01\x02 what was your previous reply \x7f",
    "?" * 10_000,
    "summarize last " + "week " * 5_000,
    "what happened between " + "1 september and " * 1_000 + "7 september",
    "\ud800 broken surrogate",
    "\u202eylper suoiverp ruoy saw tahw",
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_route_deterministically(query):
    first = route_query(query)
    assert first is route_query(query)
    assert isinstance(first, Route)


def test_oversized_queries_are_targeted_even_when_they_start_like_a_chat_question():
    # questions about the chat are short: past the cap a query is a search, whatever it starts with
    padded = "What was your previous reply? " + "and more context " * 30
    assert len(normalize_query(padded)) > routing.MAX_ROUTED_CHARS
    assert route_query(padded) is Route.TARGETED
    assert route_query("continue where you left off " + "x" * 100_000) is Route.TARGETED


def test_non_text_is_targeted():
    assert route_query(None) is Route.TARGETED  # type: ignore[arg-type]
    assert route_query(42) is Route.TARGETED  # type: ignore[arg-type]


def _compiled_patterns():
    for _, patterns in routing._ROUTES:
        yield from patterns
    yield from (query_text._PREFIX_RE, query_text._SUFFIX_RE, query_text._PUNCT_RE, query_text._CONTROL_RE)


@pytest.mark.parametrize("pattern", list(_compiled_patterns()), ids=lambda p: p.pattern[:40])
def test_no_pattern_repeats_a_group_without_bound(pattern):
    """Catastrophic backtracking needs a repeated group that can itself match in many ways;
    every group here is optional (`?`) or literal, and every other repeat is bounded."""
    assert not re.search(r"\)(?:[*+]|\{\d*,\})", pattern.pattern)
