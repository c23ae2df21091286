"""What the owner does for each request on the channel: one library call each, answered as the
same JSON the in-process call's result turns into (so a client's output equals in-process output).

Writes and maintenance run one at a time (`Owner._calls`). Reads (`CONCURRENT`) run on their
request's own thread beside each other and beside whatever holds the lock (a commit, a rebuild, a
catch-up embedding batch): they search the committed index plus the rows still waiting for
their commit (indexer/engine/overlay.py) and never take the vault lock. `UNLOCKED` requests
skip the start-up wait too: `hello` must answer while a long request runs, an admission is a
file write the intake's own lock guards, and remembers queue for the group commit.
"""

from __future__ import annotations

from datetime import datetime

from memvault.vault.errors import InvalidRecord

#: how long an `admit` through the owner waits for its turn to be projected (as the in-process drain)
ADMIT_WAIT_SECONDS = 10.0


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memvault")
    except PackageNotFoundError:
        return "0"


def _hello(owner, args: dict) -> dict:
    return owner.identity()


def _status(owner, args: dict) -> dict:
    store = owner.store
    semantic = getattr(store, "_semantic", None)
    return owner.identity() | {
        "intake": store.intake_snapshot(),
        "vectors": None if semantic is None else semantic.lag_reason,
        "repairs": list(owner.repairs[-20:]),
    }


def _recall(owner, args: dict) -> dict:
    """Never waits: not for a commit, not for vectors still queued (BM25 finds a fresh memory)."""
    result = owner.store.recall(args.get("query"), limit=args.get("limit", 10), mode=args.get("mode", "tool"))
    return result.to_json(explain=True)


def _read_view(owner, args: dict) -> dict:
    """What a client needs to answer a recall in its own process (indexer/engine/client_reads.py)."""
    from memvault.indexer.engine.client_reads import read_view

    return read_view(owner.store, args)


def _found(owner, args: dict) -> dict:
    """The memories a client's own recalls found, for the access log."""
    from memvault.indexer.engine.client_reads import record_found

    return record_found(owner.store, args)


def _remember(owner, args: dict) -> dict:
    """Through the owner's group commit: remembers arriving together share one index commit."""
    return owner.group_commit().remember(args.get("text"), _instant(args.get("at"), "at")).to_json()


def _remember_many(owner, args: dict) -> dict:
    items = args.get("items")
    if not isinstance(items, list):
        raise InvalidRecord("remember_many: items must be a list of {text, at}")
    parsed = []
    for item in items:
        if isinstance(item, dict) and "at" in item and isinstance(item.get("at"), str):
            try:
                item = {**item, "at": _instant(item["at"], "at")}
            except InvalidRecord as exc:
                parsed.append(exc)
                continue
        parsed.append(item)
    with owner._calls:
        good = [p for p in parsed if not isinstance(p, InvalidRecord)]
        outcomes = iter(owner.store.remember_many(good))
    results = []
    for position, item in enumerate(parsed):
        if isinstance(item, InvalidRecord):
            error = {"type": type(item).__name__, "code": item.code, "message": str(item)}
            results.append({"index": position, "status": "refused", "error": error})
        else:
            results.append({**next(outcomes).to_json(), "index": position})
    return {"results": results}


def _admitted(owner, args: dict) -> dict:
    """A client admitted a turn itself (durable already): wake the worker to project it now."""
    intake_id = args.get("id")
    worker = getattr(owner.store, "_intake", None)
    if not isinstance(intake_id, str) or worker is None:
        return {"worker": None if worker is None else "woken"}
    worker.admitted(intake_id)
    return {"worker": "woken"}


def _wait_projected(owner, args: dict) -> dict:
    """Wait (bounded) until this turn's first attempt ended: `admit --wait`."""
    intake_id = args.get("id")
    if not isinstance(intake_id, str):
        raise InvalidRecord("wait: id must be an intake id")
    timeout = args.get("timeout", ADMIT_WAIT_SECONDS)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 <= timeout <= ADMIT_WAIT_SECONDS:
        raise InvalidRecord(f"wait: timeout must be 0 to {ADMIT_WAIT_SECONDS:g} seconds")
    settled = owner.wait_settled(intake_id, float(timeout))
    return {"settled": settled}


def _admit(owner, args: dict) -> dict:
    """Admit one turn and, like the in-process drain, answer once the worker has handled it (bounded)."""
    turn = dict(args)
    if "completed_at" in turn:
        turn["completed_at"] = _instant(turn["completed_at"], "completedAt")
    with owner._calls:
        result = owner.store.persist_completed_turn(**turn)
    body = {"result": result.to_json(), "worker": None}
    if result.status == "admitted":
        settled = owner.wait_settled(result.id)
        body["worker"] = "drained" if settled else "the engine is still working on it; the turn stays pending"
    elif result.ok:
        body["worker"] = "drained"
    return body


def _journal(owner, args: dict) -> dict:
    service = owner.store.journal_service(persistent=bool(args.get("persistent")))
    arguments = args.get("arguments")
    if not isinstance(arguments, dict):
        raise InvalidRecord("journal: arguments must be an object")
    return {"page": service.query(arguments).to_json(), "kept": service.snapshots.persistent}


def _health(owner, args: dict) -> dict:
    return owner.store.health_report(strict=bool(args.get("strict")), owner=owner)


def _sync(owner, args: dict) -> dict:
    return owner.store.sync().to_json()


def _rebuild(owner, args: dict) -> dict:
    return owner.store.rebuild().to_json()


def _stop(owner, args: dict) -> dict:
    owner.stop_requested.set()
    return {"stopping": True, "pid": owner.identity()["pid"]}


def _instant(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRecord(f"{name} must be an ISO-8601 instant")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRecord(f"{name} {value[:40]!r} is not ISO-8601 (e.g. 2026-11-30T14:03:00+01:00)") from None
    if when.tzinfo is None:
        raise InvalidRecord(f"{name} needs a UTC offset or Z (e.g. 2026-11-30T14:03:00+01:00)")
    return when


OPERATIONS = {
    "hello": _hello,
    "status": _status,
    "recall": _recall,
    "read_view": _read_view,
    "found": _found,
    "remember": _remember,
    "remember_many": _remember_many,
    "admit": _admit,
    "admitted": _admitted,
    "wait": _wait_projected,
    "journal": _journal,
    "health": _health,
    "sync": _sync,
    "rebuild": _rebuild,
    "stop": _stop,
}
UNLOCKED = frozenset({"hello", "admit", "admitted", "wait", "stop", "remember", "remember_many", "found"})
CONCURRENT = frozenset({"recall", "read_view"})
