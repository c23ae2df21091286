"""The semantic queue's bounds, from the spec: "Journal indexing holds at most 256 items / 2 MiB"."""

import threading
from datetime import UTC, date, datetime

import pytest

from memvault.indexer.maintenance.semantic_queue import SemanticQueue, marker_path
from memvault.indexer.maintenance.sync import IndexDelta
from memvault.vault.records import MemoryRecord

# local only: these are the local vector lane's own background queue (a SemanticQueue over .index/);
# the server engine writes vectors in the rows' own commit and has no such queue
pytestmark = pytest.mark.one_engine("the local vector lane's own background queue")

SPEC_ITEMS = 256
SPEC_BYTES = 2 * 1024 * 1024


def record(n: int, text: str, path: str = "daily/2026-11-30.md") -> MemoryRecord:
    return MemoryRecord(id=f"m-{n:010d}", path=path, kind="curated", day=date(2026, 11, 30),
                        at=datetime(2026, 11, 30, 12, tzinfo=UTC), text=text, content_hash=f"h{n}",
                        heading=None, explicit_id=True)  # fmt: skip


class HeldWorker:
    """A run_batch that takes its first batch and then blocks, so everything after it stays queued."""

    def __init__(self):
        self.release = threading.Event()
        self.took_first = threading.Event()
        self.batches: list[list[IndexDelta]] = []

    def __call__(self, deltas):
        self.batches.append(deltas)
        self.took_first.set()
        assert self.release.wait(60)


def held_queue(tmp_path):
    worker = HeldWorker()
    queue = SemanticQueue(tmp_path / ".index", worker)
    assert queue.offer(IndexDelta(upserts=[record(10**6, "first, taken by the worker")]))
    assert worker.took_first.wait(60)
    return queue, worker


def test_two_hundred_fifty_six_items_fit_and_the_next_one_does_not(tmp_path):
    queue, worker = held_queue(tmp_path)
    try:
        for n in range(SPEC_ITEMS):
            assert queue.offer(IndexDelta(upserts=[record(n, f"memory {n}")])), n
        assert queue.lag_reason is None
        assert not queue.offer(IndexDelta(upserts=[record(SPEC_ITEMS, "one too many")]))
        assert "semantic queue full" in queue.lag_reason
        assert marker_path(tmp_path / ".index").exists()  # the lag is on disk for whoever catches up
    finally:
        worker.release.set()
        queue.stop(60)
    assert sum(len(delta.upserts) for batch in worker.batches[1:] for delta in batch) == SPEC_ITEMS


def test_up_to_two_mib_of_passage_text_fits_and_more_does_not(tmp_path):
    queue, worker = held_queue(tmp_path)
    # each passage is the text twice plus a space: pick texts so that 4 passages are exactly 2 MiB
    per_passage = SPEC_BYTES // 4
    text = "x" * ((per_passage - 1) // 2)
    assert len(" ".join([text] * 2)) * 4 <= SPEC_BYTES
    try:
        for n in range(4):
            assert queue.offer(IndexDelta(upserts=[record(n, text)])), n
        room = SPEC_BYTES - 4 * len(" ".join([text] * 2))
        exact = "y" * ((room - 1) // 2)
        if room >= 3:
            assert queue.offer(IndexDelta(upserts=[record(5, exact)]))
        assert not queue.offer(IndexDelta(upserts=[record(6, "z" * 64)]))
        assert "semantic queue full" in queue.lag_reason
    finally:
        worker.release.set()
        queue.stop(60)


def test_an_empty_delta_is_always_accepted_and_queues_nothing(tmp_path):
    queue, worker = held_queue(tmp_path)
    try:
        assert queue.offer(IndexDelta())
    finally:
        worker.release.set()
        queue.stop(60)
    assert len(worker.batches) == 1


def test_vectors_are_saved_once_for_many_batches_and_at_once_when_drained(tmp_path, monkeypatch):
    """A save writes the whole vector index, so batches committed in memory are saved together:
    after `SAVE_AFTER_SECONDS`, or when someone drains or stops the queue; the lag marker stays
    meanwhile, so a process killed before the save is caught up by the next open."""
    from memvault.indexer.maintenance import semantic_queue
    from tests.web_helpers import poll

    monkeypatch.setattr(semantic_queue, "SAVE_AFTER_SECONDS", 3600.0)
    batches, saves = [], []
    queue = SemanticQueue(tmp_path / ".index", batches.append, save=lambda: saves.append(len(batches)))
    for n in range(3):
        assert queue.offer(IndexDelta(upserts=[record(n, f"memory {n}")]))
        poll(lambda n=n: sum(len(b) for b in batches) == n + 1, what=f"batch {n}")
    assert saves == [] and marker_path(tmp_path / ".index").exists()
    assert queue.drain(60)
    assert saves == [len(batches)]  # one save, after every batch
    monkeypatch.setattr(semantic_queue, "SAVE_AFTER_SECONDS", 0.0)
    assert queue.offer(IndexDelta(upserts=[record(9, "memory after the drain")]))
    poll(lambda: len(saves) == 2, what="the timed save")
    assert queue.stop(60)
    assert len(saves) == 2 and not marker_path(tmp_path / ".index").exists()


def test_the_catch_up_after_an_overflow_is_told_which_notes_overflowed_and_a_retry_is_too(tmp_path):
    from tests.web_helpers import poll

    worker, calls = HeldWorker(), []

    def catch_up(notes):
        calls.append(notes)
        if len(calls) == 1:
            raise OSError("No space left on device")

    queue = SemanticQueue(tmp_path / ".index", worker, catch_up)
    assert queue.offer(IndexDelta(upserts=[record(10**6, "first, taken by the worker")]))
    assert worker.took_first.wait(60)
    edited = IndexDelta(
        upserts=[record(n, f"memory {n}", path="daily/2026-12-01.md") for n in range(SPEC_ITEMS)],
        removed={"daily/2026-12-02.md#m-0000000001"},
    )
    try:
        assert not queue.offer(edited)
        assert queue.overflowed == SPEC_ITEMS + 1
    finally:
        worker.release.set()
    poll(lambda: len(calls) == 2, what="the catch-up, retried after its failure")
    assert calls == [{"daily/2026-12-01.md", "daily/2026-12-02.md"}] * 2
    poll(lambda: queue.overflowed == 0, what="the overflow to be caught up")
    assert queue.stop(60)


def test_past_the_bound_of_notes_the_catch_up_compares_every_row(tmp_path, monkeypatch):
    from memvault.indexer.maintenance import semantic_queue
    from tests.web_helpers import poll

    monkeypatch.setattr(semantic_queue, "MAX_LAGGING_NOTES", 2)
    worker, calls = HeldWorker(), []
    queue = SemanticQueue(tmp_path / ".index", worker, calls.append)
    assert queue.offer(IndexDelta(upserts=[record(10**6, "first, taken by the worker")]))
    assert worker.took_first.wait(60)
    try:
        for day in (1, 2, 3):
            many = [record(n, f"memory {n}", path=f"daily/2026-12-0{day}.md") for n in range(SPEC_ITEMS + 1)]
            assert not queue.offer(IndexDelta(upserts=many))
    finally:
        worker.release.set()
    poll(lambda: calls, what="the catch-up")
    assert calls == [None]
    assert queue.stop(60)
