"""Durable completed-turn admission: the write half of `persist_completed_turn`.

`admit_turn` never raises for an expected failure. The caller (an agent host that already has
the provider's answer) gets an `AdmissionResult`: admitted, duplicate, skipped with a reason,
or failed with a bounded category and a message, so the answer is never lost to an exception
and a failed save is never reported as saved.

What is admitted (the payload):
- the deterministic host summary: the answer with control and bidi-control characters turned
  into spaces, NFKC-normalised, whitespace collapsed to one line, and cut to at most 2,048
  UTF-8 bytes (a cut ends in "…");
- in capture mode, the capture text (at most 512 KiB UTF-8). Cron and webhook turns admit only
  the assistant answer: any capture text they pass is replaced by the answer, so a trigger
  prompt never reaches memory.

Credential-looking text is refused, not redacted: the result is `failed` with category
`credential_refused` and nothing is written. The check covers the summary's source (the first
65,536 characters of the answer) and the whole capture text.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from memvault.vault.credentials import find_credential
from memvault.vault.errors import Conflict, InvalidRecord, UnsafePath, VaultError, VaultLocked
from memvault.vault.fsio import StagedWrite, atomic_write, ensure_private_dir, fsync_dir, undone_if_failed
from memvault.vault.ids import normalize_text
from memvault.vault.intake.catalog import LedgerIntegrityError
from memvault.vault.intake.files import DEAD, MAX_RECORD_BYTES, PENDING, CrashHook, IntakeDirs, hit
from memvault.vault.intake.ledger import Ledger, shard_of
from memvault.vault.intake.record import ADMITTING_WRITE_MODES, TIERS, TRIGGERS, IntakeRecord, Payload, render_record
from memvault.vault.intake.state import MAX_ACTIVE, find_active, folder_for, intake_lock, read_receipt, receipt_lookup
from memvault.vault.locks import LivenessFence
from memvault.vault.storage_errors import storage_error

MAX_SUMMARY_BYTES = 2048
MAX_CAPTURE_TEXT_BYTES = 512 * 1024
MAX_RUN_ID_BYTES = 512
MAX_ANSWER_CHARS = 16 * 1024 * 1024
SUMMARY_SOURCE_CHARS = 65536
NOTHING_TO_REPORT = "NOTHING_TO_REPORT"
#: tiny explicit test/ping probes (compared lowercased, without trailing punctuation)
PROBES = frozenset({"test", "test ok", "test okay", "testing", "test 123", "testing 123", "ping", "pong"})
ELLIPSIS = "…"

_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_TRAILING_PUNCTUATION = re.compile(r"[\s.!?]+$")
#: the sentinel as a whole word at the end of the final line, a closing full stop or the like
#: allowed ("Done. NOTHING_TO_REPORT.", not "XNOTHING_TO_REPORT" nor "NOTHING_TO_REPORT_YET")
_ENDS_WITH_SENTINEL = re.compile(r"(?<![\w])" + NOTHING_TO_REPORT + r"[.!]*$")

ADMITTED, DUPLICATE, SKIPPED, FAILED = "admitted", "duplicate", "skipped", "failed"


@dataclass(frozen=True)
class AdmissionResult:
    """What happened to one completed turn. `reason` is the skip reason or failure category."""

    status: str
    id: str | None = None
    reason: str | None = None
    message: str | None = None
    state: str | None = None  # the run's intake state: pending, awaiting_capture, dead, resolved

    @property
    def ok(self) -> bool:
        """True when the turn is durably held (now or by an earlier admission)."""
        return self.status in (ADMITTED, DUPLICATE)

    def to_json(self) -> dict:
        return asdict(self)


class _Refused(Exception):
    def __init__(self, category: str, message: str):
        super().__init__(message)
        self.category = category


def intake_id_for(run_id: str) -> str:
    """The intake id (record name, ledger key) of a provider run id: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()


# --- the deterministic host summary and the skip rules ---------------------------------------


def host_summary(answer: str) -> str:
    """The bounded single-line host observation of an answer (see the module docstring)."""
    text = normalize_text(_UNSAFE_CHARS.sub(" ", answer[:SUMMARY_SOURCE_CHARS]))
    data = text.encode("utf-8")
    if len(data) <= MAX_SUMMARY_BYTES:
        return text
    room = MAX_SUMMARY_BYTES - len(ELLIPSIS.encode("utf-8"))
    return data[:room].decode("utf-8", errors="ignore").rstrip() + ELLIPSIS


def skip_reason(answer: str) -> str | None:
    """Why a successful turn is not written, or None: the spec's two low-signal cases (and empty)."""
    stripped = answer.strip()
    if not stripped:
        return "empty_answer"
    if _ENDS_WITH_SENTINEL.search(stripped.rsplit("\n", 1)[-1].strip()):
        return "nothing_to_report"
    if len(stripped) <= 32 and _TRAILING_PUNCTUATION.sub("", normalize_text(stripped).lower()) in PROBES:
        return "test_probe"
    return None


# --- admission ------------------------------------------------------------------------------


def admit_turn(
    dirs: IntakeDirs,
    *,
    run_id: object,
    answer: object,
    capture_text: object = None,
    trigger: object = "user",
    completed_at: object = None,
    write_mode: str,
    tier: str,
    now: datetime,
    hook: CrashHook | None = None,
    lock_timeout: float = 10.0,
) -> AdmissionResult:
    """Admit one completed turn durably (see the module docstring). Never raises `VaultError`/`OSError`."""
    record, answered = prepare_turn(run_id=run_id, answer=answer, capture_text=capture_text, trigger=trigger,
                                    completed_at=completed_at, write_mode=write_mode, tier=tier, now=now)  # fmt: skip
    if answered is not None:
        return answered
    return admit_record(dirs, record, hook=hook, lock_timeout=lock_timeout)


def prepare_turn(
    *,
    run_id: object,
    answer: object,
    capture_text: object = None,
    trigger: object = "user",
    completed_at: object = None,
    write_mode: str,
    tier: str,
    now: datetime,
) -> tuple[IntakeRecord | None, AdmissionResult | None]:
    """The checks of admission that touch no file: (the record to write, None), or (None, the
    answer: skipped, or failed with its category). Skip rules, cron/webhook hygiene, the size caps
    (the 640 KiB record included) and credential refusal all run here, so a client that admits
    over the network (indexer/team/) refuses exactly what local admission refuses, before sending."""
    if write_mode == "disabled":
        return None, AdmissionResult(SKIPPED, reason="write_mode_disabled", message="memory.writeMode is disabled")
    try:
        record, skip = _prepare(run_id, answer, capture_text, trigger, completed_at, write_mode, tier, now)
        if skip is not None:
            return None, AdmissionResult(
                SKIPPED, intake_id_for(run_id), skip, f"turn not written: {skip.replace('_', ' ')}"
            )
        _check_record_size(render_record(record))
    except _Refused as refused:
        return None, AdmissionResult(FAILED, _safe_id(run_id), refused.category, str(refused))
    return record, None


def admit_record(
    dirs: IntakeDirs, record: IntakeRecord, *, hook: CrashHook | None = None, lock_timeout: float = 10.0
) -> AdmissionResult:
    """Write a prepared record durably (admitted), or answer duplicate / conflict by its id and
    payload hash. Idempotent: the owner admits turns claimed from the team server through here."""
    try:
        data = render_record(record)
        _check_record_size(data)
        # no committed shard missing or short: checked before the lock (256 lstat calls), since a
        # shard only ever grows past what a catalog committed, and the catalog only grows
        checked = Ledger(dirs, create=False, hook=hook)
        checked.check_sizes()
        with _staged(dirs, record, data, hook) as staged:  # the record's fsync before the lock, not under it
            with intake_lock(dirs, lock_timeout):
                result = _admit_locked(dirs, record, data, staged, hook, checked)
            _make_durable(dirs, result, staged)  # the folder's fsync after the lock, before the answer
            return result
    except _Refused as refused:
        return AdmissionResult(FAILED, record.id, refused.category, str(refused))
    except (VaultError, OSError) as exc:
        return AdmissionResult(FAILED, record.id, _category(exc), _describe(exc, dirs.root))


def _check_record_size(data: bytes) -> None:
    if len(data) > MAX_RECORD_BYTES:
        raise _Refused(
            "record_too_large", f"the intake record would be {len(data)} bytes; the limit is {MAX_RECORD_BYTES}"
        )


def _safe_id(run_id: object) -> str | None:
    try:
        return intake_id_for(run_id) if isinstance(run_id, str) and run_id else None
    except UnicodeEncodeError:
        return None


def _category(exc: BaseException) -> str:
    if isinstance(exc, LedgerIntegrityError):
        return "ledger_integrity"
    for kind, category in (
        (Conflict, "conflict"),
        (UnsafePath, "unsafe_path"),
        (VaultLocked, "vault_locked"),
        (InvalidRecord, "invalid_record"),
    ):
        if isinstance(exc, kind):
            return category
    return "io_error" if isinstance(exc, OSError) else getattr(exc, "code", "vault_error")


def _describe(exc: BaseException, root: Path) -> str:
    if isinstance(exc, OSError) and not isinstance(exc, VaultError):
        typed = storage_error(exc, root)  # read-only, full or not ours: the path and the fix
        if typed is not None:
            return f"the turn was NOT saved: {typed}"
        return (
            f"the intake could not be written ({exc.strerror or exc}); "
            "the turn was NOT saved. Fix the disk problem and retry."
        )
    return str(exc)


def _text(value: object, name: str, limit_chars: int) -> str:
    if not isinstance(value, str):
        raise _Refused("invalid_turn", f"{name} must be text, not {type(value).__name__}")
    if len(value) > limit_chars:
        raise _Refused("turn_too_large", f"{name} is {len(value)} characters; the limit is {limit_chars}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Refused("invalid_turn", f"{name} is not valid Unicode (a lone surrogate at {exc.start})") from None
    return value


def _prepare(
    run_id, answer, capture_text, trigger, completed_at, write_mode, tier, now
) -> tuple[IntakeRecord, str | None]:
    if write_mode not in ADMITTING_WRITE_MODES or tier not in TIERS:
        raise _Refused(
            "invalid_config", f"write mode {write_mode!r} / tier {tier!r} cannot admit turns: run `memvault validate`"
        )
    if write_mode == "capture" and tier != "bujo":
        raise _Refused(
            "invalid_config", 'memory.writeMode "capture" requires memory.mode "bujo": run `memvault validate`'
        )
    run_id = _text(run_id, "runId", MAX_RUN_ID_BYTES)
    if not run_id.strip() or len(run_id.encode("utf-8")) > MAX_RUN_ID_BYTES:
        raise _Refused("invalid_turn", f"runId must be 1 to {MAX_RUN_ID_BYTES} UTF-8 bytes of non-blank text")
    answer = _text(answer, "answer", MAX_ANSWER_CHARS)
    if trigger not in TRIGGERS:
        raise _Refused("invalid_turn", f"trigger {trigger!r} is not one of {', '.join(TRIGGERS)}")
    completed = _completed_at(completed_at, now)
    skip = skip_reason(answer)
    capture = _capture_text(capture_text, answer, trigger, write_mode) if skip is None else None
    summary = host_summary(answer)
    if skip is None:
        _refuse_secrets(answer[:SUMMARY_SOURCE_CHARS], capture)
    record = IntakeRecord(intake_id_for(run_id), Payload(write_mode, trigger, summary, capture), tier, completed, now)
    return record, skip


def _completed_at(value: object, now: datetime) -> datetime:
    if value is None:
        return now
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise _Refused("invalid_turn", "completedAt must be a timezone-aware instant (ISO-8601 with an offset)")
    return value


def _capture_text(capture_text: object, answer: str, trigger: str, write_mode: str) -> str | None:
    if write_mode != "capture":
        return None
    if trigger != "user" or capture_text is None:
        return answer  # cron/webhook hygiene: only the assistant answer, never the trigger prompt
    text = _text(capture_text, "captureText", MAX_CAPTURE_TEXT_BYTES)
    size = len(text.encode("utf-8"))
    if size > MAX_CAPTURE_TEXT_BYTES:
        raise _Refused("turn_too_large", f"captureText is {size} bytes; the limit is {MAX_CAPTURE_TEXT_BYTES}")
    return text


def _refuse_secrets(answer: str, capture: str | None) -> None:
    for what, text in (("the answer", answer), ("the capture text", capture)):
        kind = find_credential(normalize_text(text)) if text else None
        if kind is not None:
            raise _Refused(
                "credential_refused",
                f"{what} looks like it contains {kind}; the turn was NOT saved (memvault never writes secrets). "
                f"Remove the secret from the turn and retry.",
            )


def _staged(dirs: IntakeDirs, record: IntakeRecord, data: bytes, hook: CrashHook | None):
    """The record written and fsynced into a temp file of the pending folder before the intake
    lock is taken (every agent's admission takes that lock): under it an admission then only
    checks and renames, and the folder's fsync follows it. A vault's first admission, whose
    folders do not exist yet, writes everything under the lock (`nullcontext`)."""
    pending = dirs.folder(PENDING)
    if not pending.is_dir() or pending.is_symlink():
        return nullcontext()
    try:
        ensure_private_dir(pending)  # vetted (ours, 0700, no symlink) before a byte goes in
        return StagedWrite(
            pending,
            dirs.record_path(PENDING, record.id).name,
            data,
            mode=0o600,
            boundary=lambda stage: hit(hook, _ADMIT_BOUNDARIES[stage]),
        )
    except FileNotFoundError:  # the folder went away meanwhile (a first admission undone): all under the lock
        return nullcontext()


def _admit_locked(dirs: IntakeDirs, record: IntakeRecord, data: bytes, staged: StagedWrite | None,
                  hook: CrashHook | None, checked: Ledger) -> AdmissionResult:  # fmt: skip
    with undone_if_failed(dirs.all_folders()):  # a refused or failed first admission leaves no folder
        return _admit_into(dirs, record, data, staged, hook, checked)


def _admit_into(dirs: IntakeDirs, record: IntakeRecord, data: bytes, staged: StagedWrite | None,
                hook: CrashHook | None, checked: Ledger) -> AdmissionResult:  # fmt: skip
    """Admit under the intake lock; `checked`: the ledger as read (and checked) just before it."""
    dirs.ensure()
    # a live resolver appends beside us without this lock (its own start recovered every shard),
    # so the ledger read before the lock is as current as one read now. Probed under the intake
    # lock: a worker starting now recovers under that lock before it resolves anything. Without
    # one, a resolver may have held the lock meanwhile: the ledger is read again (made, on a
    # vault's first admission) and this run's shard recovered
    resolver_live = LivenessFence(dirs.root).is_held()
    ledger = checked if resolver_live and checked.catalog.on_disk else Ledger(dirs, create=True, hook=hook)
    if not resolver_live:
        ledger.recover_shard(shard_of(record.id), receipt_lookup(dirs))
    existing = _existing(dirs, ledger, record.id)
    if existing is not None:
        state, payload_sha = existing
        if payload_sha != record.payload_sha256:
            raise Conflict(
                f"run {record.id} was already admitted with a different payload; the turn was NOT saved "
                f"(a run id is admitted once). Use a new run id for a new turn."
            )
        return AdmissionResult(DUPLICATE, record.id, None, "already admitted with the same payload", state)
    active = len(dirs.list_folder(PENDING).ids) + len(dirs.list_folder(DEAD).ids)
    if active >= MAX_ACTIVE:
        raise _Refused(
            "intake_full",
            f"the intake holds {active} active records (limit {MAX_ACTIVE}); the turn was NOT saved. "
            f"Fix: start the agent so pending work drains, or `memvault inspect` and retry/resolve dead letters.",
        )
    if staged is not None:
        staged.rename_into(dirs.record_path(PENDING, record.id))  # its folder is fsynced after the lock
    else:
        _write_new(dirs.record_path(PENDING, record.id), data, hook)
    return AdmissionResult(ADMITTED, record.id, None, None, record.state)


def _make_durable(dirs: IntakeDirs, result: AdmissionResult, staged: StagedWrite | None) -> None:
    """The fsync of the folder a record was renamed into, after the intake lock: the next
    admission does not wait for it, and this one answers only once it is done. A duplicate of a
    record still active fsyncs its folder too: the admission that renamed it there (a retry of
    the same run, racing this one) may not have yet."""
    if result.status == ADMITTED and staged is not None and staged.tmp is None:
        staged.fsync_folder()
    elif result.status == DUPLICATE and result.state not in (None, "resolved"):
        fsync_dir(dirs.folder(folder_for(result.state)))


def _existing(dirs: IntakeDirs, ledger: Ledger, intake_id: str) -> tuple[str, str] | None:
    """(state, payload sha256) of a run intake already knows: ledger first, then the files."""
    committed = ledger.lookup(intake_id)
    if committed is not None:
        return "resolved", committed
    found = find_active(dirs, intake_id)
    if found is not None:
        return found[1].state, found[1].payload_sha256
    receipt = read_receipt(dirs, intake_id)
    return None if receipt is None else ("resolved", receipt.payload_sha256)


#: atomic_write's stages, named as the crash tests know them
_ADMIT_BOUNDARIES = {"written": "admit.record_written", "fsynced": "admit.record_fsynced",
                     "renamed": "admit.record_renamed", "committed": "admit.committed"}  # fmt: skip


def _write_new(path, data: bytes, hook: CrashHook | None) -> None:
    """atomic_write (0600) with the intake's named crash boundaries at each stage."""
    atomic_write(path, data, mode=0o600, boundary=lambda stage: hit(hook, _ADMIT_BOUNDARIES[stage]))
