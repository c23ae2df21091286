"""A chat answer asked for as a stream, put back together.

Chat calls ask for a streamed answer (`"stream": true`) for one reason: a streaming server stops
generating when the client hangs up, so the per-call timeout really ends the work (a
non-streaming llama.cpp or Ollama server keeps generating to its token cap after the client
gave up, and every retry starts another). The answer is read to its end within the deadline
(`post_raw`) and then assembled here into the shape a non-streamed answer has, so the rest of
the client reads one shape:

    OpenAI-compatible  server-sent events: `data: {"choices": [{"delta": {"content": …},
                       "finish_reason": …}]}` … `data: [DONE]`
                       → {"choices": [{"message": {"content": …}, "finish_reason": …}]}
    Ollama             JSON lines: {"message": {"content": …}, "done": false} … {"done": true,
                       "done_reason": …}
                       → {"message": {"content": …}, "done_reason": …}

A server that ignores `stream` and answers one JSON document is read as it is. A stream that
ends before its last event (the server died mid-answer) is `ProviderUnavailable`, like any
broken transport; an error event is handed on as the `{"error": …}` answer it is.
"""

from __future__ import annotations

import json
from typing import Any

from memvault.vault.errors import ProviderUnavailable


def assemble(raw: bytes, provider: str, where: str) -> Any:
    """The answer in its non-streamed shape (see the module docstring)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProviderUnavailable(f"{where}: the answer is not UTF-8 ({exc}): check the server") from None
    whole = _one_document(text)
    if whole is not None:
        return whole
    events = _events(text, sse=provider != "ollama", where=where)
    return _ollama(events, where) if provider == "ollama" else _openai(events, where)


def _one_document(text: str) -> Any | None:
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None  # several JSON lines, or a broken document: read it as a stream


def _events(text: str, *, sse: bool, where: str) -> list[Any]:
    events = []
    for line in text.splitlines():
        line = line.strip()
        if sse:
            if not line.startswith("data:"):
                continue  # blank separators, `event:` and `:` comment lines
            line = line[len("data:") :].strip()
            if line == "[DONE]":
                events.append("[DONE]")
                break
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ProviderUnavailable(
                f"{where}: answered malformed JSON (a streamed event: {exc}; {line[:80]!r}): "
                "check that the server speaks this API"
            ) from None
    return events


def _openai(events: list[Any], where: str) -> Any:
    parts: list[str] = []
    finish = None
    for event in events:
        if event == "[DONE]":
            break
        if isinstance(event, dict) and event.get("error"):
            return event
        choices = event.get("choices") if isinstance(event, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            continue  # a usage-only or keep-alive event
        delta = choices[0].get("delta") or choices[0].get("message") or {}
        if isinstance(delta, dict) and isinstance(delta.get("content"), str):
            parts.append(delta["content"])
        finish = choices[0].get("finish_reason") or finish
    if finish is None and "[DONE]" not in events:
        raise _ended_early(where)
    return {"choices": [{"message": {"role": "assistant", "content": "".join(parts)}, "finish_reason": finish}]}


def _ollama(events: list[Any], where: str) -> Any:
    parts: list[str] = []
    for event in events:
        if not isinstance(event, dict):
            continue
        if event.get("error"):
            return event
        message = event.get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
        if event.get("done"):
            return {"message": {"role": "assistant", "content": "".join(parts)}, "done": True,
                    "done_reason": event.get("done_reason")}  # fmt: skip
    raise _ended_early(where)


def _ended_early(where: str) -> ProviderUnavailable:
    return ProviderUnavailable(
        f"{where}: the streamed answer ended before its last event (the server stopped mid-answer): "
        "check the server's log, and that the model loads"
    )
