"""`RuntimeMemory`: the deterministic control layer over runtime/ (no model, no network).

Every write follows the normal path of the spec:

    normalise -> in-process queue + file lock -> reload memories.json (adopt hand edits,
    restore stale projections) -> validate unique match / duplicate / capacity -> temp files
    -> rename projections -> rename memories.json -> compact receipt

A write that would grow a target past its limit raises `CapacityExceeded` carrying the
snapshot it saw; capacity maintenance (indexer/runtime/maintenance.py) works from that snapshot
and comes back through `compact_and_mutate`, a compare-and-swap on the state revision.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from memvault.vault.clock import utc_now
from memvault.vault.errors import Conflict, InvalidRecord
from memvault.vault.fsio import atomic_write, read_bytes_nofollow
from memvault.vault.limits import RUNTIME_MEMORY_LIMIT_BYTES, RUNTIME_USER_LIMIT_BYTES
from memvault.vault.locks import VaultLock
from memvault.vault.paths import resolve_inside
from memvault.vault.runtime.commit import Boundary, commit, ensure_folder
from memvault.vault.runtime.entries import (
    MEMORY,
    TARGETS,
    USER,
    CapacityExceeded,
    Keyed,
    RuntimeEntry,
    iso_utc,
    packed_bytes,
    replace_target,
)
from memvault.vault.runtime.mutations import ADD, Mutation, apply, find_match, make_add, make_remove, make_replace
from memvault.vault.runtime.projection import (
    CURRENT,
    EDITED,
    FILES,
    MISSING,
    STALE,
    classify,
    parse_edited,
    refusal,
    render_projection,
    sha256_hex,
)
from memvault.vault.runtime.state import STATE_FILE, ProjectionStamp, RuntimeState, decode_state, encode_state

ARCHIVE_DIR = "runtime/archived"


class _Oversize(bytes):
    """Stands in for a projection too large to be anything memvault wrote (never read whole)."""


_OVERSIZE = _Oversize()


@dataclass(frozen=True)
class Overflow:
    """What the normal path saw when a write did not fit: the input to capacity maintenance."""

    state: RuntimeState
    mutation: Mutation
    match: int | None  # index (within the target's entries) of the entry being replaced
    limit: int
    needed: int


@dataclass(frozen=True)
class RuntimeReceipt:
    status: str  # added | replaced | removed | duplicate | unchanged | adopted
    target: str
    revision: int
    used_bytes: int
    limit_bytes: int
    entries: int
    maintenance: str | None = None  # compacted | archived-to-spaces | archived-locally
    archived: int = 0
    adopted: tuple[str, ...] = ()  # targets whose hand edits this write adopted first

    def to_json(self) -> dict:
        return {
            "status": self.status, "target": self.target, "revision": self.revision,
            "usedBytes": self.used_bytes, "limitBytes": self.limit_bytes, "entries": self.entries,
            "maintenance": self.maintenance, "archived": self.archived, "adopted": list(self.adopted),
        }  # fmt: skip


@dataclass(frozen=True)
class RuntimeView:
    """A read-only look: the committed state and how each projection file relates to it."""

    state: RuntimeState
    files: dict[str, str]  # target -> current | missing | stale | edited
    limits: dict[str, int]

    @property
    def revision(self) -> int:
        return self.state.revision

    def used(self, target: str) -> int:
        return packed_bytes(entry.content for entry in self.state.of(target))


class _FifoQueue:
    """In-process queue: writers of one runtime folder take turns in arrival order."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._next_ticket = 0
        self._serving = 0

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._cond:
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.wait_for(lambda: self._serving == ticket)
        try:
            yield
        finally:
            with self._cond:
                self._serving += 1
                self._cond.notify_all()


_queues: dict[Path, _FifoQueue] = {}
_queues_guard = threading.Lock()


def _queue_for(root: Path) -> _FifoQueue:
    with _queues_guard:
        return _queues.setdefault(root, _FifoQueue())


class RuntimeMemory:
    def __init__(
        self,
        root: Path,
        *,
        user_limit: int = RUNTIME_USER_LIMIT_BYTES,
        memory_limit: int = RUNTIME_MEMORY_LIMIT_BYTES,
        clock: Callable[[], datetime] = utc_now,
        boundary: Boundary | None = None,
        lock_timeout: float = 30.0,
    ) -> None:
        self.root = Path(root).resolve()
        self.limits = {USER: user_limit, MEMORY: memory_limit}
        self._clock = clock
        self._boundary = boundary
        self._lock_timeout = lock_timeout

    @classmethod
    def for_vault(cls, root: Path, config, **kwargs) -> RuntimeMemory:
        """Limits from `config.memory.runtime_user_limit` / `runtime_memory_limit`."""
        memory = config.memory
        return cls(root, user_limit=memory.runtime_user_limit, memory_limit=memory.runtime_memory_limit, **kwargs)

    # --- reads ---------------------------------------------------------------------------------

    def load(self) -> RuntimeView:
        """The committed state without taking the lock or writing anything."""
        state = self._read_state()
        return RuntimeView(state, self._statuses(state), dict(self.limits))

    # --- writes --------------------------------------------------------------------------------

    def reconcile(self) -> RuntimeView:
        """Adopt hand edits and restore missing/stale projections now (a write does this anyway)."""
        with self._exclusive():
            state, _adopted = self._prepare()
            return RuntimeView(state, self._statuses(state), dict(self.limits))

    def add(self, target: str, content: str, importance: int = 3) -> RuntimeReceipt:
        return self.mutate(make_add(target, content, importance))

    def replace(self, target: str, old_text: str, content: str, importance: int | None = None) -> RuntimeReceipt:
        return self.mutate(make_replace(target, old_text, content, importance))

    def remove(self, target: str, old_text: str) -> RuntimeReceipt:
        return self.mutate(make_remove(target, old_text))

    def mutate(self, mutation: Mutation) -> RuntimeReceipt:
        with self._exclusive():
            state, adopted = self._prepare()
            entries = state.of(mutation.target)
            match = None if mutation.kind == ADD else find_match(entries, mutation)
            new_list, status = apply(entries, mutation, match, self._now())
            if status in ("duplicate", "unchanged"):
                return self._receipt(state, mutation.target, status, adopted=adopted)
            self._check_capacity(state, mutation, match, entries, new_list)
            state = self._commit(state, replace_target(state.entries, mutation.target, new_list))
            return self._receipt(state, mutation.target, status, adopted=adopted)

    def compact_and_mutate(
        self,
        revision: int,
        mutation: Mutation,
        match: int | None,
        hot: Sequence[Keyed],
        *,
        maintenance: str,
        archived: int = 0,
        local_archive: Sequence[RuntimeEntry] = (),
    ) -> RuntimeReceipt:
        """CAS: if the state is still at `revision`, replace the target's entries by `hot` (plus
        the entry being replaced, kept exactly), apply `mutation`, and commit both as one write.

        `hot` items are keyed by their position in the snapshot, so the repacked order follows
        the original one. `local_archive` entries are written to runtime/archived/ first, under
        the same lock, so an entry leaves the hot state only once it is on disk elsewhere.
        """
        with self._exclusive():
            state, _adopted = self._prepare()
            if state.revision != revision:
                raise Conflict(
                    f"runtime memory moved from revision {revision} to {state.revision} while it was being"
                    " maintained; the original entries are kept unchanged. Fix: retry the write"
                )
            entries = state.of(mutation.target)
            items = list(hot) + ([Keyed(match, entries[match])] if match is not None else [])
            items.sort(key=lambda item: (item.key, item.entry.content.encode("utf-8")))
            position = None if match is None else [item.key for item in items].index(match)
            new_list, status = apply([item.entry for item in items], mutation, position, self._now())
            limit = self.limits[mutation.target]
            if packed_bytes(entry.content for entry in new_list) > limit:
                raise CapacityExceeded(f"{FILES[mutation.target]} would still exceed {limit} bytes after maintenance")
            if local_archive:
                self._write_local_archive(mutation.target, state.revision + 1, local_archive)
            state = self._commit(state, replace_target(state.entries, mutation.target, new_list))
            return self._receipt(state, mutation.target, status, maintenance=maintenance, archived=archived)

    # --- the locked section --------------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with _queue_for(self.root).turn(), VaultLock(self.root, "runtime", timeout=self._lock_timeout):
            yield

    def _prepare(self) -> tuple[RuntimeState, tuple[str, ...]]:
        """Reload; restore stale/missing projections; adopt (commit) hand edits. Lock held."""
        state = self._read_state()
        raws = {target: self._read_projection(target) for target in TARGETS}
        statuses = {target: self._status(state, target, raws[target]) for target in TARGETS}
        for target in TARGETS:
            if statuses[target] in (STALE, MISSING):
                self._restore(state, target)
        edited = tuple(target for target in TARGETS if statuses[target] == EDITED)
        if not edited:
            return state, ()
        entries = state.entries
        for target in edited:
            entries = replace_target(entries, target, self._adopt(state, target, raws[target]))
        return self._commit(state, entries, force=edited), edited

    def _adopt(self, state: RuntimeState, target: str, raw: bytes | None) -> list[RuntimeEntry]:
        if raw is _OVERSIZE:
            raise refusal(target, f"the file is far larger than the {self.limits[target]}-byte {target} limit")
        contents = parse_edited(raw or b"", target, self.limits[target])
        previous = {}
        for entry in state.of(target):
            previous.setdefault(entry.content, []).append(entry)
        now = self._now()
        adopted = []
        for content in contents:
            known = previous.get(content)
            adopted.append(known.pop(0) if known else RuntimeEntry(target, content, 3, now, now))
        return adopted

    def _restore(self, state: RuntimeState, target: str) -> None:
        """Rewrite a missing or stale projection with exactly the bytes memories.json records."""
        path = resolve_inside(self.root, FILES[target])
        stamp = state.projections.get(target)
        if stamp is None:
            path.unlink(missing_ok=True)  # an uncommitted first write: nothing was ever committed
            return
        data = render_projection(target, state.of(target), stamp.revision)
        if sha256_hex(data) != stamp.sha256:
            raise InvalidRecord(
                f"{STATE_FILE} records a {FILES[target]} digest that its entries do not render to."
                f' Fix: restore {STATE_FILE} from git, or delete its "projections" entry for {target}'
            )
        ensure_folder(self.root, "runtime")
        atomic_write(path, data, mode=0o644)

    def _commit(
        self, old: RuntimeState, entries: tuple[RuntimeEntry, ...], force: tuple[str, ...] = ()
    ) -> RuntimeState:
        revision = old.revision + 1
        stamps = dict(old.projections)
        projections = []
        for target in TARGETS:
            new_of = [entry for entry in entries if entry.target == target]
            if new_of == old.of(target) and target not in force and target in stamps:
                continue
            data = render_projection(target, new_of, revision)
            stamps[target] = ProjectionStamp(revision, sha256_hex(data))
            projections.append((target, FILES[target], data))
        state = RuntimeState(revision, tuple(entries), stamps)
        ensure_folder(self.root, "runtime")
        commit(self.root, projections, STATE_FILE, encode_state(state), self._boundary)
        return state

    def _write_local_archive(self, target: str, revision: int, entries: Sequence[RuntimeEntry]) -> None:
        folder = ensure_folder(self.root, ARCHIVE_DIR)
        lines = [f"# Archived from {target}.md at revision {revision}\n\n"]
        lines += [f"- {entry.content}\n" for entry in entries]
        atomic_write(folder / f"{target}-r{revision:06d}.md", "".join(lines).encode("utf-8"), mode=0o644)

    # --- helpers -------------------------------------------------------------------------------

    def _check_capacity(self, state, mutation, match, before, after) -> None:
        limit = self.limits[mutation.target]
        needed = packed_bytes(entry.content for entry in after)
        if needed > limit and needed > packed_bytes(entry.content for entry in before):
            raise CapacityExceeded(
                f"{FILES[mutation.target]} would take {needed} bytes, over its {limit}-byte limit",
                overflow=Overflow(state, mutation, match, limit, needed),
            )

    def _read_state(self) -> RuntimeState:
        try:
            raw = read_bytes_nofollow(resolve_inside(self.root, STATE_FILE))
        except FileNotFoundError:
            return RuntimeState()
        return decode_state(raw)

    def _read_projection(self, target: str) -> bytes | None:
        path = resolve_inside(self.root, FILES[target])
        try:
            size = os.lstat(path).st_size
        except FileNotFoundError:
            return None
        if size > 4 * self.limits[target] + 65536:
            return _OVERSIZE
        try:
            return read_bytes_nofollow(path)
        except FileNotFoundError:
            return None

    def _status(self, state: RuntimeState, target: str, raw: bytes | None) -> str:
        if raw is _OVERSIZE:
            return EDITED
        stamp = state.projections.get(target)
        if raw is None and stamp is None:
            return CURRENT  # nothing was ever committed for this target: no file is the right file
        return classify(raw, target, stamp.sha256 if stamp else None, state.revision)

    def _statuses(self, state: RuntimeState) -> dict[str, str]:
        return {target: self._status(state, target, self._read_projection(target)) for target in TARGETS}

    def now(self) -> str:
        """The timestamp the next write would record (from the injected clock)."""
        return iso_utc(self._clock())

    def _now(self) -> str:
        return self.now()

    def _receipt(self, state: RuntimeState, target: str, status: str, **extra) -> RuntimeReceipt:
        of = state.of(target)
        used = packed_bytes(entry.content for entry in of)
        return RuntimeReceipt(status, target, state.revision, used, self.limits[target], len(of), **extra)
