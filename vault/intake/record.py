"""The owner-only intake record and resolved receipt: canonical bytes and a strict parser.

A record is one canonical JSON object (sorted keys, no spaces, UTF-8, one trailing LF). The
parser accepts exactly the bytes `render` produces: duplicate keys, unknown or missing fields,
wrong types, non-canonical spacing or order, a payload hash that does not match the payload,
or an id that does not match the file name are all `InvalidRecord`. A hand-edited or damaged
record therefore fails closed instead of being half-trusted.

The *payload* is what a completed turn admits: write mode, trigger, the deterministic host
summary and (capture mode only) the capture text. Its SHA-256 is the turn's identity beside the
run id: the same run with the same payload is a duplicate; with another payload, a conflict.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from memvault.vault.errors import InvalidRecord
from memvault.vault.intake.backoff import MAX_ATTEMPTS, MAX_INVALID_OUTPUT_ATTEMPTS
from memvault.vault.intake.files import MAX_RECORD_BYTES, is_intake_id
from memvault.vault.layout import parse_note_ref
from memvault.vault.strict_json import loads_strict

FORMAT_VERSION = 1
TIERS = ("lite", "journal", "bujo")
ADMITTING_WRITE_MODES = ("append-host-summary", "capture")
TRIGGERS = ("user", "cron", "webhook")

#: record states; the folder a record lives in follows from its state
PENDING_STATE, AWAITING_CAPTURE, DEAD_STATE = "pending", "awaiting_capture", "dead"
RECORD_STATES = (PENDING_STATE, AWAITING_CAPTURE, DEAD_STATE)
#: receipt outcomes
PROJECTED, OPERATOR_RESOLVED = "projected", "operator_resolved"
#: capture mode: the semantic plan was committed (facts, graph, replay sidecar, index)
CAPTURED = "captured"
OUTCOMES = (PROJECTED, OPERATOR_RESOLVED, CAPTURED)

#: the bounded set of failure categories a record may carry
FAILURE_CATEGORIES = (
    "note_conflict",
    "invalid_note",
    "unsafe_path",
    "vault_locked",
    "index_unavailable",
    "provider_unavailable",
    "ledger_integrity",
    "invalid_model_output",  # capture: the chat model's answer broke the strict grammar
    "empty_extraction",  # capture: the model extracted nothing from a substantive turn
    "io_error",
    "unexpected",
)

SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")

_PAYLOAD_KEYS = {"captureText", "summary", "trigger", "writeMode"}
_RECORD_KEYS = {
    "admittedAt", "attempts", "completedAt", "failure", "id", "lastAttemptAt", "nextAttemptAt",
    "payload", "payloadSha256", "projection", "revision", "state", "tier", "v",
}  # fmt: skip
_RECEIPT_KEYS = {
    "admittedAt", "attempts", "id", "outcome", "payloadSha256", "projection", "reason", "resolvedAt", "v",
}  # fmt: skip


@dataclass(frozen=True)
class Payload:
    write_mode: str
    trigger: str
    summary: str
    capture_text: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "captureText": self.capture_text,
            "summary": self.summary,
            "trigger": self.trigger,
            "writeMode": self.write_mode,
        }

    @property
    def sha256(self) -> str:
        return hashlib.sha256(_canonical(self.to_json())).hexdigest()


@dataclass(frozen=True)
class IntakeRecord:
    id: str
    payload: Payload
    tier: str
    completed_at: datetime
    admitted_at: datetime
    state: str = PENDING_STATE
    attempts: int = 0
    revision: int = 1
    next_attempt_at: datetime | None = None  # None: due at admission time
    last_attempt_at: datetime | None = None
    failure: str | None = None
    projection: str | None = None
    #: failed attempts whose model answer was unusable (their own, smaller budget: backoff.py);
    #: written as "invalidAttempts" only when non-zero, so older records keep their bytes
    invalid_attempts: int = 0

    @property
    def payload_sha256(self) -> str:
        return self.payload.sha256

    def due_at(self) -> datetime:
        return self.next_attempt_at or self.admitted_at

    def is_due(self, now: datetime) -> bool:
        # awaiting capture is due too: the capture step (indexer/services/capture.py) runs then
        return self.state in (PENDING_STATE, AWAITING_CAPTURE) and self.due_at() <= now

    def evolve(self, **changes: Any) -> IntakeRecord:
        """A new revision of this record (the payload never changes)."""
        return replace(self, revision=self.revision + 1, **changes)


@dataclass(frozen=True)
class Receipt:
    id: str
    payload_sha256: str
    outcome: str
    admitted_at: datetime
    resolved_at: datetime
    attempts: int
    projection: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "admittedAt": format_ts(self.admitted_at),
            "attempts": self.attempts,
            "id": self.id,
            "outcome": self.outcome,
            "payloadSha256": self.payload_sha256,
            "projection": self.projection,
            "reason": self.reason,
            "resolvedAt": format_ts(self.resolved_at),
        }


# --- rendering ------------------------------------------------------------------------------


def _canonical(value: dict[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def format_ts(instant: datetime) -> str:
    """UTC, microseconds, `Z`: one spelling per instant, so records stay canonical."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _ts_or_none(instant: datetime | None) -> str | None:
    return None if instant is None else format_ts(instant)


def render_record(record: IntakeRecord) -> bytes:
    body = {
        "admittedAt": format_ts(record.admitted_at),
        "attempts": record.attempts,
        "completedAt": format_ts(record.completed_at),
        "failure": record.failure,
        "id": record.id,
        "lastAttemptAt": _ts_or_none(record.last_attempt_at),
        "nextAttemptAt": _ts_or_none(record.next_attempt_at),
        "payload": record.payload.to_json(),
        "payloadSha256": record.payload_sha256,
        "projection": record.projection,
        "revision": record.revision,
        "state": record.state,
        "tier": record.tier,
        "v": FORMAT_VERSION,
    }
    if record.invalid_attempts:
        body["invalidAttempts"] = record.invalid_attempts
    return _canonical(body) + b"\n"


def render_receipt(receipt: Receipt) -> bytes:
    return _canonical({**receipt.to_json(), "v": FORMAT_VERSION}) + b"\n"


# --- strict parsing -------------------------------------------------------------------------


class _Strict:
    """Field checks that name the file and the field, for one document being parsed."""

    def __init__(self, where: str, data: dict[str, Any]):
        self.where, self.data = where, data

    def fail(self, message: str) -> InvalidRecord:
        return InvalidRecord(
            f"{self.where}: {message}. Fix: move the file aside and run `memvault inspect`; "
            "memvault never guesses its contents."
        )

    def keys(self, expected: set[str], data: dict[str, Any] | None = None) -> None:
        got = set((self.data if data is None else data).keys())
        if got != expected:
            extra, missing = sorted(got - expected), sorted(expected - got)
            raise self.fail(f"unexpected fields {extra}, missing fields {missing}")

    def text(self, key: str, data: dict[str, Any] | None = None, *, nullable: bool = False) -> str | None:
        value = (self.data if data is None else data)[key]
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            raise self.fail(f"{key} must be text")
        return value

    def integer(self, key: str, low: int, high: int) -> int:
        value = self.data[key]
        if type(value) is not int or not low <= value <= high:
            raise self.fail(f"{key} must be an integer from {low} to {high}")
        return value

    def choice(
        self, key: str, options: tuple[str, ...], data: dict[str, Any] | None = None, *, nullable: bool = False
    ) -> str | None:
        value = self.text(key, data, nullable=nullable)
        if value is not None and value not in options:
            raise self.fail(f"{key} {value!r} is not one of {', '.join(options)}")
        return value

    def timestamp(self, key: str, *, nullable: bool = False) -> datetime | None:
        value = self.text(key, nullable=nullable)
        if value is None:
            return None
        if not _TS_RE.fullmatch(value):
            raise self.fail(f"{key} is not a UTC timestamp like 2026-11-30T13:03:00.000000Z")
        try:
            return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        except ValueError as exc:
            raise self.fail(f"{key} is not a real instant") from exc

    def projection(self, key: str) -> str | None:
        """A turn's bullet (`note#^id`), in any layout the vault keeps notes in (vault/layout.py):
        `^t-…` (run-derived, Lite/BuJo) or, for Journal, the bullet holding the same content
        (`^m-…`, or any block id of a bullet a person wrote with that text)."""
        value = self.text(key, nullable=True)
        if value is not None and parse_note_ref(value) is None:
            raise self.fail(f"{key} is not a projected bullet reference (a daily/ or audit/ note, #^ and a block id)")
        return value

    def matching(self, key: str, pattern: re.Pattern[str], what: str, *, nullable: bool = False) -> str | None:
        value = self.text(key, nullable=nullable)
        if value is not None and not pattern.fullmatch(value):
            raise self.fail(f"{key} is not {what}")
        return value


def _load(data: bytes, where: str) -> dict[str, Any]:
    if len(data) > MAX_RECORD_BYTES:
        raise InvalidRecord(
            f"{where}: {len(data)} bytes is over the {MAX_RECORD_BYTES}-byte record limit. Fix: move it aside."
        )
    try:
        value = loads_strict(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidRecord(
            f"{where}: not a valid intake JSON document ({exc}). Fix: move it aside and run `memvault inspect`."
        ) from exc
    if not isinstance(value, dict):
        raise InvalidRecord(f"{where}: an intake document must be a JSON object. Fix: move it aside.")
    return value


def _parse_payload(check: _Strict) -> Payload:
    raw = check.data["payload"]
    if not isinstance(raw, dict):
        raise check.fail("payload must be an object")
    check.keys(_PAYLOAD_KEYS, raw)
    return Payload(
        write_mode=check.choice("writeMode", ADMITTING_WRITE_MODES, raw),
        trigger=check.choice("trigger", TRIGGERS, raw),
        summary=check.text("summary", raw),
        capture_text=check.text("captureText", raw, nullable=True),
    )


def parse_record(data: bytes, expected_id: str, where: str) -> IntakeRecord:
    """The record in `data`, which must be exactly what `render_record` writes for `expected_id`."""
    check = _Strict(where, _load(data, where))
    optional = {"invalidAttempts"} & set(check.data) if isinstance(check.data, dict) else set()
    check.keys(_RECORD_KEYS | optional)
    if check.data["v"] != FORMAT_VERSION or type(check.data["v"]) is not int:
        raise check.fail(f"format version {check.data['v']!r} is not {FORMAT_VERSION}")
    record = IntakeRecord(
        id=check.text("id"),
        payload=_parse_payload(check),
        tier=check.choice("tier", TIERS),
        completed_at=check.timestamp("completedAt"),
        admitted_at=check.timestamp("admittedAt"),
        state=check.choice("state", RECORD_STATES),
        attempts=check.integer("attempts", 0, MAX_ATTEMPTS),
        revision=check.integer("revision", 1, 2**31),
        next_attempt_at=check.timestamp("nextAttemptAt", nullable=True),
        last_attempt_at=check.timestamp("lastAttemptAt", nullable=True),
        failure=check.choice("failure", FAILURE_CATEGORIES, nullable=True),
        projection=check.projection("projection"),
        invalid_attempts=check.integer("invalidAttempts", 1, MAX_INVALID_OUTPUT_ATTEMPTS) if optional else 0,
    )
    _check_identity(check, record.id, expected_id, record.payload_sha256)
    if render_record(record) != data:
        raise check.fail("bytes are not in canonical form (hand-edited?)")
    return record


def parse_receipt(data: bytes, expected_id: str, where: str) -> Receipt:
    """The receipt in `data`, which must be exactly what `render_receipt` writes for `expected_id`."""
    check = _Strict(where, _load(data, where))
    check.keys(_RECEIPT_KEYS)
    if check.data["v"] != FORMAT_VERSION or type(check.data["v"]) is not int:
        raise check.fail(f"format version {check.data['v']!r} is not {FORMAT_VERSION}")
    receipt = Receipt(
        id=check.text("id"),
        payload_sha256=check.matching("payloadSha256", re.compile(r"[0-9a-f]{64}"), "a SHA-256 hex digest"),
        outcome=check.choice("outcome", OUTCOMES),
        admitted_at=check.timestamp("admittedAt"),
        resolved_at=check.timestamp("resolvedAt"),
        attempts=check.integer("attempts", 0, MAX_ATTEMPTS),
        projection=check.projection("projection"),
        reason=check.matching("reason", SLUG_RE, "a reason slug", nullable=True),
    )
    _check_identity(check, receipt.id, expected_id, receipt.payload_sha256)
    if render_receipt(receipt) != data:
        raise check.fail("bytes are not in canonical form (hand-edited?)")
    return receipt


def _check_identity(check: _Strict, got_id: str, expected_id: str, payload_sha: str) -> None:
    if not is_intake_id(got_id) or got_id != expected_id:
        raise check.fail("its id does not match its file name (renamed or copied?)")
    stated = check.data["payloadSha256"]
    if stated != payload_sha:
        raise check.fail("payloadSha256 does not match the payload (damaged or edited)")
