"""`LocalBackend`: the local engine's own components (`DerivedIndex`'s generations and
manifest, `Bm25Index`, `SemanticIndex`) behind a server engine's row calls
(`indexer/backend/base.IndexBackend`), so the conformance suite checks both engines' rows and
rankings with the same tests. The store never uses it: it drives the local engine through
`maintenance/local_generations.py`.

Order inside `apply` is the local engine's own: vectors first (idempotent), the BM25 commit
(the commit point), then the manifest, which can only lag the rows after a crash.
"""

import re
import shutil
from collections.abc import Iterable, Sequence

import numpy as np

from memvault.indexer.backend.base import BackendCounts, BackendDelta, StoredRow
from memvault.indexer.maintenance.derived import DerivedIndex
from memvault.indexer.maintenance.generations import FileState, activate, current_generation, generation_names
from memvault.indexer.search.bm25 import Bm25Hit
from memvault.vault.errors import IndexUnavailable
from memvault.vault.layout import VaultLayout

_NUMBER_RE = re.compile(r"gen-(\d+)")


class LocalBackend:
    engine = "local"

    def __init__(self, layout: VaultLayout):
        self.layout = layout
        self._open: dict[int, DerivedIndex] = {}

    def _folder(self, generation: int):
        return self.layout.index_dir / f"gen-{generation:06d}"

    def _index(self, generation: int) -> DerivedIndex:
        index = self._open.get(generation)
        if index is None:
            index = self._open[generation] = DerivedIndex.open_generation(self._folder(generation))
        else:
            index.bm25.refresh()
        return index

    def _identity(self, generation: int):
        embedding = self.generation_embedding(generation)
        if embedding is None:
            return None
        from memvault.indexer.search.embeddings import EmbeddingIdentity

        return EmbeddingIdentity(embedding["provider"], embedding["model"], int(embedding["dim"]))

    # --- generations ---------------------------------------------------------------------------

    def serving_generation(self) -> int | None:
        folder = current_generation(self.layout.index_dir)
        return None if folder is None else int(_NUMBER_RE.fullmatch(folder.name).group(1))

    def create_generation(self, embedding: dict | None) -> int:
        created = DerivedIndex.create(self.layout, embedding=embedding)
        number = int(_NUMBER_RE.fullmatch(created.generation.name).group(1))
        self._open[number] = created
        if embedding is not None:
            from memvault.indexer.maintenance.semantic import SemanticIndex

            SemanticIndex.create(created.generation, self._identity(number))
        return number

    def activate_generation(self, generation: int) -> None:
        activate(self.layout.index_dir, self._folder(generation))

    def drop_generation(self, generation: int) -> None:
        if generation == self.serving_generation():
            raise IndexUnavailable(f"generation {generation} is serving: not dropped")
        self._open.pop(generation, None)
        shutil.rmtree(self._folder(generation), ignore_errors=True)

    def generations(self) -> list[int]:
        return [int(_NUMBER_RE.fullmatch(name).group(1)) for name in generation_names(self.layout.index_dir)]

    def generation_embedding(self, generation: int) -> dict | None:
        return self._index(generation).manifest.embedding

    # --- writes --------------------------------------------------------------------------------

    def apply(self, generation: int, delta: BackendDelta) -> None:
        index = self._index(generation)
        keys = set(delta.deleted) | {write.key for write in delta.writes}
        identity = self._identity(generation)
        if identity is not None:
            self._apply_vectors(index, identity, keys, delta)
        with index.bm25.writer() as writer:
            for key in keys:
                writer.delete_key(key)
            writer.add([write.record for write in delta.writes])
            writer.commit()
        for path, state in (delta.files or {}).items():
            if state is None:
                index.manifest.files.pop(path, None)
            else:
                index.manifest.files[path] = FileState.from_json(state)
        index.manifest.save(index.generation / "manifest.json")

    @staticmethod
    def _apply_vectors(index: DerivedIndex, identity, keys: set[str], delta: BackendDelta) -> None:
        from memvault.indexer.maintenance.semantic import SemanticIndex

        semantic = SemanticIndex.open(index.generation, identity)
        gone = [key for key in keys if key in semantic.vectors]
        if gone:
            semantic.vectors.delete(gone)
        with_vectors = [write for write in delta.writes if write.vector is not None]
        if with_vectors:
            semantic.vectors.add([w.key for w in with_vectors], np.asarray([w.vector for w in with_vectors],
                                                                          dtype=np.float32))  # fmt: skip
        semantic.save()

    # --- reads ---------------------------------------------------------------------------------

    def rows_of(self, generation: int, path: str) -> list[StoredRow]:
        return [_stored(hit) for hit in self._index(generation).bm25.hits_for_path(path)]

    def rows_by_keys(self, generation: int, keys: Iterable[str]) -> dict[str, StoredRow]:
        return {key: _stored(hit) for key, hit in self._index(generation).bm25.get_by_keys(list(keys)).items()}

    def rows_by_content_hash(self, generation: int, hashes: Iterable[str], kind: str = "curated") -> list[StoredRow]:
        bm25 = self._index(generation).bm25
        sources = bm25.sources_by_content_hash(list(hashes), kind)
        keys = [source.replace("#^", "#", 1) for found in sources.values() for source in found]
        return sorted((_stored(hit) for hit in bm25.get_by_keys(keys).values()), key=lambda row: row.key)

    def content_hash_keys(self, generation: int) -> dict[str, str]:
        found: dict[str, str] = {}
        for hit in self._index(generation).bm25.all_hits():
            if hit.kind == "curated" and (hit.content_hash not in found or hit.key < found[hit.content_hash]):
                found[hit.content_hash] = hit.key
        return found

    def journal_rows(self, generation: int, paths: Iterable[str]) -> list[StoredRow]:
        rows = [row for path in paths for row in self.rows_of(generation, path)]
        return sorted(rows, key=lambda row: (row.path, row.key))

    def all_rows(self, generation: int) -> list[StoredRow]:
        return sorted((_stored(hit) for hit in self._index(generation).bm25.all_hits()), key=lambda row: row.key)

    def file_states(self, generation: int) -> dict:
        return {path: state.to_json() for path, state in self._index(generation).manifest.files.items()}

    def lexical_candidates(
        self, generation: int, query: str, depth: int, kinds: Sequence[str] = ("curated",)
    ) -> list[tuple[str, float]]:
        return self._index(generation).bm25.search_keys(query, depth, kinds)

    def term_frequencies(self, generation: int, terms: Iterable[str]) -> tuple[int, dict[str, int]]:
        return self._index(generation).bm25.doc_freqs("text", terms)

    def vector_candidates(self, generation: int, vector: Sequence[float], depth: int) -> list[tuple[str, float]]:
        identity = self._identity(generation)
        if identity is None:
            return []
        from memvault.indexer.maintenance.semantic import SemanticIndex

        semantic = SemanticIndex.open(self._folder(generation), identity)
        hits = semantic.search(np.asarray(vector, dtype=np.float32), depth)
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))

    def counts(self, generation: int) -> BackendCounts:
        bm25 = self._index(generation).bm25
        by_kind = {kind: n for kind in ("curated", "audit") if (n := bm25.count_kind(kind))}
        without = 0
        identity = self._identity(generation)
        if identity is not None:
            from memvault.indexer.maintenance.semantic import SemanticIndex

            semantic = SemanticIndex.open(self._folder(generation), identity)
            without = sum(1 for hit in bm25.all_hits() if hit.kind == "curated" and hit.key not in semantic.vectors)
        return BackendCounts(bm25.count(), by_kind, bm25.term_counts("path"), without)

    def stamp(self) -> object:
        try:
            return current_generation(self.layout.index_dir), (self.layout.index_dir / "CURRENT").stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def close(self) -> None:
        self._open.clear()


def _stored(hit: Bm25Hit) -> StoredRow:
    return StoredRow(hit.key, hit.id, hit.path, hit.kind, hit.day, hit.at, hit.text, hit.content_hash,
                     hit.context_hash, hit.context)  # fmt: skip
