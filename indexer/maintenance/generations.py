"""Index generations under `.index/`: a full rebuild never touches the index readers use.

    .index/CURRENT        one line: the name of the serving generation (atomically replaced)
    .index/gen-000007/    bm25/ (Tantivy), vectors/ (hnswlib), manifest.json

A rebuild fills a new generation beside the serving one and swaps CURRENT; a killed rebuild
leaves an orphan folder that the next rebuild removes, and the old generation keeps serving.
The generation before the current one is kept one cycle longer for readers that still have it
open; older ones are removed.

The manifest is the index's account of which file bytes it has seen (the stat fast path and
each file's SHA-256). It is written after the BM25 commit, so after a crash it can only be
*behind* the index, never ahead: files it has not caught up with look stale, are read again,
and are diffed against the rows the index really holds (see `indexer/maintenance/sync.py`).
"""

import json
import re
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.vault.errors import IndexUnavailable
from memvault.vault.fsio import (
    MACHINE_DIR_MODE,
    MACHINE_FILE_MODE,
    append_durable,
    atomic_write,
    fsync_dir,
    make_dir,
    read_small,
)

#: checks run by `rebuild` before it touches anything; each raises a VaultError to refuse.
#: Called as guard(layout, config). The intake registers the spec's refusal here (a retained
#: BuJo semantic plan cannot be rebuilt into Lite or Journal).
REBUILD_GUARDS: list[Callable[[Any, Any], None]] = []

POINTER = "CURRENT"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
_GENERATION_RE = re.compile(r"gen-(\d{6,})")
_NEW_GENERATION_ATTEMPTS = 16


#: a note's file-state problem while git's conflict markers are in it: its bullets are indexed
#: all the same, marked in conflict (engine/conflict_marks.py), and health is degraded
CONFLICT_PROBLEM = "merge-conflict markers"


@dataclass(frozen=True)
class FileState:
    """What the index last saw of a canonical file: the stat fast path and the content hash."""

    sha256: str
    size: int
    mtime_ns: int
    #: why the file's memories are not (all) indexed (e.g. "invalid UTF-8 at byte 7"), or None
    problem: str | None = None
    #: the mtime was within the filesystem's timestamp granularity of the read, so a same-size
    #: edit in the same tick would be invisible to the stat check: hash it next time instead
    racy: bool = False
    #: how many index rows the file produced (health compares this with the index)
    rows: int = 0
    #: hand-edit findings that do not stop indexing (a pasted duplicate id, a bad zone)
    issues: tuple[str, ...] = ()
    #: the inode change time and inode number: `cp -p`, `rsync -t` and `touch -d` restore an
    #: mtime, but no one can set ctime, and a rename-save brings a new inode (0: not recorded)
    ctime_ns: int = 0
    inode: int = 0

    def to_json(self) -> dict:
        body: dict = {"sha256": self.sha256, "size": self.size, "mtime_ns": self.mtime_ns, "rows": self.rows}
        if self.problem:
            body["problem"] = self.problem
        if self.racy:
            body["racy"] = True
        if self.issues:
            body["issues"] = list(self.issues)
        if self.ctime_ns or self.inode:
            body["ctime_ns"], body["inode"] = self.ctime_ns, self.inode
        return body

    @classmethod
    def from_json(cls, body: dict) -> "FileState":
        state = cls(
            sha256=body["sha256"],
            size=body["size"],
            mtime_ns=body["mtime_ns"],
            problem=body.get("problem"),
            racy=body.get("racy", False),
            rows=body.get("rows", 0),
            issues=tuple(body.get("issues", ())),
            ctime_ns=body.get("ctime_ns", 0),
            inode=body.get("inode", 0),
        )
        if not isinstance(state.sha256, str) or not all(
            type(v) is int for v in (state.size, state.mtime_ns, state.rows, state.ctime_ns, state.inode)
        ):
            raise ValueError(f"malformed file state {body!r}")
        if type(state.racy) is not bool or not all(isinstance(i, str) for i in state.issues):
            raise ValueError(f"malformed file state {body!r}")
        return state


@dataclass
class Manifest:
    """The derived index's account of itself: a base file, rewritten now and then, and a log of
    the file states each commit changed, appended (issue 43: at 10,000 notes every commit
    rewrote 2 MB of JSON, 60 ms). A torn or unreadable log line is skipped: a state lost only
    makes its note be read again."""

    schema: int
    files: dict[str, FileState] = field(default_factory=dict)
    #: the embedding identity ({"provider", "model", "dim"}) this generation was built for, or
    #: None for a tier without vectors. Only a rebuild changes it.
    embedding: dict | None = None
    #: the number of the log that follows the base (0: none yet)
    log: int = 0
    _log_bytes: int = field(default=0, compare=False, repr=False)
    _base_bytes: int = field(default=0, compare=False, repr=False)

    def to_bytes(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT,
            "schema": self.schema,
            "embedding": self.embedding,
            "log": self.log,
            "files": {path: state.to_json() for path, state in sorted(self.files.items())},
        }
        # compact output goes through json's C encoder: ~10x faster than indented on big vaults
        return (json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")

    @classmethod
    def load(cls, path: Path) -> "Manifest":
        try:
            raw = path.read_bytes()
            body = json.loads(raw)
            if body.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {body.get('format')!r}")
            files = {p: FileState.from_json(state) for p, state in body["files"].items()}
            embedding = body.get("embedding")
            if embedding is not None and not isinstance(embedding, dict):
                raise ValueError(f"embedding {embedding!r}")
            log = body.get("log", 0)
            if type(log) is not int or log < 0:
                raise ValueError(f"log {log!r}")
            manifest = cls(schema=int(body["schema"]), files=files, embedding=embedding, log=log)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise IndexUnavailable(f"index manifest {path} is unreadable ({exc}): run `memvault rebuild`") from exc
        manifest._base_bytes = len(raw)
        manifest._replay(path)
        return manifest

    def _replay(self, path: Path) -> None:
        if not self.log:
            return
        try:
            data = _log_path(path, self.log).read_bytes()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise IndexUnavailable(
                f"index manifest log of {path} is unreadable ({exc}): run `memvault rebuild`"
            ) from exc
        for line in data.split(b"\n")[:-1]:  # the part after the last newline is a torn append
            try:
                changes = {p: None if s is None else FileState.from_json(s) for p, s in json.loads(line).items()}
            except (ValueError, TypeError, AttributeError, KeyError):
                continue  # torn by a crash, then appended after: those notes are read again
            for relpath, state in changes.items():
                if state is None:
                    self.files.pop(relpath, None)
                else:
                    self.files[relpath] = state
        self._log_bytes = len(data)

    def save(self, path: Path, changed: Iterable[str] | None = None) -> None:
        """Persist: append the states of `changed` paths to the log, or (None, or a log grown past
        half the base) write the whole base and start a new log."""
        if changed is None or not self.log or self._log_bytes > max(_MIN_LOG_BYTES, self._base_bytes // 2):
            old = self.log
            self.log += 1
            data = self.to_bytes()
            atomic_write(path, data, mode=MACHINE_FILE_MODE)
            self._base_bytes, self._log_bytes = len(data), 0
            if old:
                _log_path(path, old).unlink(missing_ok=True)
            return
        entries = {p: None if (s := self.files.get(p)) is None else s.to_json() for p in sorted(set(changed))}
        if entries:
            line = (json.dumps(entries, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")
            append_durable(_log_path(path, self.log), line, mode=MACHINE_FILE_MODE)
            self._log_bytes += len(line)

    def log_path(self, path: Path) -> Path:
        return _log_path(path, self.log)


#: the log is folded into the base once it is this long and half the base
_MIN_LOG_BYTES = 64 * 1024


def _log_path(path: Path, number: int) -> Path:
    return path.with_name(f"{path.stem}-log-{number:06d}.jsonl")


def generation_names(index_dir: Path) -> list[str]:
    if not index_dir.is_dir():
        return []
    return sorted(p.name for p in index_dir.iterdir() if _GENERATION_RE.fullmatch(p.name) and p.is_dir())


def current_generation(index_dir: Path) -> Path | None:
    """The serving generation, or None when there is none yet (a rebuild creates one)."""
    pointer = index_dir / POINTER
    try:
        name = read_small(pointer).decode("utf-8").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise IndexUnavailable(f"{pointer} is unreadable ({exc}): run `memvault rebuild`") from exc
    if not _GENERATION_RE.fullmatch(name) or not (index_dir / name).is_dir():
        raise IndexUnavailable(f"{pointer} names a missing generation {name!r}: run `memvault rebuild`")
    return index_dir / name


def new_generation(index_dir: Path) -> Path:
    """A fresh, empty generation folder numbered after every existing one.

    Two processes may race for the same number (a rebuild and a first write building inline);
    the loser of `mkdir` takes the next number.
    """
    make_dir(index_dir, MACHINE_DIR_MODE, parents=True)
    for _ in range(_NEW_GENERATION_ATTEMPTS):
        numbers = [_number(name) for name in generation_names(index_dir)]
        folder = index_dir / f"gen-{max(numbers, default=0) + 1:06d}"
        if not make_dir(folder, MACHINE_DIR_MODE):
            continue
        fsync_dir(index_dir)
        return folder
    raise IndexUnavailable(f"could not create a new generation in {index_dir}: another process keeps racing; retry")


def activate(index_dir: Path, generation: Path, hook: Callable[[str], None] | None = None) -> None:
    """Point CURRENT at `generation` atomically, then drop generations older than the previous one.

    Never drops a generation numbered above the new one: that is a rebuild still building.
    """
    previous = _pointer_name(index_dir)
    atomic_write(index_dir / POINTER, (generation.name + "\n").encode("ascii"), mode=MACHINE_FILE_MODE)
    if hook is not None:
        hook("rebuild.swapped")
    keep = {generation.name, previous}
    for name in generation_names(index_dir):
        if name not in keep and _number(name) < _number(generation.name):
            shutil.rmtree(index_dir / name, ignore_errors=True)


def stray_generations(index_dir: Path) -> list[str]:
    """Generations neither serving nor kept for readers: leftovers of killed rebuilds.

    Kept: the current one and the highest-numbered one below it (the previous generation, which
    readers may still have open). Anything newer than the current one is a build in progress or a
    dead one; only a caller holding the rebuild lock and the vault lock may treat it as dead.
    """
    names = generation_names(index_dir)
    current = _pointer_name(index_dir)
    if current is None or current not in names:
        return names
    older = [name for name in names if _number(name) < _number(current)]
    keep = {current, max(older, default=None, key=_number)}
    return [name for name in names if name not in keep]


def remove_stray_generations(index_dir: Path) -> list[str]:
    """Delete `stray_generations`. Caller holds the rebuild lock and the vault lock."""
    removed = stray_generations(index_dir)
    for name in removed:
        shutil.rmtree(index_dir / name, ignore_errors=True)
    return removed


@contextmanager
def discard_generation_on_failure(index_dir: Path, vault_lock) -> Iterator[None]:
    """Around a rebuild's build and swap (caller holds the rebuild lock): when it fails (a full
    disk, a provider outage, an interrupt), the half-built generation is removed at once, so the
    failure leaves the index exactly as it was instead of a stray folder for the next rebuild."""
    try:
        yield
    except BaseException:
        try:
            with vault_lock:
                remove_stray_generations(index_dir)
        except Exception:  # noqa: BLE001 - cleanup must not hide why the rebuild failed
            pass
        raise


def _number(name: str) -> int:
    return int(_GENERATION_RE.fullmatch(name).group(1))


def _pointer_name(index_dir: Path) -> str | None:
    try:
        name = (index_dir / POINTER).read_text("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if _GENERATION_RE.fullmatch(name) else None


def embedding_identity(config) -> dict | None:
    """The identity a new generation is built for ({"provider","model","dim"}); sync and the
    watcher never change it."""
    embeddings = config.memory.embeddings
    if embeddings is None:
        return None
    return {"provider": embeddings.provider, "model": embeddings.model, "dim": embeddings.dim}
