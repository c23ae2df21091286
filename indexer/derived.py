"""One generation's derived state (BM25 + manifest) and how canonical files flow into it.

The unit of indexing is a whole note file: its rows are deleted by path and re-added from the
file's current bytes. That makes every update idempotent, so a crash between writing a note and
committing the index is repaired by indexing the file again (the manifest's stale entry says so).
"""

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from indexer.bm25 import SCHEMA_VERSION, Bm25Index
from indexer.generations import MANIFEST, FileState, Manifest, current_generation, new_generation
from vault.errors import IndexUnavailable, UnsafePath
from vault.fsio import read_bytes_nofollow
from vault.layout import VaultLayout, parse_note_relpath
from vault.note import parse
from vault.records import MemoryRecord, records_from_note


@dataclass
class FileIndexing:
    """What indexing one file produced (records are empty for a removed or unreadable file)."""

    path: str
    state: FileState | None
    records: list[MemoryRecord] = field(default_factory=list)


def read_note_records(layout: VaultLayout, relpath: str, vault_zone: str) -> FileIndexing:
    """Parse one canonical note into records; unreadable files yield a state with a problem."""
    folder, day = parse_note_relpath(relpath)
    path = layout.root / relpath
    try:
        data = read_bytes_nofollow(path)
        info = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return FileIndexing(relpath, None)
    except UnsafePath:
        return FileIndexing(relpath, FileState("", 0, 0, problem="symlink (not followed)"))
    digest = hashlib.sha256(data).hexdigest()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"invalid UTF-8 at byte {exc.start}"
        return FileIndexing(relpath, FileState(digest, info.st_size, info.st_mtime_ns, problem=problem))
    note = parse(text)
    records = records_from_note(relpath, folder, day, note, vault_zone)
    problem = "merge-conflict markers" if note.has_conflicts else None
    return FileIndexing(relpath, FileState(digest, info.st_size, info.st_mtime_ns, problem=problem), records)


class DerivedIndex:
    """The serving (or being-built) generation: open it, apply file changes, find stale files."""

    def __init__(self, generation: Path, manifest: Manifest, bm25: Bm25Index):
        self.generation = generation
        self.manifest = manifest
        self.bm25 = bm25

    @classmethod
    def open_current(cls, layout: VaultLayout) -> "DerivedIndex | None":
        generation = current_generation(layout.index_dir)
        if generation is None:
            return None
        manifest = Manifest.load(generation / MANIFEST)
        if manifest.schema != SCHEMA_VERSION:
            raise IndexUnavailable(
                f"index schema {manifest.schema} is not this memvault's {SCHEMA_VERSION}: run `memvault rebuild`"
            )
        return cls(generation, manifest, Bm25Index(generation / "bm25"))

    @classmethod
    def create(cls, layout: VaultLayout) -> "DerivedIndex":
        generation = new_generation(layout.index_dir)
        created = cls(generation, Manifest(schema=SCHEMA_VERSION), Bm25Index(generation / "bm25", create=True))
        created.manifest.save(generation / MANIFEST)
        return created

    def apply(self, indexed: list[FileIndexing]) -> int:
        """Replace the rows of every given file with its new records; commit, then save the manifest."""
        if not indexed:
            return 0
        added = 0
        with self.bm25.writer() as writer:
            for item in indexed:
                writer.delete_path(item.path)
                added += writer.add(item.records)
            writer.commit()
        for item in indexed:
            if item.state is None:
                self.manifest.files.pop(item.path, None)
            else:
                self.manifest.files[item.path] = item.state
        self.manifest.save(self.generation / MANIFEST)
        return added

    def stale_paths(self, layout: VaultLayout) -> list[str]:
        """Files whose bytes differ from what the index saw, plus files that disappeared.

        A size/mtime match is trusted (the stat fast path); `health --strict` hashes everything.
        """
        on_disk = set(layout.note_relpaths())
        stale = sorted(set(self.manifest.files) - on_disk)
        for relpath in sorted(on_disk):
            known = self.manifest.files.get(relpath)
            if known is None or not _stat_matches(layout.root / relpath, known):
                stale.append(relpath)
        return stale


def _stat_matches(path: Path, known: FileState) -> bool:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return info.st_size == known.size and info.st_mtime_ns == known.mtime_ns
