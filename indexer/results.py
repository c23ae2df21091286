"""What the engine hands back: receipts and recall results. Plain frozen data, JSON-ready."""

from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, tzinfo

from memvault.vault.layout import note_day
from memvault.vault.plaintext import task_state


@dataclass(frozen=True)
class RememberReceipt:
    id: str
    source: str  # "daily/2026-11-30.md#^m-1f3a9c0d2e"
    #: "added" (new bullet), "duplicate" (same content already stored), "completed" (the bullet
    #: was on disk from an interrupted earlier call and has now been indexed)
    status: str
    text: str

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RecallHit:
    id: str
    text: str
    source: str
    score: float
    #: the memory's instant, aware, in the vault's zone (the zone its note is named and read in)
    at: datetime
    kind: str = "curated"
    #: per-retriever evidence (ranks and raw scores), shown by `--explain`
    explain: dict = field(default_factory=dict)
    #: every note that holds this exact text, `source` first (one hit per text, not per note)
    sources: tuple[str, ...] = ()
    #: the memory stands inside a merge-conflict hunk of its note (engine/conflict_marks.py)
    conflict: bool = False

    def to_json(self, explain: bool = False) -> dict:
        body = {
            "id": self.id,
            "text": self.text,
            "source": self.source,
            "sources": list(self.sources or (self.source,)),
            "score": round(self.score, 6),
            "at": self.at.isoformat(),
            "date": _note_date(self.source),
            "conflict": self.conflict,
        }
        if (task := task_state(self.text)) is not None:
            body["task"] = task  # "open" | "done": the box stays in the text too
        if explain:
            body["explain"] = self.explain
        return body


def _note_date(source: str) -> str:
    """The date of the note a source names, in either layout (`daily/2026/11/2026-11-30.md#^…`)."""
    day = note_day(source.partition("#")[0])
    return day.isoformat() if day is not None else source.rsplit("/", 1)[-1][:10]


@dataclass(frozen=True)
class RecallResult:
    query: str
    mode: str
    hits: tuple[RecallHit, ...]
    #: None, or why the answer is partial (e.g. "vector index: rebuild needed")
    degraded: str | None = None
    #: guidance instead of hits, for questions memory should not answer (active chat, resumes)
    guidance: str | None = None
    #: auto mode: the gate's content-free decision (reason, shape, band and window sizes)
    gate: dict | None = None
    #: tool mode, no hits: why ("nothing in memory matches": below the relevance floor, or no candidate)
    empty_reason: str | None = None
    #: tool mode: the periods the question names and its evidence against the floor (`--explain`)
    explain: dict | None = None

    def in_zone(self, zone: tzinfo) -> "RecallResult":
        """The same result with every hit's instant shown in `zone` (the vault's): the indexes keep
        UTC, people read the zone their notes are written in."""
        return replace(self, hits=tuple(replace(hit, at=hit.at.astimezone(zone)) for hit in self.hits))

    def to_json(self, explain: bool = False) -> dict:
        body = {
            "query": self.query,
            "mode": self.mode,
            "degraded": self.degraded,
            "guidance": self.guidance,
            "empty_reason": self.empty_reason,
            "hits": [hit.to_json(explain) for hit in self.hits],
        }
        if explain and self.explain is not None:
            body["explain"] = self.explain
        if self.gate is not None:
            body["gate"] = self.gate
        return body


@dataclass(frozen=True)
class RebuildReport:
    generation: str
    files: int
    memories: int
    seconds: float
    problems: tuple[str, ...] = ()
    #: each phase with its count, total and seconds (`maintenance/progress.py`)
    phases: tuple[dict, ...] = ()

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SyncReport:
    files: tuple[str, ...]
    memories: int
    skipped: str | None = None  # why no sync happened (read-only vault, lock busy)

    def to_json(self) -> dict:
        return asdict(self)
