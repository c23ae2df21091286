"""Catching the serving vectors up with BM25's rows: find what lags, embed it, commit it.

BM25 is the commit point; the vectors follow it. A catch-up compares every curated row with the
passage hash its vector was embedded from: a note with a row that has no vector, or one embedded
from older text or neighbours, is read again and its lagging memories embedded; a vector whose
row is gone is dropped. Three steps, each for every vector list (`_Lane`) of the vault:

    plan     (vault lock)  the rows, and the lagging notes read as they are
    prepare  (no lock)     embed: the slow part, an HTTP call for a remote model
    commit   (vault lock)  apply in memory, unless another commit overtook the plan meanwhile

Run under one lock hold (`SemanticService.catch_up`: open, a rescan), or with the embedding
outside it (`SemanticService.catch_up_beside_writers`: a live owner after its queue overflowed,
so writers do not wait for the embedding). A catch-up told which notes lag (`paths`: the notes
whose deltas overflowed the queue) reads those notes' rows only; without them it reads every row.
A list that fails (its model is down) does not hold the others back: the first failure is
raised after the others are done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from memvault.indexer.maintenance.derived import DerivedIndex, read_note_records
from memvault.indexer.maintenance.semantic import PreparedVectors, SemanticIndex, record_passage_hash
from memvault.indexer.maintenance.sync import IndexDelta
from memvault.vault.errors import IndexUnavailable, ProviderUnavailable
from memvault.vault.layout import VaultLayout

#: the failures of one vector list that leave the others to be caught up
LANE_FAILURES = (ProviderUnavailable, IndexUnavailable)


@dataclass
class LanePlan:
    """What one vector list lacks, as planned against `semantic` at its `version`."""

    lane: object  # semantic_service._Lane: its `serving` index and `provider()`
    semantic: SemanticIndex
    version: int
    delta: IndexDelta
    stale_notes: int
    prepared: PreparedVectors | None = None

    @property
    def changes(self) -> bool:
        return bool(self.delta.upserts or self.delta.removed)


def plan(
    lanes: Iterable,
    layout: VaultLayout,
    index: DerivedIndex,
    vault_zone: str,
    *,
    paths: set[str] | None = None,
    thorough: bool = False,
) -> tuple[list[LanePlan], Exception | None]:
    """The plan of every list that lags (vault lock held), and the first list's failure.

    Without `thorough` or `paths`, a list whose vector count equals the curated row count is
    trusted (the cheap check of an open); with `paths`, only those notes' rows are compared."""
    rows, notes, plans, failure = None, {}, [], None
    for lane in lanes:
        if lane.serving is None:
            continue
        try:
            semantic = lane.serving = lane.serving.reload_if_changed()
            if paths is None and not thorough and len(semantic.vectors) == index.bm25.count_kind("curated"):
                continue
            if rows is None:
                rows = (
                    index.all_rows()
                    if paths is None
                    else [row for path in sorted(paths) for row in index.rows_of(path).values()]
                )
            stale, extra = semantic.lagging_paths(rows, within=paths)
            delta = IndexDelta(removed=set(extra))
            for path in sorted(stale):
                if path not in notes:
                    notes[path] = read_note_records(layout, path, vault_zone).records
                records = notes[path]
                held = semantic.held([f"{r.path}#{r.id}" for r in records])
                delta.upserts += [r for r, old in zip(records, held, strict=True) if old != record_passage_hash(r)]
        except LANE_FAILURES as exc:
            failure = failure or exc
            continue
        plans.append(LanePlan(lane, semantic, semantic.version, delta, len(stale)))
    return plans, failure


def prepare(plans: list[LanePlan]) -> Exception | None:
    """Embed every plan's upserts (no lock needed); the first list's failure, or None. A plan
    whose list failed is left unprepared: commit skips it."""
    failure = None
    for each in plans:
        if not each.changes:
            continue
        try:
            each.prepared = each.semantic.prepare(each.delta, each.lane.provider())
        except LANE_FAILURES as exc:
            failure = failure or exc
    return failure


def overtaken(plans: list[LanePlan]) -> bool:
    """Whether a plan no longer describes its list (vault lock held): the generation was swapped,
    another process saved the vectors, or another commit changed them since the plan."""
    for each in plans:
        serving = each.lane.serving
        if serving is not each.semantic or each.semantic.version != each.version:
            return True
        if each.semantic.reload_if_changed() is not each.semantic:
            return True
    return False


def commit(plans: list[LanePlan]) -> list[LanePlan]:
    """Apply every prepared plan in memory (vault lock held); the plans that changed a list."""
    changed = []
    for each in plans:
        if each.prepared is not None and each.changes:
            each.semantic.commit(each.prepared)
            changed.append(each)
    return changed
