"""Many Remembers in one critical section: one compare-and-swap write (one fsync) per daily note and
one index commit for the whole batch. `MemoryStore.remember_many` (importers, backfills) and the
owner's group commit (remembers that arrive together) both come here.

Each item keeps the single call's meaning: the same checks (`prepare_fact`: empty, oversized,
control characters, credentials), the same idempotency by content (a memory already indexed, or
earlier in the same batch, is a duplicate naming the stored one), the same receipts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from memvault.indexer.results import RememberReceipt
from memvault.vault.clock import local_day_and_time, zone
from memvault.vault.curated import NewBullet, append_bullets_once, plan_bullet, prepare_fact
from memvault.vault.errors import InvalidRecord, VaultError
from memvault.vault.ids import content_hash, memory_id
from memvault.vault.layout import DAILY
from memvault.vault.records import note_zone_name

#: items per critical section of the group commit: bounds a waiting caller's lock hold
BATCH_ITEMS = 512
#: items per batch of `remember_many` (an import): fewer index commits, still a bounded batch
IMPORT_BATCH_ITEMS = 4096


@dataclass(frozen=True)
class RememberItem:
    text: str
    at: datetime | None = None


@dataclass(frozen=True)
class BulkOutcome:
    """One input item's fate: a receipt, or the error that refused it (nothing was written for it)."""

    index: int  # position in the input (0-based)
    receipt: RememberReceipt | None
    error: VaultError | None = None

    def to_json(self) -> dict:
        if self.receipt is not None:
            return {"index": self.index, **self.receipt.to_json()}
        error = {"type": type(self.error).__name__, "code": self.error.code, "message": str(self.error)}
        return {"index": self.index, "status": "refused", "error": error}


def as_item(value: object) -> RememberItem:
    if isinstance(value, RememberItem):
        return value
    if isinstance(value, str):
        return RememberItem(value)
    if isinstance(value, dict) and set(value) <= {"text", "at"}:
        return RememberItem(value.get("text"), value.get("at"))
    raise InvalidRecord("each item must be text, a RememberItem, or {'text': …, 'at': datetime}")


def remember_batch(
    store, items: list[RememberItem], now: Callable[[], datetime], *, defer_index: bool = False
) -> list[RememberReceipt | VaultError]:
    """Write and index one batch under the vault lock; one result per item, in order.

    With `defer_index` (the owner's group commit) the notes are written and fsynced as always,
    but their index commit is left to `store.flush_deferred` (indexer/engine/deferred.py)."""
    results: list[RememberReceipt | VaultError | None] = [None] * len(items)
    prepared: list[tuple[int, str, datetime]] = []
    for position, item in enumerate(items):
        try:
            fact = prepare_fact(item.text)
            when = item.at if item.at is not None else now()
            local_day_and_time(when, zone(store.time_zone))  # a naive time is refused here, per item
        except VaultError as exc:
            results[position] = exc
            continue
        prepared.append((position, fact, when))
    with store._lock:  # the deferred set's own lock only around its changes (it is taken last, always)
        index = store.writable_index()
        seen: dict[str, RememberReceipt] = {}
        per_note: dict[str, list[tuple[int, NewBullet, str]]] = defaultdict(list)
        titles: dict[str, str] = {}
        notes: dict = {}  # each note read once per batch
        places: dict = {}  # each day's note looked for once per batch
        for position, fact, when in prepared:
            digest = content_hash(fact)
            earlier = seen.get(digest) or store._deferred.receipt(digest)
            if earlier is None:
                existing = store._indexed_copy(index, digest)  # findable now, or None
                if existing is not None:
                    earlier = RememberReceipt(existing.id, existing.source, "duplicate", existing.text)
            if earlier is not None:
                results[position] = RememberReceipt(earlier.id, earlier.source, "duplicate", earlier.text)
                seen.setdefault(digest, earlier)
                continue
            try:  # the note's zone decides the wall time; an id a person edited is not reused (vault/curated.py)
                relpath, title, bullet = plan_bullet(store.layout, DAILY, fact, memory_id(fact), when,
                                                     store.time_zone, content_identity=True, notes=notes,
                                                     places=places)  # fmt: skip
            except VaultError as exc:
                results[position] = exc
                continue
            per_note[relpath].append((position, bullet, fact))
            titles[relpath] = title
            seen[digest] = RememberReceipt(bullet.block_id, f"{relpath}#^{bullet.block_id}", "added", fact)
        for relpath, entries in sorted(per_note.items()):
            try:
                written = set(
                    append_bullets_once(
                        store.layout,
                        relpath,
                        titles[relpath],
                        [bullet for _, bullet, _ in entries],
                        as_read=notes[relpath],
                    )
                )
            except VaultError as exc:  # this note (a conflict, bad bytes): its items fail, others go on
                for position, _, _ in entries:
                    results[position] = exc
                continue
            for position, bullet, fact in entries:
                status = "added" if bullet.block_id in written else "completed"
                results[position] = RememberReceipt(bullet.block_id, f"{relpath}#^{bullet.block_id}", status, fact)
        touched = [
            relpath for relpath, entries in per_note.items() if not isinstance(results[entries[0][0]], VaultError)
        ]
        if touched:
            added = {content_hash(fact): results[position] for entries in per_note.values()
                     for position, _, fact in entries if not isinstance(results[position], VaultError)}  # fmt: skip
            records = []  # an owner's pending rows: searchable at once beside the committed index (overlay.py)
            if defer_index or store.defers_index_commits:
                records = [
                    record
                    for relpath in touched
                    for position, bullet, fact in per_note[relpath]
                    if (record := _pending(store, notes.get(relpath), relpath, bullet, fact)) is not None
                ]
            if defer_index:
                with store._deferred.lock:
                    store._deferred.add(sorted(touched), added, records)
            else:
                store._index_written(index, sorted(touched), added, records)  # one index commit for the whole batch
    return results


def _pending(store, note, relpath: str, bullet: NewBullet, fact: str):
    """The row a bullet just written will have once committed (read back in the note's zone)."""
    from memvault.indexer.engine.overlay import pending_record

    note_zone = store.time_zone if note is None else note_zone_name(note, store.time_zone)
    return pending_record(relpath, bullet.block_id, fact, bullet.wall_time, note_zone)


def chunks(items: Iterable[object], size: int = BATCH_ITEMS):
    batch: list[object] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
