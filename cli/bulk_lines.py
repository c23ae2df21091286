"""`memvault remember --from FILE`: JSON lines in, one summary out (the store does the writing)."""

from datetime import datetime

from memvault.vault.errors import VaultError
from memvault.vault.strict_json import loads_strict

#: one line of the import at most this long (a fact is at most 4 KiB; room for JSON escapes)
MAX_LINE_BYTES = 64 * 1024


def parse_lines(stream) -> tuple[list[tuple[int, dict]], list[dict]]:
    """([(line number, {"text", "at"})], [refused lines with why]); blank lines are skipped."""

    items, refused = [], []
    for number, raw in enumerate(iter(lambda: stream.readline(MAX_LINE_BYTES + 1), b""), 1):
        if len(raw) > MAX_LINE_BYTES:
            refused.append(_refusal(number, f"the line is longer than {MAX_LINE_BYTES} bytes"))
            while raw and not raw.endswith(b"\n"):  # skip the rest of the oversized line
                raw = stream.readline(MAX_LINE_BYTES + 1)
            continue
        if not raw.strip():
            continue
        try:
            body = loads_strict(raw)
        except (ValueError, VaultError) as exc:
            refused.append(_refusal(number, f"not a JSON object ({exc})"))
            continue
        problem = _problem(body)
        if problem:
            refused.append(_refusal(number, problem))
            continue
        at = body.get("at")
        items.append((number, {"text": body["text"], "at": None if at is None else _instant(at)}))
    return items, refused


def _problem(body) -> str | None:
    if not isinstance(body, dict):
        return 'each line must be a JSON object {"text": ..., "at": ...}'
    unknown = sorted(set(body) - {"text", "at"})
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}: a line has text and optional at"
    if not isinstance(body.get("text"), str):
        return "text is required and must be a string"
    at = body.get("at")
    if at is not None and (not isinstance(at, str) or _instant(at) is None):
        return f"at {str(at)[:40]!r} is not an ISO-8601 instant with an offset (e.g. 2026-11-30T14:03:00+01:00)"
    return None


def _instant(text: str):
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _refusal(line: int, message: str) -> dict:
    return {"line": line, "code": "invalid_record", "message": message}


def summarize(items: list[tuple[int, dict]], outcomes: list, refused: list[dict]) -> dict:
    counts = {"added": 0, "duplicate": 0, "completed": 0, "refused": len(refused)}
    rows = list(refused)
    for (line, _), outcome in zip(items, outcomes, strict=True):
        if outcome.receipt is not None:
            counts[outcome.receipt.status] = counts.get(outcome.receipt.status, 0) + 1
        else:
            counts["refused"] += 1
            rows.append({"line": line, "code": outcome.error.code, "message": str(outcome.error)})
    rows.sort(key=lambda row: row["line"])
    lines = max([line for line, _ in items] + [row["line"] for row in refused] + [0])
    return {"lines": lines, "counts": counts, "refused": rows}
