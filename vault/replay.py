"""The replay sidecar `.replay-projection-v1.json`: the exact authority for replay-owned BuJo state.

Daily markdown and `graph.jsonl` cannot say which memory a capture superseded, which facts of a
turn form a thread, or which run wrote what. That lifecycle and those edges live here, and only
here, as metadata: memory ids, timestamps, thread weights, authority kinds and content-free
SHA-256 authority digests. No memory text and no model output is ever written to it.

    {"entries":[ENTRY,...],"v":1}\\n        one line of canonical JSON (sorted keys, no spaces)

    capture    {"at":TS,"authority":AUTH,"facts":[ID,...],"kind":"capture","run":INTAKE_ID}
    edge       {"authority":AUTH,"from":ID,"kind":"edge","to":ID,"type":"supersedes"|"thread","weight":N}
    lifecycle  {"at":TS,"authority":AUTH,"by":ID,"id":ID,"kind":"lifecycle","state":"superseded"|"updated"}
    AUTH       {"digest":SHA256_HEX,"kind":"capture"|"direct"}

Entries are sorted by kind, then identity (capture: run; edge: type, from, to; lifecycle: id),
and unique by identity. The authority digest of a capture run is
SHA-256("capture-v1" NUL intake id NUL payload SHA-256): anyone holding the intake record or
its ledger entry can recompute it, nobody can recover content from it.

The file is strict: owner-owned, exactly mode 0600, one hard link, a regular file, at most
32 MiB and 131,072 entries, and byte-for-byte the canonical rendering of what it holds. Any
other bytes are refused (`SidecarInvalid`), never repaired by guessing. The one mode memvault
narrows itself is git's checkout mode (0644 under the usual umask: a clone or a pull on another
machine): an owner-owned single-link regular file whose only extra bits are group/other read
becomes 0600 on its first read; a file anyone else could write stays refused.

Merging a capture's delta is idempotent: an identical entry is already there. A memory that an
earlier commit already marked superseded keeps its first lifecycle entry (the later run's
`supersedes` edge still records the second claim); a capture or edge entry that exists with
different content is a `Conflict`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memvault.vault.errors import Conflict, InvalidRecord, UnsafePath
from memvault.vault.fsio import check_private_file
from memvault.vault.intake.files import is_intake_id, read_private
from memvault.vault.intake.record import format_ts
from memvault.vault.limits import SIDECAR_MODE, SIDECAR_NOT_NARROWABLE_BITS
from memvault.vault.locks import replace_if_unchanged
from memvault.vault.paths import resolve_inside
from memvault.vault.strict_json import loads_strict

SIDECAR_NAME = ".replay-projection-v1.json"
SIDECAR_FORMAT = 1
MAX_SIDECAR_BYTES = 32 * 1024 * 1024
MAX_ENTRIES = 131_072
#: "capture": a durable intake run (attestable from its record, receipt or ledger entry);
#: "direct": the legacy best-effort `MemoryStore.capture()` surface (no intake record)
AUTHORITY_KINDS = ("capture", "direct")
LIFECYCLE_STATES = ("superseded", "updated")
EDGE_TYPES = ("supersedes", "thread")
MAX_WEIGHT = 64
_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_HEX_RE = re.compile(r"[0-9a-f]{64}")
_TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
_KEYS = {
    "capture": {"at", "authority", "facts", "kind", "run"},
    "edge": {"authority", "from", "kind", "to", "type", "weight"},
    "lifecycle": {"at", "authority", "by", "id", "kind", "state"},
}
MAX_FACTS_PER_CAPTURE = 64


class SidecarInvalid(InvalidRecord):
    """The replay sidecar (or its index projection) is not exactly what memvault writes."""


def capture_authority(intake_id: str, payload_sha256: str, kind: str = "capture") -> str:
    return hashlib.sha256(f"{kind}-v1\0{intake_id}\0{payload_sha256}".encode()).hexdigest()


def identity(entry: dict[str, Any]) -> tuple[str, ...]:
    kind = entry["kind"]
    if kind == "capture":
        return (kind, entry["run"])
    if kind == "edge":
        return (kind, entry["type"], entry["from"], entry["to"])
    return (kind, entry["id"])


@dataclass
class ReplayState:
    entries: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)

    def superseded(self) -> dict[str, dict[str, Any]]:
        """Lifecycle entries by the id of the memory they retire."""
        return {e["id"]: e for e in self.entries.values() if e["kind"] == "lifecycle"}

    def captures(self) -> list[dict[str, Any]]:
        return [e for e in self.entries.values() if e["kind"] == "capture"]

    def merge(self, delta: list[dict[str, Any]]) -> int:
        """Add a capture's entries; returns how many were new (0 for a replay)."""
        added = 0
        for entry in delta:
            key = identity(entry)
            existing = self.entries.get(key)
            if existing == entry:
                continue
            if existing is not None:
                if entry["kind"] == "lifecycle":
                    continue  # first commit wins; the later claim is kept as its supersedes edge
                raise Conflict(
                    f"the replay sidecar already holds {key[0]} {key[1:]} with other content; nothing was "
                    "changed. Fix: compare it with `memvault health --strict` before retrying."
                )
            self.entries[key] = entry
            added += 1
        if len(self.entries) > MAX_ENTRIES:
            raise InvalidRecord(
                f"the replay sidecar would hold {len(self.entries)} entries, over the {MAX_ENTRIES} limit; "
                "nothing was written. Capture pauses until an operator archives the vault."
            )
        return added


# --- canonical bytes ------------------------------------------------------------------------------


def render_state(state: ReplayState) -> bytes:
    entries = [state.entries[key] for key in sorted(state.entries)]
    body = {"entries": entries, "v": SIDECAR_FORMAT}
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode() + b"\n"
    if len(data) > MAX_SIDECAR_BYTES:
        raise InvalidRecord(
            f"the replay sidecar would be {len(data)} bytes, "
            f"over the {MAX_SIDECAR_BYTES}-byte limit; nothing was written"
        )
    return data


def capture_delta(plan, authority_kind: str = "capture") -> list[dict[str, Any]]:
    """The exact entries one semantic plan publishes (a pure function of the plan)."""
    authority = {"digest": capture_authority(plan.id, plan.payload_sha256, authority_kind), "kind": authority_kind}
    at = format_ts(plan.created_at)
    facts = sorted(fact.id for fact in plan.facts)
    delta: list[dict[str, Any]] = [
        {"at": at, "authority": authority, "facts": facts, "kind": "capture", "run": plan.id}
    ]
    for fact in plan.facts:
        if fact.target is None:
            continue
        state = "updated" if fact.action == "update" else "superseded"
        delta.append(
            {"at": at, "authority": authority, "by": fact.id, "id": fact.target, "kind": "lifecycle", "state": state}
        )
        delta.append(
            {
                "authority": authority,
                "from": fact.id,
                "kind": "edge",
                "to": fact.target,
                "type": "supersedes",
                "weight": 1,
            }
        )
    ordered = sorted(plan.facts, key=lambda fact: fact.index)
    for position, first in enumerate(ordered):
        for second in ordered[position + 1 :]:
            shared = len(set(first.entities) & set(second.entities))
            if shared:
                delta.append({"authority": authority, "from": first.id, "kind": "edge", "to": second.id,
                              "type": "thread", "weight": min(shared, MAX_WEIGHT)})  # fmt: skip
    return delta


# --- the strict parser ------------------------------------------------------------------------------


def parse_state(data: bytes, where: str) -> ReplayState:
    """Exactly what `render_state` writes, or SidecarInvalid naming `where`."""

    def fail(problem: str) -> SidecarInvalid:
        return SidecarInvalid(
            f"{where}: {problem}. Fix: restore it from a backup (`memvault export`), or move it aside "
            "with the agent stopped and run `memvault adopt-replay --json` then `memvault rebuild`."
        )

    if len(data) > MAX_SIDECAR_BYTES:
        raise fail(f"{len(data)} bytes is over the {MAX_SIDECAR_BYTES}-byte limit")
    try:
        body = loads_strict(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise fail(f"not strict JSON ({str(exc)[:100]})") from None
    if (
        not isinstance(body, dict)
        or set(body) != {"entries", "v"}
        or body["v"] != SIDECAR_FORMAT
        or type(body["v"]) is not int
    ):
        raise fail('the document must be {"entries": [...], "v": 1}')
    if not isinstance(body["entries"], list) or len(body["entries"]) > MAX_ENTRIES:
        raise fail(f"entries must be a list of at most {MAX_ENTRIES}")
    state = ReplayState()
    for position, entry in enumerate(body["entries"]):
        problem = _entry_problem(entry)
        if problem is not None:
            raise fail(f"entries[{position}]: {problem}")
        key = identity(entry)
        if key in state.entries:
            raise fail(f"entries[{position}] repeats {key[0]} {key[1:]}")
        state.entries[key] = entry
    if render_state(state) != data:
        raise fail("bytes are not the canonical rendering (hand-edited, reordered or re-spaced)")
    return state


def _entry_problem(entry: Any) -> str | None:
    if not isinstance(entry, dict) or entry.get("kind") not in _KEYS:
        return "not an object with kind capture, edge or lifecycle"
    kind = entry["kind"]
    if set(entry) != _KEYS[kind]:
        return f"a {kind} entry has exactly the fields {sorted(_KEYS[kind])}"
    authority = entry["authority"]
    if (
        not isinstance(authority, dict)
        or set(authority) != {"digest", "kind"}
        or authority["kind"] not in AUTHORITY_KINDS
        or not _text_matches(authority["digest"], _HEX_RE)
    ):
        return "authority must be {digest: SHA-256 hex, kind: capture or direct}"
    if kind == "capture":
        facts = entry["facts"]
        if not is_intake_id(entry["run"]) or not _text_matches(entry["at"], _TS_RE):
            return "run must be an intake id and at a UTC timestamp"
        if (
            not isinstance(facts, list)
            or len(facts) > MAX_FACTS_PER_CAPTURE
            or facts != sorted(set(facts))
            or not all(_text_matches(f, _ID_RE) for f in facts)
        ):
            return "facts must be a sorted list of distinct memory ids"
        return None
    if kind == "edge":
        weight = entry["weight"]
        if entry["type"] not in EDGE_TYPES or type(weight) is not int or not 1 <= weight <= MAX_WEIGHT:
            return f"type must be one of {EDGE_TYPES} and weight an integer from 1 to {MAX_WEIGHT}"
        return (
            None
            if _text_matches(entry["from"], _ID_RE) and _text_matches(entry["to"], _ID_RE)
            else "from/to must be memory ids"
        )
    if entry["state"] not in LIFECYCLE_STATES or not _text_matches(entry["at"], _TS_RE):
        return f"state must be one of {LIFECYCLE_STATES} and at a UTC timestamp"
    return (
        None
        if _text_matches(entry["id"], _ID_RE) and _text_matches(entry["by"], _ID_RE)
        else "id/by must be memory ids"
    )


def _text_matches(value: Any, regex: re.Pattern[str]) -> bool:
    return isinstance(value, str) and regex.fullmatch(value) is not None


# --- the file ----------------------------------------------------------------------------------------


def sidecar_path(root: Path) -> Path:
    return resolve_inside(Path(root), SIDECAR_NAME)


def check_sidecar_file(path: Path) -> None:
    """Owner-owned, single-link regular file with mode exactly 0600 (UnsafePath otherwise)."""
    check_private_file(path)
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode != SIDECAR_MODE:
        raise UnsafePath(
            f"{path} has mode {mode:04o}; the replay sidecar must be exactly 0600. Fix: `chmod 600 {path}`."
        )


def narrow_checked_out_sidecar(path: Path) -> bool:
    """Narrow a sidecar git checked out (group/other may read it) to 0600; True if it was.

    Checked and changed on one descriptor (O_NOFOLLOW: a link is never followed, and nothing can
    swap the file between the look and the chmod). Only an owner-owned, single-link regular file
    with owner read+write whose other bits are group/other read is narrowed; anything else, and
    any OSError (a read-only mount), is left as it is for `check_sidecar_file` to name.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        narrowable = (
            stat.S_ISREG(st.st_mode)
            and st.st_uid == os.geteuid()
            and st.st_nlink == 1
            and mode & (stat.S_IRUSR | stat.S_IWUSR) == stat.S_IRUSR | stat.S_IWUSR
            and mode & SIDECAR_NOT_NARROWABLE_BITS == 0
            and mode != SIDECAR_MODE
        )
        if narrowable:
            os.fchmod(fd, SIDECAR_MODE)
        return narrowable
    except OSError:
        return False
    finally:
        os.close(fd)


def read_sidecar(root: Path) -> tuple[ReplayState, bytes | None]:
    """The sidecar's state and exact bytes (None when there is no sidecar)."""
    path = sidecar_path(root)
    if not os.path.lexists(path):
        return ReplayState(), None
    narrow_checked_out_sidecar(path)
    check_sidecar_file(path)
    data = read_private(path, MAX_SIDECAR_BYTES)
    return parse_state(data, str(path)), data


def write_sidecar(root: Path, old: bytes | None, state: ReplayState) -> bytes:
    """Publish `state` (CAS against `old`, mode 0600); returns the bytes now on disk. Vault lock held."""
    new = render_state(state)
    if new != old:
        replace_if_unchanged(sidecar_path(root), old, new, mode=SIDECAR_MODE)
    return new
