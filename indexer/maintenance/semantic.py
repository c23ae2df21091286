"""The semantic half of a generation: one vector per curated memory, keyed like its BM25 row.

    .index/gen-NNNNNN/vectors/   segments, dead list, log, meta (indexer/search/vectors.py)

A memory's vector embeds its *passage* (its text, then its note neighbours, see
`memvault.indexer.search.context`), so the passage hash stored as the vector's tag says whether
it is current. Embedding runs
outside the vault lock (it may be a slow HTTP call); only `commit` needs the lock. BM25 is the
commit point of the index: vectors may lag behind it, never lead, and `lagging_paths` finds the
notes whose vectors are missing or stale so they can be caught up.
"""

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memvault.indexer.maintenance.sync import IndexDelta, Row
from memvault.indexer.search.bm25 import context_hash
from memvault.indexer.search.context import OWN_WEIGHT, passage
from memvault.indexer.search.embeddings import EmbeddingIdentity, EmbeddingProvider
from memvault.indexer.search.vectors import META_FILE, StagedMerge, VectorIndex
from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import MACHINE_DIR_MODE, make_dir
from memvault.vault.records import MemoryRecord

FOLDER = "vectors"
#: the second model's vectors (memory.extraEmbeddings), beside FOLDER in the same generation
EXTRA_FOLDER = "vectors-extra"
#: the spec's batch size for semantic indexing
EMBED_BATCH = 32


def passage_hash(text: str, ctx_hash: str) -> str:
    """Identity of what a vector embeds, computable from a record or from a stored BM25 row."""
    return hashlib.sha256(f"{text}\0{ctx_hash}".encode()).hexdigest()[:16]


def record_passage_hash(record: MemoryRecord) -> str:
    return passage_hash(record.text, context_hash(record.context))


def row_passage_hash(row: Row) -> str:
    return passage_hash(row.text, row.context_hash)


@dataclass
class PreparedVectors:
    """Embedded upserts and keys to drop, ready to commit under the lock."""

    keys: list[str] = field(default_factory=list)
    hashes: list[str] = field(default_factory=list)
    vectors: np.ndarray | None = None
    removed: set[str] = field(default_factory=set)

    @property
    def is_empty(self) -> bool:
        return not self.keys and not self.removed


@dataclass(frozen=True)
class StagedSemantic:
    """The slow half of a save of a SemanticIndex: a merge of its vector segments, or None."""

    merge: StagedMerge | None
    folder: Path

    def discard(self) -> None:
        if self.merge is not None:
            self.merge.discard(self.folder)


class SemanticIndex:
    """Vectors of one generation. Thread-safe for search; commits need the vault lock."""

    def __init__(self, folder: Path, identity: EmbeddingIdentity, vectors: VectorIndex):
        self.folder = folder
        self.identity = identity
        self.vectors = vectors
        self._stamp = vectors.stamp()
        self._unsaved = False  # True after a failed save: memory holds what the files do not
        #: commits applied in memory so far: a catch-up planned at one version commits at that one only
        self.version = 0

    @classmethod
    def create(
        cls, generation: Path, identity: EmbeddingIdentity, name: str = FOLDER, *, building: bool = False
    ) -> "SemanticIndex":
        """New empty vectors in the generation's folder `name`; `building`: a rebuild's, saved once
        at its end, then served by opening them (vectors.py)."""
        folder = generation / name
        make_dir(folder, MACHINE_DIR_MODE, parents=True)
        created = cls(folder, identity, VectorIndex.create(folder, identity, building=building))
        if not building:
            created.save()
        return created

    @classmethod
    def open(cls, generation: Path, identity: EmbeddingIdentity, name: str = FOLDER) -> "SemanticIndex":
        """Open a generation's vectors (`name`: its folder, FOLDER or EXTRA_FOLDER); IndexUnavailable
        if missing, torn, or of another model."""
        folder = generation / name
        if not (folder / META_FILE).is_file():
            what = "vector index" if name == FOLDER else f"{identity.provider} vector index ({name}/)"
            raise IndexUnavailable(f"no {what} in {generation.name}: run `memvault rebuild`")
        return cls(folder, identity, VectorIndex.open(folder, identity))

    def held(self, keys: Sequence[str]) -> list[str | None]:
        """The passage hash each key's vector was embedded from, or None where it has no vector."""
        return self.vectors.tags(keys)

    @property
    def passages(self) -> dict[str, str]:
        """Every key's passage hash (a copy: for tests and small vaults; serving uses `held`)."""
        keys = self.vectors.ids()
        return dict(zip(keys, self.held(keys), strict=True))

    # --- writing -----------------------------------------------------------------------------

    def prepare(self, delta: IndexDelta, provider: EmbeddingProvider) -> PreparedVectors:
        """Embed every curated upsert whose passage changed (no lock needed; may be slow)."""
        prepared = PreparedVectors(removed={_key(r) for r in delta.upserts if r.kind != "curated"} | set(delta.removed))
        curated = [r for r in delta.upserts if r.kind == "curated"]
        hashes = [record_passage_hash(r) for r in curated]
        held = self.held([_key(r) for r in curated])
        todo = [(r, h) for r, h, old in zip(curated, hashes, held, strict=True) if old != h]
        if todo:
            prepared.keys = [_key(r) for r, _ in todo]
            prepared.hashes = [h for _, h in todo]
            prepared.vectors = embed_passages(provider, [r for r, _ in todo])
        return prepared

    def commit(self, prepared: PreparedVectors) -> None:
        """Apply embedded upserts and deletions in memory (call `save` to persist). Lock held."""
        if prepared.removed:
            self.vectors.delete(sorted(prepared.removed))
        if prepared.keys:
            self.vectors.add(prepared.keys, prepared.vectors, prepared.hashes)
        self.version += 1

    def save(self) -> None:
        """Persist what memory holds: the changes since the last save go to the vector log.

        A save that fails (a full disk) leaves this object holding vectors the files do not: it
        is then marked unsaved, so the next `reload_if_changed` reads what the disk holds, and a
        catch-up compares the notes with that, not with memory (issue 24: vectors were never
        rebuilt after a full disk, since every later check trusted the unsaved copy)."""
        try:
            self.vectors.save()
        except BaseException:
            self._unsaved = True
            raise
        self._saved()

    def stage_save(self) -> StagedSemantic:
        """`save`'s slow half, without the vault lock: a merge of vector segments when one is due
        (tens of megabytes to hundreds), which every writer would otherwise wait for."""
        return StagedSemantic(self.vectors.stage_save(), self.folder)

    def put_staged(self, staged: StagedSemantic) -> None:
        """Put a staged merge in place and save the rest (vault lock held); after a failed save,
        the staged merge is dropped and the whole save runs again."""
        if self._unsaved:
            staged.discard()
            self.save()
            return
        try:
            self.vectors.put_staged(staged.merge)
        except BaseException:
            self._unsaved = True
            raise
        self._saved()

    def _saved(self) -> None:
        self._unsaved = False
        self._stamp = self.vectors.stamp()

    def reload_if_changed(self) -> "SemanticIndex":
        """This index, or a fresh copy when another process saved since it was loaded (or this
        one failed to save what it holds)."""
        if not self._unsaved and self.vectors.stamp() == self._stamp:
            return self
        return SemanticIndex.open(self.folder.parent, self.identity, self.folder.name)

    # --- reading -----------------------------------------------------------------------------

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        return self.vectors.search(query_vector, k)

    def lagging_paths(self, rows: Iterable[Row], within: set[str] | None = None) -> tuple[set[str], set[str]]:
        """(notes with a missing or stale vector, keys with a vector but no curated row). With
        `within` (note paths), `rows` are those notes' rows and only their keys can be extra."""
        curated = [row for row in rows if row.kind == "curated"]
        held = self.held([row.key for row in curated])
        stale = {row.path for row, old in zip(curated, held, strict=True) if old != row_passage_hash(row)}
        keys = {row.key for row in curated}
        extra = {key for key in self.vectors.ids() if key not in keys}
        if within is not None:
            extra = {key for key in extra if key.rpartition("#")[0] in within}
        return stale, extra


def embed_passages(provider: EmbeddingProvider, records: Sequence[MemoryRecord]) -> np.ndarray:
    """One unit vector per record's passage.

    A provider with `embed_sums` (sum-pooled token embeddings, like the builtin model) embeds
    each distinct text once and adds own text and neighbours; others embed the joined passage.
    """
    sums = getattr(provider, "embed_sums", None)
    if sums is None:
        return embed_in_batches(provider, [passage(r) for r in records])
    batches = [_passages_from_sums(sums, records[i : i + EMBED_BATCH]) for i in range(0, len(records), EMBED_BATCH)]
    return np.vstack(batches) if batches else np.zeros((0, provider.identity.dim), dtype=np.float32)


def _passages_from_sums(sums, records: Sequence[MemoryRecord]) -> np.ndarray:
    """One batch (≤ EMBED_BATCH passages): each distinct text embedded once, parts added."""
    texts = sorted({t for r in records for t in (r.text, *r.neighbours)})
    row_of = {text: row for row, text in enumerate(texts)}
    parts = sums(texts)
    out = np.zeros((len(records), parts.shape[1]), dtype=np.float32)
    for row, record in enumerate(records):
        out[row] = OWN_WEIGHT * parts[row_of[record.text]]
        for neighbour in record.neighbours:
            out[row] += parts[row_of[neighbour]]
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def embed_in_batches(provider: EmbeddingProvider, texts: Sequence[str]) -> np.ndarray:
    parts = [provider.embed(texts[i : i + EMBED_BATCH]) for i in range(0, len(texts), EMBED_BATCH)]
    return np.vstack(parts) if parts else np.zeros((0, provider.identity.dim), dtype=np.float32)


def _key(record: MemoryRecord) -> str:
    return f"{record.path}#{record.id}"


def coverage_findings(
    generation: Path, identity: EmbeddingIdentity, rows: Iterable[Row], name: str = FOLDER
) -> list[tuple[str, str, str]]:
    """(code, subject, message) for every curated row whose vector (in folder `name`) is missing
    or stale, and every vector left without a row. Empty when the vectors cover the index exactly."""
    try:
        semantic = SemanticIndex.open(generation, identity, name)
    except IndexUnavailable as exc:
        return [("vectors_unreadable", f"{generation.name}/{name}", str(exc))]
    model = "" if name == FOLDER else f" {identity.provider}"
    rows = [row for row in rows if row.kind == "curated"]
    found = []
    for row, held in zip(rows, semantic.held([row.key for row in rows]), strict=True):
        if held is None:
            found.append(("missing_vector", row.key, f"{row.key} has no{model} vector"))
        elif held != row_passage_hash(row):
            found.append(
                ("stale_vector", row.key, f"{row.key}'s{model} vector was embedded from older text or context")
            )
    keys = {row.key for row in rows}
    for key in semantic.vectors.ids():
        if key not in keys:
            found.append(("extra_vector", key, f"{key} has a vector in {name}/ but no curated row"))
    return found
