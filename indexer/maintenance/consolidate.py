"""Consolidation: regenerate the living `index.md`, count duplicate groups. No model, no mutation.

`memvault consolidate` (and the schedule inside `memvault watch`) projects the vault into one
block of `index.md`:

* recent days: the newest daily notes, as [[wikilinks]], with their memory counts;
* counts: curated memories (and how many are superseded), raw observations, entities,
  relations, duplicate groups;
* top entities (BuJo): a bounded preview of `graph.jsonl`. The scan walks the graph's rows in
  their deterministic order (entities, then fact associations, then relations) until the
  inventory is exhausted or SCAN_CEILING (10,000) rows were read, keeping only per-group counts.
  Calendar/time nodes (type `time`, or names such as "Monday", "next week", "2026-11-30",
  "14:00", "Q3") are filtered out. Lexically equivalent names ("Project Atlas",
  "project-atlas", "PROJECT  ATLAS") collapse into one group shown under its most frequent
  spelling. At most MAX_GROUPS (50) groups are rendered, by associated memories, then name.
  This is a display projection, not entity resolution: graph.jsonl is never changed.

Duplicate groups: curated bullets sharing one normalised content hash, and lexical entity
groups holding more than one entity id. They are counted, never merged.

The schedule in `watch` writes only to a vault that opted in (its index.md holds the block:
`memvault init` writes an empty one, an explicit `memvault consolidate` adds it). Only the
block between the two markers is memvault's; text a person writes outside it stays
byte for byte. A file without markers gets the block appended. The bytes are deterministic (no
clock in them), so an unchanged vault rewrites nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from memvault.indexer.search.supersession import superseded_ids
from memvault.vault.errors import InvalidRecord
from memvault.vault.fsio import read_bytes_nofollow
from memvault.vault.graph import Graph, read_graph
from memvault.vault.layout import DAILY, VaultLayout, note_day
from memvault.vault.locks import VaultLock, replace_if_unchanged
from memvault.vault.paths import resolve_inside

INDEX_FILE = "index.md"
START, END = "<!-- memvault:consolidate:start -->", "<!-- memvault:consolidate:end -->"
SCAN_CEILING = 10_000
MAX_GROUPS = 50
RECENT_DAYS = 7
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri sat sun"
_MONTHS = "january february march april may june july august september october november december " \
          "jan feb mar apr jun jul aug sep sept oct nov dec"  # fmt: skip
_RELATIVE = r"today|tonight|tomorrow|yesterday|now|morning|afternoon|evening|noon|midnight|weekend|eod|eow"
_CALENDAR_RE = re.compile(
    rf"(?:(?:this|next|last|previous|coming)\s+)?(?:{_RELATIVE}|week|month|quarter|year|{'|'.join(_WEEKDAYS.split())}"
    rf"|{'|'.join(_MONTHS.split())})"
    rf"|(?:{'|'.join(_MONTHS.split())})\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?"
    rf"|\d{{1,2}}(?:st|nd|rd|th)?\s+(?:{'|'.join(_MONTHS.split())})(?:\s+\d{{4}})?"
    r"|\d{4}(?:-\d{2}(?:-\d{2})?)?|\d{1,2}[:.]\d{2}(?:\s*[ap]\.?m\.?)?|\d{1,2}\s*[ap]\.?m\.?|q[1-4](?:\s+\d{4})?"
    r"|(?:fy|h[12])\s*\d{2,4}|\d{1,2}/\d{1,2}(?:/\d{2,4})?|w(?:eek)?\s*\d{1,2}",
    re.IGNORECASE,
)
_LEXICAL_DROP = re.compile(r"[\W_]+", re.UNICODE)
_WIKILINK_UNSAFE = re.compile(r"[\[\]|#^\n\r]")


@dataclass
class EntityGroup:
    key: str
    names: Counter = field(default_factory=Counter)
    ids: set = field(default_factory=set)
    types: Counter = field(default_factory=Counter)
    memories: int = 0

    @property
    def display(self) -> str:
        return min(self.names.items(), key=lambda item: (-item[1], item[0]))[0]


@dataclass(frozen=True)
class ConsolidationReport:
    path: str
    changed: bool
    recent_days: tuple[tuple[str, int], ...]
    curated: int
    superseded: int
    audit: int
    entities: int
    relations: int
    duplicate_fact_groups: int
    duplicate_entity_groups: int
    groups_shown: int
    scanned_rows: int
    scan_complete: bool
    model_calls: int = 0

    def to_json(self) -> dict:
        body = asdict(self)
        body["recent_days"] = [{"day": d, "memories": n} for d, n in self.recent_days]
        return body


def is_calendar_node(name: str, kind: str) -> bool:
    """Ephemeral calendar/time nodes the preview leaves out."""
    return kind == "time" or _CALENDAR_RE.fullmatch(" ".join(name.split())) is not None


def lexical_key(name: str) -> str:
    """Names that differ only in case, width, punctuation or spacing share one key."""
    return _LEXICAL_DROP.sub("", unicodedata.normalize("NFKC", name).casefold())


def scan_groups(graph: Graph, retired: frozenset[str]) -> tuple[dict[str, EntityGroup], int, bool]:
    """Walk the graph's rows in canonical order up to `SCAN_CEILING`; (groups, rows read, complete)."""
    rows = [("entity", e.id) for e in sorted(graph.entities.values(), key=lambda e: e.id)]
    rows += [("fact", f) for f in sorted(graph.facts)]
    rows += [("relation", r) for r in sorted(graph.relations)]
    groups: dict[str, EntityGroup] = {}
    group_of: dict[str, str] = {}
    for kind, item in rows[:SCAN_CEILING]:
        if kind == "entity":
            entity = graph.entities[item]
            if is_calendar_node(entity.name, entity.type) or not lexical_key(entity.name):
                continue
            group = groups.setdefault(lexical_key(entity.name), EntityGroup(lexical_key(entity.name)))
            group.names[entity.name] += 1
            group.ids.add(entity.id)
            group.types[entity.type] += 1
            group_of[entity.id] = group.key
        elif kind == "fact" and item not in retired:
            for key in {group_of[e] for e in graph.facts[item].entities if e in group_of}:
                groups[key].memories += 1
    return groups, min(len(rows), SCAN_CEILING), len(rows) <= SCAN_CEILING


def render_block(
    report: ConsolidationReport, groups: list[EntityGroup], bujo: bool, notes: dict[str, str] | None = None
) -> str:
    """index.md's block; `notes` names each recent day's note (a nested `daily/YYYY/MM/…` one is
    linked by its own path, which Obsidian resolves; the flat name is the default)."""
    lines = [
        START,
        "_Regenerated by `memvault consolidate`: edits inside this block are replaced; write outside it._",
        "",
    ]
    lines += ["## Recent days", ""]
    links = {day: (notes or {}).get(day, f"{DAILY}/{day}.md").removesuffix(".md") for day, _ in report.recent_days}
    lines += [f"- [[{links[day]}|{day}]]: {_memories(count)}" for day, count in report.recent_days] or [
        "- (no daily notes yet)"
    ]
    lines += ["", "## Counts", "", f"- curated memories: {report.curated} ({report.superseded} superseded)",
              f"- raw observations (audit): {report.audit}",
              f"- duplicate groups: {report.duplicate_fact_groups} of memories, "
              f"{report.duplicate_entity_groups} of entities"]  # fmt: skip
    if bujo:
        lines += [f"- entities: {report.entities}, relations: {report.relations}", "", "## Top entities", ""]
        for group in groups:
            kind = min(group.types.items(), key=lambda item: (-item[1], item[0]))[0]
            alias = f" ({len(group.ids)} spellings)" if len(group.ids) > 1 else ""
            lines.append(f"- [[{_wikilink(group.display)}]] ({kind}): {_memories(group.memories)}{alias}")
        if not groups:
            lines.append("- (no entities yet)")
        coverage = "complete" if report.scan_complete else f"stopped at the {SCAN_CEILING:,}-row ceiling"
        lines += ["", f"_Graph scan: {report.scanned_rows} rows, {coverage}._"]
    return "\n".join(lines + [END]) + "\n"


def _memories(count: int) -> str:
    return f"{count} memory" if count == 1 else f"{count} memories"


def _wikilink(name: str) -> str:
    return " ".join(_WIKILINK_UNSAFE.sub(" ", name).split()) or "unnamed"


def merge_into(existing: str | None, block: str) -> str:
    """The new index.md: the block replaced between its markers, or appended; nothing else moves."""
    if existing is None:
        return "# Memory index\n\n" + block
    start, end = existing.find(START), existing.find(END)
    if start != -1 and end > start:
        tail = existing[end + len(END) :]
        return existing[:start] + block.rstrip("\n") + (tail if tail.startswith("\n") else "\n" + tail)
    if start != -1 or end != -1:
        raise InvalidRecord(
            f"{INDEX_FILE} has only one of the consolidation markers; memvault will not guess where "
            "its block ends. Fix: delete the stray marker line, then run `memvault consolidate`."
        )
    separator = "" if existing.endswith("\n\n") or not existing else ("\n" if existing.endswith("\n") else "\n\n")
    return existing + separator + block


def consolidate(layout: VaultLayout, config, index, *, create: bool = True) -> ConsolidationReport:
    """Regenerate index.md from the files and the derived index (see the module docstring).

    Without `create` (the watcher's schedule) only a vault that opted in is written to: one
    whose index.md already holds memvault's block (`memvault init` writes an empty one; the
    first `memvault consolidate` adds it). A vault kept in git that never asked for index.md
    never sees one appear, and `git status` stays clean.
    """
    bujo = config.memory.mode == "bujo"
    retired = superseded_ids(index.generation) if bujo else frozenset()
    graph = _read_graph(layout.root) if bujo else Graph()
    groups, scanned, complete = scan_groups(graph, retired)
    shown = sorted(groups.values(), key=lambda g: (-g.memories, g.display.casefold(), g.key))[:MAX_GROUPS]
    counts = index.row_counts()
    per_day: dict[str, int] = {}
    notes: dict[str, str] = {}
    for path in sorted(counts):  # flat before nested: a day kept under both names links the flat one
        day = note_day(path, DAILY)  # either layout (vault/layout.py)
        if day is not None:
            per_day[day.isoformat()] = per_day.get(day.isoformat(), 0) + counts[path]
            notes.setdefault(day.isoformat(), path)
    days = sorted(per_day.items())
    report = ConsolidationReport(
        INDEX_FILE, False, tuple(reversed(days[-RECENT_DAYS:])), index.bm25.count_kind("curated"), len(retired),
        index.bm25.count_kind("audit"), len(graph.entities), len(graph.relations), _duplicate_fact_groups(index),
        sum(1 for g in groups.values() if len(g.ids) > 1), len(shown), scanned, complete,
    )  # fmt: skip
    changed = _write(layout, render_block(report, shown, bujo, notes), create)
    return ConsolidationReport(**{**asdict(report), "changed": changed})


def _read_graph(root: Path) -> Graph:
    return read_graph(root)[0]


def _duplicate_fact_groups(index) -> int:
    return sum(1 for count in index.bm25.term_counts("chash", kind="curated").values() if count > 1)


def _write(layout: VaultLayout, block: str, create: bool) -> bool:
    path = resolve_inside(layout.root, INDEX_FILE)
    with VaultLock(layout.root):
        try:
            old = read_bytes_nofollow(path)
        except FileNotFoundError:
            old = None
        try:
            text = None if old is None else old.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidRecord(
                f"{INDEX_FILE} is not UTF-8 (byte {exc.start}); memvault will not rewrite it: re-save it as UTF-8"
            ) from exc
        if not create and (text is None or START not in text):
            return False  # not opted in: the schedule never creates index.md or its block
        new = merge_into(text, block).encode("utf-8")
        if new == old:
            return False
        replace_if_unchanged(path, old, new, mode=0o644)
    return True
