"""Applying a semantic plan to the canonical files, idempotently, in a fixed order.

    1. facts   → daily/<day>.md      one CAS write appending the bullets whose ids are missing
    2. graph   → graph.jsonl         entities, one association line per fact, relations (add-only)
    3. replay  → sidecar             the plan's exact delta (capture, lifecycle, edges)

The caller holds the vault lock, then indexes the note and projects the sidecar into the index
(indexer/services/capture.py), then resolves the intake run. Every step recognises its own
earlier output (bullet ids, line identities, entry identities), so a run killed between any two
steps and replayed from the retained plan ends in exactly the state an uninterrupted run would:
one bullet per fact, one line per entity/association/relation, one entry per sidecar identity.

UPDATE and SUPERSEDE never rewrite a line, a person's or memvault's own: the replacement is
appended as a new bullet with its own fact id, and the retired memory's id gets a lifecycle
entry in the sidecar. Recall excludes lifecycle-retired ids; the markdown keeps the history.
"""

from __future__ import annotations

from pathlib import Path

from memvault.vault.capture.plan import SemanticPlan
from memvault.vault.curated import NewBullet, append_bullets_once
from memvault.vault.graph import Entity, FactLink, Graph, read_graph, write_graph
from memvault.vault.intake.files import CrashHook, hit
from memvault.vault.layout import VaultLayout
from memvault.vault.replay import capture_delta, read_sidecar, write_sidecar


def commit_plan(
    layout: VaultLayout, plan: SemanticPlan, hook: CrashHook | None = None, *, authority: str = "capture"
) -> bytes:
    """Steps 1-3 under the caller's vault lock; returns the sidecar bytes now published.

    graph.jsonl and the sidecar are read (and refused if memvault cannot trust them) before
    the first byte is written, so a broken hand edit stops the commit before it starts.
    """
    graph, graph_bytes = read_graph(layout.root)
    state, sidecar_bytes = read_sidecar(layout.root)
    state.merge(capture_delta(plan, authority))
    write_facts(layout, plan)
    hit(hook, "capture.facts_written")
    apply_graph(layout.root, plan, (graph, graph_bytes))
    hit(hook, "capture.graph_written")
    published = write_sidecar(layout.root, sidecar_bytes, state)
    hit(hook, "capture.sidecar_written")
    return published


def write_facts(layout: VaultLayout, plan: SemanticPlan) -> bool:
    """Append every planned fact not yet in its note (one CAS write); False when all were there."""
    facts = sorted(plan.facts, key=lambda fact: fact.index)
    bullets = [NewBullet(fact.text, fact.id, plan.time) for fact in facts]
    return bool(bullets) and bool(append_bullets_once(layout, plan.note_in(layout), plan.day, bullets))


def apply_graph(root: Path, plan: SemanticPlan, read: tuple[Graph, bytes | None] | None = None) -> bool:
    """Add the plan's entities, per-fact associations and relations; True when the file changed."""
    graph, old = read_graph(root) if read is None else read
    note = plan.note_in(VaultLayout(root))
    for entity_id, name, kind in plan.entities:
        graph.add_entity(Entity(entity_id, name, kind))
    for fact in plan.facts:
        graph.add_fact(FactLink(fact.id, fact.entities, fact.salience, note))
    for source, relation, target in plan.relations:
        graph.add_relation(source, relation, target)
    return write_graph(root, old, graph)
