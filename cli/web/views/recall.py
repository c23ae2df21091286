"""Recall: the direct search (raw evidence, deterministic), agent search, and the journal view.

Direct search is `MemoryStore.recall` with its per-retriever evidence (`--explain`'s data);
a date range keeps the hits whose local date (in the vault's zone) lies inside it, searching
the top 100 so a filter does not starve the page. Agent search runs the same direct search,
then one chat call with no tools (`memvault.indexer.services.evidence_answer`); it is a POST,
since it spends a model call. The journal view is MemoryJournal for a date range in the
vault's zone, paged by its cursors.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from html import escape
from zoneinfo import ZoneInfo

from memvault.cli.web.markdown import memory_html, source_url
from memvault.cli.web.views.base import Args, BadRequest, View
from memvault.indexer.journal.query import UNSAFE_TEXT_MARKER
from memvault.indexer.services.evidence_answer import answer_from_evidence, evidence_from_hits
from memvault.vault.errors import InvalidRecord, ProviderUnavailable, VaultError

MAX_QUERY_CHARS = 1_000
FILTERED_DEPTH = 100
JOURNAL_DEFAULT_DAYS = 7


def _range(args: Args) -> tuple[date | None, date | None]:
    start, through = args.day("from"), args.day("through")
    if start and through and start > through:
        raise BadRequest(f"the date range is reversed: from {start} is after through {through}")
    return start, through


def direct_search(args: Args, reader) -> dict:
    query = args.text("q", max_chars=MAX_QUERY_CHARS)
    mode = args.choice("mode", ("tool", "auto"), "tool")
    limit = args.integer("limit", 10, 1, 100)
    start, through = _range(args)
    body = {"query": query, "mode": mode, "limit": limit, "from": _iso(start), "through": _iso(through),
            "hits": [], "degraded": None, "guidance": None, "gate": None, "filteredOut": 0, "searched": False,
            "emptyReason": None}  # fmt: skip
    if not query:
        return body
    filtered = start is not None or through is not None
    result = reader.recall(query, limit=FILTERED_DEPTH if filtered and mode == "tool" else limit, mode=mode)
    zone = ZoneInfo(reader.time_zone)
    hits = [_hit(hit, zone) for hit in result.hits]
    kept = [
        h
        for h in hits
        if (start is None or h["date"] >= start.isoformat()) and (through is None or h["date"] <= through.isoformat())
    ]
    _add_html(kept[:limit], reader)
    body.update(hits=kept[:limit], degraded=result.degraded, guidance=result.guidance, gate=result.gate,
                filteredOut=len(hits) - len(kept), searched=True,
                emptyReason=getattr(result, "empty_reason", None))  # fmt: skip
    return body


def _hit(hit, zone: ZoneInfo) -> dict:
    local = hit.at.astimezone(zone)
    return {
        "id": hit.id, "text": hit.text, "source": hit.source, "url": source_url(hit.source),
        "date": local.date().isoformat(), "local": local.strftime("%Y-%m-%d %H:%M"), "score": round(hit.score, 6),
        "kind": hit.kind, "conflict": getattr(hit, "conflict", False),
        "explain": {name: _jsonable(detail) for name, detail in sorted(hit.explain.items())},
    }  # fmt: skip


def _add_html(hits: list[dict], reader) -> None:
    """Each hit's text as its note holds it, rendered as the note page renders it ("html"). The
    hit's "text" is the index's plain text, as the CLI and MCP return it: it drops markup such as
    `*`, which the page must not. A bullet no longer in its note shows that text, escaped."""
    notes: dict[str, dict[str, str]] = {}
    for hit in hits:
        path = hit["source"].partition("#")[0]
        if path not in notes:
            try:
                notes[path] = memory_html(reader.note(path).text)
            except VaultError:
                notes[path] = {}
        hit["html"] = notes[path].get(hit["id"]) or escape(hit["text"])


def _jsonable(detail):
    if isinstance(detail, dict):
        return {str(k): (round(v, 6) if isinstance(v, float) else v) for k, v in detail.items()}
    return detail


def _iso(day: date | None) -> str | None:
    return None if day is None else day.isoformat()


def agent_status(reader) -> dict:
    chat = reader.chat()
    return {"enabled": chat.model is not None, "reason": chat.reason, "model": chat.description}


class RecallView(View):
    path = "/recall"
    template = "recall.html"
    section = "Recall"

    def data(self, args: Args, reader) -> dict:
        body = direct_search(args, reader)
        body["agent"] = agent_status(reader)
        body["timeZone"] = reader.time_zone
        return body


class AgentView(View):
    """POST: the direct search's evidence, one model call, citations filtered to what was supplied."""

    path = "/recall/agent"
    template = "recall.html"
    section = "Recall"
    methods = ("POST",)

    def data(self, args: Args, reader) -> dict:
        body = direct_search(args, reader)
        body["agent"] = agent_status(reader)
        body["timeZone"] = reader.time_zone
        chat = reader.chat()
        if chat.model is None:
            body["answer"] = {"error": f"agent search is off: {chat.reason}"}
            return body
        if not body["query"]:
            raise BadRequest("agent search needs a question: type one into the search box")
        evidence = evidence_from_hits(_HitView(h) for h in body["hits"])
        try:
            answer = answer_from_evidence(chat.model, body["query"], evidence).to_json()
        except (ProviderUnavailable, InvalidRecord) as exc:  # the direct search stands; the answer failed
            body["answer"] = {"error": str(exc)}
            return body
        for item in answer["citations"] + answer["evidence"]:
            item["url"] = source_url(item["source"])
        body["answer"] = answer
        return body


class _HitView:
    """A page hit seen as a recall hit (id, text, source, at) for `evidence_from_hits`."""

    def __init__(self, hit: dict):
        self.id, self.text, self.source = hit["id"], hit["text"], hit["source"]
        self.at = datetime.fromisoformat(hit["local"])


class JournalView(View):
    path = "/journal"
    template = "journal.html"
    section = "Recall"

    def data(self, args: Args, reader) -> dict:
        cursor = args.text("cursor", max_chars=4_000)
        zone = args.text("tz", reader.time_zone, max_chars=64) or reader.time_zone
        today = reader.now().astimezone(ZoneInfo(reader.time_zone)).date()
        start, through = _range(args)
        through = through or today
        start = start or through - timedelta(days=JOURNAL_DEFAULT_DAYS - 1)
        if start > through:
            raise BadRequest(f"the date range is reversed: from {start} is after through {through}")
        limit = args.integer("limit", 25, 1, 25)
        if cursor:
            page = reader.journal(cursor=cursor)
        else:
            page = reader.journal(
                from_date=start.isoformat(), through_date=through.isoformat(), time_zone=zone, limit=limit
            )
        body = page.to_json()
        for entry in body["entries"]:
            entry["url"] = source_url(entry["source"])
        # a text the journal withheld (control or role markup) stays withheld here too
        _add_html([e for e in body["entries"] if e["text"] != UNSAFE_TEXT_MARKER], reader)
        for entry in body["entries"]:
            entry.setdefault("html", escape(entry["text"]))
        body.update({"from": start.isoformat(), "through": through.isoformat(), "timeZone": zone, "limit": limit})
        return body
