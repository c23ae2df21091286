"""Query routing: which questions durable memory should answer at all.

    route_query("What was your previous reply?")        -> Route.ACTIVE_CHAT
    route_query("continue where you left off")          -> Route.RESUME_WORK
    route_query("What did we work on last week?")       -> Route.BROAD_PERIOD
    route_query("Which release color did we decide on?") -> Route.TARGETED

Some questions look like memory questions but are owned by something else (spec, "The
MemoryRecall tool"): the active conversation answers questions about itself (an older, similar
record must never displace the real latest message), RunHistory owns interrupted-run recovery,
and MemoryJournal owns broad retrospectives over an explicit period. Routing is deliberately
conservative: a query is taken away from targeted recall only when the *whole* normalised query
matches one of the patterns below, so any explicit archived target, date or topic ("... about the
rollout", "... with Morgan", "last week's meeting") keeps it TARGETED.

Pure and deterministic: no I/O, no model call. Every pattern is anchored, built from literal
alternations and bounded repeats (no nested unbounded quantifiers), and only runs on queries of
at most `MAX_ROUTED_CHARS` characters, so hostile input costs linear time.
"""

from __future__ import annotations

import enum
import re

from memvault.indexer.search.periods import PERIOD
from memvault.indexer.search.query_text import normalize_query


class Route(enum.StrEnum):
    ACTIVE_CHAT = "active_chat"
    RESUME_WORK = "resume_work"
    BROAD_PERIOD = "broad_period"
    TARGETED = "targeted"


#: MemoryRecall's answer to an unqualified question about the active chat (no backend call).
ACTIVE_CHAT_GUIDANCE = (
    "This question is about the active conversation, not durable memory. Answer it from the "
    "conversation history in your context; durable memory was not searched."
)


#: The conditional exact handoff for interrupted-run recovery. MemoryRecall returns it for a
#: resume request and repeats it on every empty response, so the agent stops rephrasing memory
#: searches for evidence that run history owns. It names a tool only when the host said it offers
#: one (`tools.hostTools.runHistory`): memvault's own server has no run-history tool.
def run_history_handoff(tool: str | None = None) -> str:
    if tool:
        return (
            f"If you are picking up, continuing or recovering interrupted work and the {tool} tool is "
            f"available, call {tool} {{}} first; durable memory does not hold run state."
        )
    return (
        "If you are picking up, continuing or recovering interrupted work, start from the host's own "
        "record of that run (the conversation, or the host's run history if it offers one); durable "
        "memory does not hold run state."
    )


#: the handoff as a host that names its tool RunHistory sees it
RUN_HISTORY_HANDOFF = run_history_handoff("RunHistory")
#: Guidance for a broad retrospective over an explicit period.
JOURNAL_GUIDANCE = (
    "This is a broad question about an explicit period. If the MemoryJournal tool is available, "
    "call it with explicit inclusive local dates and an IANA time zone, e.g. "
    '{"fromDate": "2026-09-01", "throughDate": "2026-09-07", "timeZone": "Europe/Amsterdam"} '
    "(at most 31 days); MemoryRecall is for targeted questions."
)

#: Questions about the chat or a resume request are short; anything longer is a targeted search.
MAX_ROUTED_CHARS = 400

_GUIDANCE = {
    Route.ACTIVE_CHAT: ACTIVE_CHAT_GUIDANCE,
    Route.BROAD_PERIOD: JOURNAL_GUIDANCE,
}


def guidance_for(route: Route, run_history: str | None = None) -> str | None:
    """The model-facing text for a route; None for TARGETED (search memory as usual).
    `run_history`: the host's run-history tool, if it offers one (only that name is given out)."""
    if route is Route.RESUME_WORK:
        return run_history_handoff(run_history)
    return _GUIDANCE.get(route)


def route_query(query: str) -> Route:
    """Classify one recall query; anything not clearly owned elsewhere is TARGETED."""
    if not isinstance(query, str) or len(query) > 4 * MAX_ROUTED_CHARS:
        return Route.TARGETED
    text = normalize_query(query)
    if not text or len(text) > MAX_ROUTED_CHARS:
        return Route.TARGETED
    for route, patterns in _ROUTES:
        if any(pattern.fullmatch(text) for pattern in patterns):
            return route
    return Route.TARGETED


# --- patterns -----------------------------------------------------------------------------------


def _alt(*words: str) -> str:
    return "(?:" + "|".join(words) + ")"


def _compile(*patterns: str) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(pattern) for pattern in patterns)


_RECENT = _alt("last", "previous", "latest", "most recent", "prior", "preceding", "last few", "previous few")
_MESSAGE = _alt(
    "message",
    "messages",
    "reply",
    "replies",
    "response",
    "responses",
    "answer",
    "answers",
    "question",
    "questions",
    "turn",
    "comment",
    "output",
    "suggestion",
    "prompt",
)
_THIS_CHAT = "(?:this|our|the current|the present) " + _alt(
    "conversation", "chat", "thread", "session", "discussion", "dialogue"
)
_IN_THIS_CHAT = f"(?:earlier |above |before )?(?:in|during|throughout) {_THIS_CHAT}(?: so far)?"
#: what may follow "what did you say": references to *this* chat only ("before" or
#: "previously" may just as well mean an earlier session, so they keep a query targeted)
_CHAT_REF = _alt(
    "just now",
    "a moment ago",
    "a minute ago",
    "a second ago",
    "earlier",
    "last",
    "above",
    "so far",
    "here",
    "again",
    f"in (?:the|your|my) {_RECENT} {_MESSAGE}",
    _IN_THIS_CHAT,
)
_SAID = _alt(
    "send",
    "sent",
    "say",
    "said",
    "write",
    "written",
    "wrote",
    "reply",
    "replied",
    "answer",
    "answered",
    "ask",
    "asked",
    "tell me",
    "told me",
    "tell you",
    "told you",
    "type",
    "typed",
    "respond",
    "responded",
    "suggest",
    "suggested",
    "recommend",
    "recommended",
    "mean",
    "meant",
)
#: verbs that are about the chat even without a reference ("what did you say?"); "what did you
#: recommend?" in a fresh session may well ask about an earlier one
_SAID_BARE = _alt("say", "said", "mean", "meant", "ask", "asked")
_TO = "(?: (?:to )?(?:me|you))?"
_TALK = _alt("talked", "talk", "spoken", "speak", "discussed", "discuss", "covered", "cover")
_SO_FAR = _alt("so far", "just now", "until now", "up to now", _IN_THIS_CHAT)
_ACTIVE_CHAT = _compile(
    rf"what (?:did|have|had|do) (?:you|i) just {_SAID}{_TO}(?: {_CHAT_REF})?",
    rf"what (?:did|have|had|do) (?:you|i) {_SAID}{_TO} {_CHAT_REF}",
    rf"what (?:did|do) (?:you|i) {_SAID_BARE}{_TO}",
    rf"what (?:you|i) just {_SAID}{_TO}(?: {_CHAT_REF})?",
    rf"what (?:you|i) {_SAID}{_TO} {_CHAT_REF}",
    rf"what(?: was|'s| is| were) (?:your|my|the) {_RECENT} {_MESSAGE}(?: (?:to|from) (?:me|you))?(?: {_IN_THIS_CHAT})?",
    rf"what did (?:your|my|the) {_RECENT} {_MESSAGE} (?:say|contain|mention|ask)",
    rf"what (?:was|is|were) the last (?:thing|things|few things) (?:you|i) (?:just )?{_SAID}{_TO}",
    rf"what (?:happened|has happened|went on|was said|have we done|did we do"
    rf"|have we covered|did we cover) {_IN_THIS_CHAT}",
    rf"what (?:have|did) we (?:just {_TALK}(?: about)?(?: {_SO_FAR})?|{_TALK}(?: about)? {_SO_FAR})",
    rf"what (?:are|were) we (?:just )?(?:talking|speaking|discussing)(?: about)?(?: {_SO_FAR})?",
    rf"what(?: is|'s) {_THIS_CHAT} about",
    rf"(?:summari[sz]e|recap|review) (?:{_THIS_CHAT}(?: so far)?"
    rf"|what we (?:have|just) (?:discussed|talked about|said|covered)"
    rf"(?: so far)?|what we (?:discussed|talked about|said|covered) so far)",
    rf"(?:give me )?(?:a |an )?(?:summary|recap|overview|rundown) of {_THIS_CHAT}(?: so far)?",
    rf"(?:repeat|restate|say|resend|re-send|reread|quote|paste|show)(?: me)? "
    rf"(?:what you (?:just )?(?:said|wrote|sent|told me)"
    rf"|that|it|your {_RECENT} {_MESSAGE}|the {_RECENT} {_MESSAGE})(?: again)?(?: {_IN_THIS_CHAT})?",
    r"(?:repeat|say that again|come again)(?: that)?(?: again)?",
)

_WORK = _alt(
    "run",
    "runs",
    "task",
    "tasks",
    "work",
    "job",
    "jobs",
    "session",
    "turn",
    "operation",
    "process",
    "step",
    "steps",
    "build",
    "migration",
    "deploy",
    "deployment",
    "request",
    "plan",
    "work item",
    "workflow",
)
_STOPPED = _alt(
    "interrupted",
    "unfinished",
    "incomplete",
    "stopped",
    "crashed",
    "failed",
    "aborted",
    "paused",
    "halted",
    "cancelled",
    "canceled",
    "killed",
    "stalled",
    "dropped",
    "partial",
    "previous",
    "last",
    "earlier",
    "pending",
    "timed out",
    "timed-out",
)
_RESUME_VERB = _alt(
    "continue",
    "continue with",
    "resume",
    "pick up",
    "pick back up",
    "carry on",
    "carry on with",
    "recover",
    "restart",
    "rerun",
    "re-run",
    "retry",
    "finish",
    "complete",
    "get back to",
    "go back to",
    "return to",
    "restore",
    "redo",
    "proceed with",
)
_LEFT_OFF = _alt(
    "left off", "stopped", "paused", "broke off", "were interrupted", "got interrupted", "were cut off", "got cut off"
)
_TAIL = r"(?: (?:with|on|in|for|of|from) [^\n]{1,200})?"
_RESUME_WORK = _compile(
    rf"(?:continue|resume|pick up|pick it up|pick things up|carry on"
    rf"|proceed|go on|keep going|start again|get going again)"
    rf"(?: from)? where (?:you|we|i|it) {_LEFT_OFF}{_TAIL}",
    rf"{_RESUME_VERB} (?:the |your |my |our |that |this )?(?:{_STOPPED} )?{_WORK}(?: again)?{_TAIL}",
    rf"(?:continue|resume|keep) working(?: again)?(?: where (?:you|we) {_LEFT_OFF})?",
    r"where (?:did|were) (?:you|we|i) "
    r"(?:leave off|left off|stop|stopped|get interrupted|interrupted|get cut off|cut off)",
    r"what were (?:you|we) (?:doing|working on) (?:before|when) "
    r"(?:you were |we were |it was |the run was |the task was )?"
    r"(?:interrupted|the interruption|stopped|it crashed|the crash|cut off)",
)

_PERIOD = PERIOD  # the grammar recall resolves to dates (`periods.py`)
_DID = _alt(
    "do",
    "done",
    "doing",
    "get done",
    "got done",
    "accomplish",
    "accomplished",
    "achieve",
    "achieved",
    "ship",
    "shipped",
    "discuss",
    "discussed",
    "talk about",
    "talked about",
    "decide",
    "decided",
    "decide on",
    "work on",
    "worked on",
    "working on",
    "been working on",
    "been doing",
    "finish",
    "finished",
    "complete",
    "completed",
    "cover",
    "covered",
    "change",
    "changed",
    "fix",
    "fixed",
    "build",
    "built",
    "learn",
    "learned",
    "learnt",
    "deliver",
    "delivered",
    "get up to",
    "got up to",
)
_WHO_WE = _alt("we", "i", "you", "the team", "our team")
_RETRO = _alt(
    rf"what (?:did|have|had|were) {_WHO_WE} {_DID}",
    "what (?:happened|went on|was going on|has happened|got done"
    "|was done|did i miss|was decided|was discussed|changed)",
    rf"(?:summari[sz]e|recap|review|list|show)(?: (?:me|us))?(?: (?:what|everything) {_WHO_WE} {_DID})?",
    r"(?:give me |i want |i'd like )?(?:a |an )?(?:summary|recap|review|overview|rundown|retrospective|retro|digest)"
    r" (?:of|for)(?: (?:what happened|what we did|our work|my work|the work|everything))?",
)
_BROAD_PERIOD = _compile(rf"{_RETRO} (?:(?:in|on|during|over|for|from) )?{_PERIOD}(?: so far)?")

#: checked in this order: a chat question that names "today" is still about the chat
_ROUTES = (
    (Route.ACTIVE_CHAT, _ACTIVE_CHAT),
    (Route.RESUME_WORK, _RESUME_WORK),
    (Route.BROAD_PERIOD, _BROAD_PERIOD),
)
