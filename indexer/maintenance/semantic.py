"""The semantic half of a generation: one vector per curated memory, keyed like its BM25 row.

    .index/gen-NNNNNN/vectors/vectors.hnsw, vectors-meta.json   (indexer/search/vectors.py)
    .index/gen-NNNNNN/vectors/semantic.json                      passage hash per key

A memory's vector embeds its *passage* (its text, then its note neighbours, see
`memvault.indexer.search.context`), so the stored passage hash says whether a vector is current. Embedding runs
outside the vault lock (it may be a slow HTTP call); only `commit` needs the lock. BM25 is the
commit point of the index: vectors may lag behind it, never lead, and `lagging_paths` finds the
notes whose vectors are missing or stale so they can be caught up.
"""

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from memvault.indexer.maintenance.sync import IndexDelta, Row
from memvault.indexer.search.bm25 import context_hash
from memvault.indexer.search.context import OWN_WEIGHT, passage
from memvault.indexer.search.embeddings import EmbeddingIdentity, EmbeddingProvider
from memvault.indexer.search.vectors import META_FILE, StagedSave, VectorIndex
from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import MACHINE_DIR_MODE, atomic_write, fsync_dir, make_dir, remove_quietly, write_temp
from memvault.vault.records import MemoryRecord

FOLDER = "vectors"
#: the second model's vectors (memory.extraEmbeddings), beside FOLDER in the same generation
EXTRA_FOLDER = "vectors-extra"
SEMANTIC_META = "semantic.json"
SEMANTIC_FORMAT = 1
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
    """A save of a SemanticIndex staged at `version`: its vectors and passage hashes in temp files."""

    version: int
    vectors: StagedSave
    passages: Path

    def discard(self) -> None:
        self.vectors.discard()
        remove_quietly(self.passages)


class SemanticIndex:
    """Vectors of one generation. Thread-safe for search; commits need the vault lock."""

    def __init__(self, folder: Path, identity: EmbeddingIdentity, vectors: VectorIndex, passages: dict[str, str]):
        self.folder = folder
        self.identity = identity
        self.vectors = vectors
        self.passages = passages
        self._stamp = _stamp(folder)
        self._unsaved = False  # True after a failed save: memory holds what the files do not
        #: commits applied in memory so far: a catch-up planned at one version commits at that one only
        self.version = 0

    @classmethod
    def create(cls, generation: Path, identity: EmbeddingIdentity, name: str = FOLDER) -> "SemanticIndex":
        folder = generation / name
        make_dir(folder, MACHINE_DIR_MODE, parents=True)
        created = cls(folder, identity, VectorIndex.create(folder, identity), {})
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
        vectors = VectorIndex.open(folder, identity)
        return cls(folder, identity, vectors, _read_passages(folder))

    # --- writing -----------------------------------------------------------------------------

    def prepare(self, delta: IndexDelta, provider: EmbeddingProvider) -> PreparedVectors:
        """Embed every curated upsert whose passage changed (no lock needed; may be slow)."""
        prepared = PreparedVectors(removed=set(delta.removed))
        todo = [
            r for r in delta.upserts if r.kind == "curated" and self.passages.get(_key(r)) != record_passage_hash(r)
        ]
        prepared.removed |= {_key(r) for r in delta.upserts if r.kind != "curated"}
        if todo:
            prepared.keys = [_key(r) for r in todo]
            prepared.hashes = [record_passage_hash(r) for r in todo]
            prepared.vectors = embed_passages(provider, todo)
        return prepared

    def commit(self, prepared: PreparedVectors) -> None:
        """Apply embedded upserts and deletions in memory (call `save` to persist). Lock held."""
        gone = [key for key in prepared.removed if key in self.vectors]
        if gone:
            self.vectors.delete(gone)
        for key in prepared.removed:
            self.passages.pop(key, None)
        if prepared.keys:
            self.vectors.add(prepared.keys, prepared.vectors)
            self.passages.update(zip(prepared.keys, prepared.hashes, strict=True))
        self.version += 1

    def save(self) -> None:
        """Persist vectors, then passage hashes: a crash between leaves hashes that under-claim.

        A save that fails (a full disk) leaves this object holding vectors the files do not: it
        is then marked unsaved, so the next `reload_if_changed` reads what the disk holds, and a
        catch-up compares the notes with that, not with memory (issue 24: vectors were never
        rebuilt after a full disk, since every later check trusted the unsaved copy)."""
        try:
            self.vectors.save()
            atomic_write(self.folder / SEMANTIC_META, self._passages_bytes(), mode=0o600)
        except BaseException:
            self._unsaved = True
            raise
        self._saved()

    def stage_save(self) -> "StagedSemantic":
        """`save`'s files written beside the current ones, without the vault lock: commits may run
        meanwhile (`put_staged` then saves again). A save of a day's vectors writes tens of
        megabytes (50-300 ms), which every writer waited for under the lock."""
        version = self.version  # before the snapshot: a commit overlapping it changes the version
        vectors = self.vectors.stage_save()
        try:
            passages = write_temp(self.folder, SEMANTIC_META, self._passages_bytes(), mode=0o600)
        except BaseException:
            vectors.discard()
            raise
        return StagedSemantic(version, vectors, passages)

    def put_staged(self, staged: "StagedSemantic") -> None:
        """Put a staged save in place (vault lock held), or save whole when a commit, a failed
        save or another save came after it was staged: the files then hold what memory holds."""
        if staged.version != self.version or self._unsaved or not self.vectors.put_staged(staged.vectors):
            staged.discard()
            self.save()
            return
        try:
            os.replace(staged.passages, self.folder / SEMANTIC_META)
            fsync_dir(self.folder)
        except BaseException:
            remove_quietly(staged.passages)
            self._unsaved = True
            raise
        self._saved()

    def _passages_bytes(self) -> bytes:
        passages = dict(self.passages)  # a C copy: a commit may run beside a staged save
        body = {"format": SEMANTIC_FORMAT, "passages": dict(sorted(passages.items()))}
        return (json.dumps(body, indent=0) + "\n").encode("utf-8")

    def _saved(self) -> None:
        self._unsaved = False
        self._stamp = _stamp(self.folder)

    def reload_if_changed(self) -> "SemanticIndex":
        """This index, or a fresh copy when another process saved since it was loaded (or this
        one failed to save what it holds)."""
        if not self._unsaved and _stamp(self.folder) == self._stamp:
            return self
        return SemanticIndex.open(self.folder.parent, self.identity, self.folder.name)

    # --- reading -----------------------------------------------------------------------------

    def search(self, query_vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        return self.vectors.search(query_vector, k)

    def lagging_paths(self, rows: Iterable[Row], within: set[str] | None = None) -> tuple[set[str], set[str]]:
        """(notes with a missing or stale vector, keys with a vector but no curated row). With
        `within` (note paths), `rows` are those notes' rows and only their keys can be extra."""
        stale: set[str] = set()
        curated: set[str] = set()
        for row in rows:
            if row.kind != "curated":
                continue
            curated.add(row.key)
            if self.passages.get(row.key) != row_passage_hash(row):
                stale.add(row.path)
        extra = set(self.passages) - curated
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


def _read_passages(folder: Path) -> dict[str, str]:
    path = folder / SEMANTIC_META
    try:
        body = json.loads(path.read_bytes())
        if body.get("format") != SEMANTIC_FORMAT or not isinstance(body.get("passages"), dict):
            raise ValueError("unknown format")
        return {str(k): str(v) for k, v in body["passages"].items()}
    except FileNotFoundError:
        return {}  # vectors saved, hashes not yet: every vector counts as stale and is redone
    except (OSError, ValueError) as exc:
        raise IndexUnavailable(f"{path} is unreadable ({exc}): run `memvault rebuild`") from exc


def _stamp(folder: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(folder / SEMANTIC_META)
    except OSError:
        return None
    return (info.st_ino, info.st_mtime_ns)


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
    for row in rows:
        held = semantic.passages.get(row.key)
        if held is None or row.key not in semantic.vectors:
            found.append(("missing_vector", row.key, f"{row.key} has no{model} vector"))
        elif held != row_passage_hash(row):
            found.append(
                ("stale_vector", row.key, f"{row.key}'s{model} vector was embedded from older text or context")
            )
    for key in sorted(set(semantic.vectors.ids()) - {row.key for row in rows}):
        found.append(("extra_vector", key, f"{key} has a vector in {name}/ but no curated row"))
    return found
