"""One idle-review pass: a task agent on the completed turn, with three tools and a one-layer guard.

The review agent is the configured chat model (`ChatModel.complete`) driven through a bounded
JSON tool loop, since the chat protocol memvault speaks has no tool calls of its own. Each step
the model answers exactly one JSON object:

    {"tool": "DocumentSearch", "arguments": {"query": "..."}}
    {"tool": "DocumentCreate", "arguments": {"title": "...", "body": "...", "summary": "..."}}
    {"tool": "RuntimeMemory",  "arguments": {"action": "add", "target": "USER", "content": "..."}}
    {"done": true, "note": "why (a skip is a completed pass)"}

The host runs the tool and sends its result back, for at most `MAX_STEPS` steps. The tools are
exactly DocumentSearch, RuntimeMemory and DocumentCreate (RuntimeMemory withheld when
idleReview.runtimeMemory is false); no memory-space write tool exists here.

The guard holds the pass to one layer: the first DocumentCreate or working-memory (MEMORY)
change it admits claims the pass, and the other layer is refused even if that first call fails.
USER changes stay independent. "At most one" change is the persona's rule, as in the spec, not
a counter. A new turn cancels the pass: it stops before the next model call and before any
write, and the pass counts as aborted (the activity is kept).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from memvault.indexer.runtime.budget import TurnRecall
from memvault.indexer.services.chat import ChatModel
from memvault.vault.errors import VaultError
from memvault.vault.strict_json import loads_strict

DOC_SEARCH, DOC_CREATE, RUNTIME = "DocumentSearch", "DocumentCreate", "RuntimeMemory"
MAX_STEPS = 6
MAX_RESULT_CHARS = 8_000
DOCUMENTS, WORKING_MEMORY = "documents", "working-memory"

PERSONA = """\
You review one completed agent turn while the agent is idle, and decide conservatively whether
anything in it deserves to be kept. Change at most ONE layer, and make at most one change:
- Documents first: use DocumentSearch; create at most one separate document, only for a project
  record the turn established (a decision, a plan, a runbook) that no existing document covers.
  Never update or archive an existing document.
- Hot memory (RuntimeMemory): only new, explicit, durable assertions by the user. USER takes facts
  about the user; MEMORY takes compact rules no document covers, never project records.
- After a document, working memory is refused, and the other way round.
Most turns need nothing: then answer {"done": true, "note": "<why>"}.
Answer with exactly one JSON object per step and nothing else:
{"tool": "<name>", "arguments": {...}} or {"done": true, "note": "<short reason>"}.
"""


class ReviewCancelled(Exception):
    """A new turn began while the pass ran."""


class ReviewFailed(VaultError):
    code = "review_failed"


@dataclass(frozen=True)
class ReviewOutcome:
    status: str  # completed | failed | aborted
    layer: str | None  # documents | working-memory | None (nothing claimed)
    changes: tuple[str, ...]  # one line per admitted change
    note: str  # the model's reason, or what went wrong

    @property
    def clears_activity(self) -> bool:
        return self.status == "completed"

    def to_json(self) -> dict:
        return {"status": self.status, "layer": self.layer, "changes": list(self.changes), "note": self.note}


class ReviewGuard:
    """One layer per pass: the first document creation or MEMORY change claims it."""

    def __init__(self) -> None:
        self.layer: str | None = None

    def claim(self, tool: str, arguments: Mapping) -> str | None:
        """None when the call may run; otherwise why it is refused."""
        layer = self._layer_of(tool, arguments)
        if layer is None:
            return None
        if self.layer is None:
            self.layer = layer  # claimed before the call runs: a failed first call still holds the pass
            return None
        if self.layer != layer:
            return f"this pass already changed {self.layer}; {layer} is refused (one layer per pass)"
        return None

    @staticmethod
    def _layer_of(tool: str, arguments: Mapping) -> str | None:
        if tool == DOC_CREATE:
            return DOCUMENTS
        if tool == RUNTIME and arguments.get("target") == "MEMORY":
            return WORKING_MEMORY
        return None  # searches and USER changes claim nothing


def tool_names(runtime_memory: bool) -> tuple[str, ...]:
    return (DOC_SEARCH, RUNTIME, DOC_CREATE) if runtime_memory else (DOC_SEARCH, DOC_CREATE)


def run_review(
    service,
    chat: ChatModel,
    checkpoint: str,
    *,
    runtime_memory: bool,
    cancelled: threading.Event,
) -> ReviewOutcome:
    """One pass over `checkpoint` (the bounded text of the completed turn). Never raises."""
    guard, changes = ReviewGuard(), []
    turn = service.begin_turn()  # the review's own turn: its own document-search slot
    tools = tool_names(runtime_memory)
    messages = [
        {"role": "system", "content": PERSONA + f"Your tools: {', '.join(tools)}."},
        {"role": "user", "content": "The completed turn:\n" + checkpoint},
    ]
    try:
        for _ in range(MAX_STEPS):
            _stop_if(cancelled)
            reply = chat.complete(messages, response_format_json=True)
            _stop_if(cancelled)
            step = parse_step(reply, tools)
            if "done" in step:
                return ReviewOutcome("completed", guard.layer, tuple(changes), str(step.get("note", ""))[:500])
            result = _run_tool(service, turn, guard, step["tool"], step["arguments"], changes, cancelled)
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "Tool result: " + json.dumps(result)[:MAX_RESULT_CHARS]},
            ]
        return ReviewOutcome("failed", guard.layer, tuple(changes), f"no decision within {MAX_STEPS} steps")
    except ReviewCancelled:
        return ReviewOutcome("aborted", guard.layer, tuple(changes), "a new turn began")
    except VaultError as exc:  # the model could not run, or answered out of contract
        return ReviewOutcome("failed", guard.layer, tuple(changes), f"{exc.code}: {exc}"[:500])


def parse_step(reply: str, tools: tuple[str, ...]) -> dict:
    """One exact step object; anything else is a failed pass (no partial reading)."""
    try:
        step = loads_strict(reply)
    except ValueError as exc:
        raise ReviewFailed(f"the review model's answer is not one JSON object ({exc})") from None
    if not isinstance(step, dict):
        raise ReviewFailed("the review model's answer must be a JSON object")
    if step.keys() <= {"done", "note"} and step.get("done") is True:
        return step
    if step.keys() == {"tool", "arguments"} and step["tool"] in tools and isinstance(step["arguments"], dict):
        return step
    raise ReviewFailed(f"the review model's step {sorted(step)!r} is not a tool call ({', '.join(tools)}) or done")


def _run_tool(service, turn: TurnRecall, guard: ReviewGuard, tool: str, arguments: dict, changes: list,
              cancelled: threading.Event) -> dict:  # fmt: skip
    refusal = guard.claim(tool, arguments)
    if refusal:
        return {"error": {"code": "refused", "message": refusal}}
    _stop_if(cancelled)  # never write after a new turn began
    try:
        if tool == DOC_SEARCH:
            answer = turn.search_documents(str(arguments.get("query", ""))[:2000])
            return {"records": [{"id": r.id, "title": r.title, "excerpt": r.excerpt} for r in answer.records]}
        if tool == DOC_CREATE:
            receipt = service.create_document(
                arguments.get("title"), arguments.get("body"), arguments.get("summary", "")
            )
            changes.append(f"document {receipt.status}: {receipt.id}")
            return receipt.to_json()
        receipt = _runtime_change(service, arguments)
        changes.append(f"{receipt.target} {receipt.status}")
        return receipt.to_json()
    except (VaultError, TypeError, ValueError) as exc:  # a bad call is reported to the model, never raised
        code = getattr(exc, "code", "invalid_arguments")
        return {"error": {"code": code, "message": str(exc)[:500]}}


def _runtime_change(service, arguments: Mapping):
    action, target = arguments.get("action"), arguments.get("target")
    if action == "add":
        return service.add(target, arguments.get("content"), arguments.get("importance", 3))
    if action == "replace":
        return service.replace(target, arguments.get("oldText"), arguments.get("content"), arguments.get("importance"))
    if action == "remove":
        return service.remove(target, arguments.get("oldText"))
    raise ValueError('action must be "add", "replace" or "remove"')


def _stop_if(cancelled: threading.Event) -> None:
    if cancelled.is_set():
        raise ReviewCancelled()
