"""Entities: graph.jsonl's people, projects, organisations and concepts, searchable, one at a time.

The list groups entities by the same lexical rules as index.md (`consolidate.scan_groups`:
names differing only in case, width, punctuation or spacing are one group; calendar and time
nodes are left out); a search matches any spelling. An entity's page shows its relations,
its associated memories (each linking to its bullet) and a drawn neighbourhood (server-rendered
SVG, `memvault.cli.web.svg`). Deterministic reads of the file; no model.
"""

from __future__ import annotations

from memvault.cli.web.markdown import memory_html, note_url
from memvault.cli.web.reader import NotFound
from memvault.cli.web.svg import neighbourhood
from memvault.cli.web.views.base import Args, View
from memvault.indexer.maintenance.consolidate import lexical_key, scan_groups
from memvault.vault.errors import VaultError
from memvault.vault.note import parse

MAX_LISTED_GROUPS = 500
MAX_MEMORIES_SHOWN = 50
MAX_PROBLEMS_SHOWN = 20
NO_GRAPH = ("No entity graph yet: graph.jsonl is written by BuJo capture (memory.mode \"bujo\"), "
            "which extracts people, projects and their relations from each admitted turn.")  # fmt: skip


class EntitiesView(View):
    path = "/entities"
    template = "entities.html"
    section = "Entities"

    def data(self, args: Args, reader) -> dict:
        query = args.text("q", max_chars=200)
        if not reader.graph_exists():
            return {"query": query, "groups": [], "total": 0, "entities": 0, "relations": 0, "notice": NO_GRAPH,
                    "scanComplete": True, **_problems(reader)}  # fmt: skip
        graph = reader.graph()
        groups, _scanned, complete = scan_groups(graph, frozenset())
        wanted = lexical_key(query) if query else ""
        needle = query.casefold()
        rows = []
        for group in sorted(groups.values(), key=lambda g: (-g.memories, g.display.casefold(), g.key)):
            if query and wanted not in group.key and not any(needle in name.casefold() for name in group.names):
                continue
            kind = min(group.types.items(), key=lambda item: (-item[1], item[0]))[0]
            rows.append({"name": group.display, "key": group.key, "type": kind, "ids": sorted(group.ids),
                         "spellings": sorted(group.names), "memories": group.memories,
                         "url": f"/entities/{sorted(group.ids)[0]}"})  # fmt: skip
        return {"query": query, "groups": rows[:MAX_LISTED_GROUPS], "total": len(rows), "entities": len(graph.entities),
                "relations": len(graph.relations), "notice": None, "scanComplete": complete,
                **_problems(reader)}  # fmt: skip


class EntityView(View):
    path = "/entities/{entity_id}"
    template = "entity.html"
    section = "Entities"

    def data(self, args: Args, reader) -> dict:
        entity_id = args.text("entity_id", max_chars=64)
        graph = reader.graph()
        entity = graph.entities.get(entity_id)
        if entity is None:
            raise NotFound(f"no entity {entity_id!r} in graph.jsonl: search the Entities page")
        key = lexical_key(entity.name)
        spellings = sorted((e for e in graph.entities.values()
                            if e.id != entity.id and key and lexical_key(e.name) == key),
                           key=lambda e: e.id)  # fmt: skip

        def named(other: str) -> dict:
            found = graph.entities.get(other)
            return {"id": other, "name": found.name if found else other, "url": f"/entities/{other}"}

        outgoing = sorted(((r, b) for a, r, b in graph.relations if a == entity.id and b in graph.entities))
        incoming = sorted(((r, a) for a, r, b in graph.relations if b == entity.id and a in graph.entities))
        facts = graph.facts_of(entity.id)
        return {
            "entity": {"id": entity.id, "name": entity.name, "type": entity.type},
            "spellings": [{"id": e.id, "name": e.name, "url": f"/entities/{e.id}"} for e in spellings],
            "outgoing": [{"relation": r, **named(b)} for r, b in outgoing],
            "incoming": [{"relation": r, **named(a)} for r, a in incoming],
            "memories": _memories(reader, facts[:MAX_MEMORIES_SHOWN]),
            "memoryCount": len(facts),
            "svg": neighbourhood(graph, entity.id),
            **_problems(reader),
        }

    def title(self, data: dict) -> str:
        return data["entity"]["name"]


def _problems(reader) -> dict:
    """graph.jsonl's lines left out of the page (each names its line and the fix), at most a few."""
    problems = reader.graph_problems()
    return {"problems": problems[:MAX_PROBLEMS_SHOWN], "problemCount": len(problems)}


def _memories(reader, facts) -> list[dict]:
    """Each associated fact with its bullet's current text (read from its note), or why not."""
    notes: dict[str, tuple[dict[str, str], dict[str, str]] | None] = {}
    out = []
    for fact in facts:
        if fact.source not in notes:
            try:
                text = reader.note(fact.source).text
                notes[fact.source] = ({b.id: b.text for b in parse(text).bullets}, memory_html(text))
            except VaultError:
                notes[fact.source] = None
        texts, htmls = notes[fact.source] or ({}, {})
        text = texts.get(fact.id)
        out.append({"id": fact.id, "source": f"{fact.source}#^{fact.id}", "url": note_url(fact.source, fact.id),
                    "text": text, "html": htmls.get(fact.id), "salience": fact.salience,
                    "missing": "the bullet is no longer in its note" if text is None else None})  # fmt: skip
    return out
