"""Index generations under `.index/`: a full rebuild never touches the index readers use.

    .index/CURRENT        one line: the name of the serving generation (atomically replaced)
    .index/gen-000007/    bm25/ (Tantivy), vectors/ (hnswlib), manifest.json

A rebuild fills a new generation beside the serving one and swaps CURRENT; a killed rebuild
leaves an orphan folder that the next rebuild removes, and the old generation keeps serving.
The generation before the current one is kept one cycle longer for readers that still have it
open; older ones are removed.
"""

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from vault.errors import IndexUnavailable
from vault.fsio import atomic_write, fsync_dir

POINTER = "CURRENT"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
_GENERATION_RE = re.compile(r"gen-(\d{6,})")


@dataclass(frozen=True)
class FileState:
    """What the index last saw of a canonical file: the stat fast path and the content hash."""

    sha256: str
    size: int
    mtime_ns: int
    #: why the file's memories are not indexed (e.g. "invalid UTF-8"), or None
    problem: str | None = None

    def to_json(self) -> dict:
        body = {"sha256": self.sha256, "size": self.size, "mtime_ns": self.mtime_ns}
        if self.problem:
            body["problem"] = self.problem
        return body


@dataclass
class Manifest:
    """The derived index's account of itself; written after every commit to the generation."""

    schema: int
    files: dict[str, FileState] = field(default_factory=dict)
    embedding: dict | None = None

    def to_bytes(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT,
            "schema": self.schema,
            "embedding": self.embedding,
            "files": {path: state.to_json() for path, state in sorted(self.files.items())},
        }
        return (json.dumps(body, indent=1, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        try:
            body = json.loads(path.read_bytes())
            files = {p: FileState(**state) for p, state in body["files"].items()}
            if body.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {body.get('format')!r}")
            return cls(schema=int(body["schema"]), files=files, embedding=body.get("embedding"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise IndexUnavailable(f"index manifest {path} is unreadable ({exc}): run `memvault rebuild`") from exc

    def save(self, path: Path) -> None:
        atomic_write(path, self.to_bytes(), mode=0o600)


def generation_names(index_dir: Path) -> list[str]:
    if not index_dir.is_dir():
        return []
    return sorted(p.name for p in index_dir.iterdir() if _GENERATION_RE.fullmatch(p.name) and p.is_dir())


def current_generation(index_dir: Path) -> Path | None:
    """The serving generation, or None when there is none yet (a rebuild creates one)."""
    pointer = index_dir / POINTER
    try:
        name = pointer.read_text("utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexUnavailable(f"{pointer} is unreadable ({exc}): run `memvault rebuild`") from exc
    if not _GENERATION_RE.fullmatch(name) or not (index_dir / name).is_dir():
        raise IndexUnavailable(f"{pointer} names a missing generation {name!r}: run `memvault rebuild`")
    return index_dir / name


def new_generation(index_dir: Path) -> Path:
    """A fresh, empty generation folder numbered after every existing one."""
    index_dir.mkdir(parents=True, exist_ok=True)
    numbers = [int(_GENERATION_RE.fullmatch(name).group(1)) for name in generation_names(index_dir)]
    folder = index_dir / f"gen-{max(numbers, default=0) + 1:06d}"
    folder.mkdir()
    fsync_dir(index_dir)
    return folder


def activate(index_dir: Path, generation: Path) -> None:
    """Point CURRENT at `generation` atomically, then drop generations older than the previous one."""
    previous = _pointer_name(index_dir)
    atomic_write(index_dir / POINTER, (generation.name + "\n").encode("ascii"), mode=0o644)
    keep = {generation.name, previous}
    for name in generation_names(index_dir):
        if name not in keep:
            shutil.rmtree(index_dir / name, ignore_errors=True)


def _pointer_name(index_dir: Path) -> str | None:
    try:
        return (index_dir / POINTER).read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
