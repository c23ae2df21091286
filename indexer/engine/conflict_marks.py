"""Hits from a note git left in conflict are marked so (issue 44): while a person resolves a
pull by hand, the bullets of both sides stay searchable, and every surface that shows a hit (the
CLI, MCP, the Python API, the web Recall page) says which ones await the resolution.

Only the notes whose indexed state names the markers are read again, and only for the hits
they hold: a recall never scans the vault for markers."""

import dataclasses
from collections.abc import Collection, Mapping

from memvault.indexer.maintenance.generations import CONFLICT_PROBLEM
from memvault.indexer.results import RecallResult
from memvault.vault.git_resolve import sources_in_conflict
from memvault.vault.layout import VaultLayout


def conflicted_notes(files: Mapping, result: RecallResult) -> frozenset[str]:
    """The notes of `result`'s hits whose indexed file state (`files`: path → FileState) says they
    hold merge-conflict markers: one lookup per hit, whatever the vault's size."""
    notes = {hit.source.partition("#")[0] for hit in result.hits}
    return frozenset(path for path in notes if _in_conflict(files.get(path)))


def conflicted_in(files: Mapping) -> frozenset[str]:
    """Every note the file states (`files`) say holds merge-conflict markers (the owner sends them
    with a client's read view, before the client knows its hits)."""
    return frozenset(path for path, state in files.items() if _in_conflict(state))


def _in_conflict(state) -> bool:
    return state is not None and state.problem == CONFLICT_PROBLEM


def mark_conflicts(result: RecallResult, layout: VaultLayout, notes: Collection[str]) -> RecallResult:
    """`result` with `conflict` set on each hit that stands inside a conflict hunk of one of `notes`."""
    suspects = [hit.source for hit in result.hits if hit.source.partition("#")[0] in notes]
    if not suspects:
        return result
    marked = sources_in_conflict(layout, suspects)
    if not marked:
        return result
    hits = tuple(dataclasses.replace(hit, conflict=True) if hit.source in marked else hit for hit in result.hits)
    return dataclasses.replace(result, hits=hits)
