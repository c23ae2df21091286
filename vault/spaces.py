"""Memory spaces: several vaults under one storage root, listed in `<root>/spaces.json`.

    <storage root>/
      spaces.json          the catalog (deterministic JSON, CAS-written under the spaces lock)
      default/             the first space: a plain lite vault (daily/, memvault.json, .index/)
      s-3f9a0c1d/          later spaces get generated ids

A space is an ordinary vault, so Remember, recall and rebuild work on it unchanged. The
catalog only adds what routing needs: a title and description, whether the space is active
(part of the default recall set and an archival destination) and writable, and when it was last
written. The model sees at most 16 entries (`model_catalog`); the full catalog is for people.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path

from memvault.vault.clock import utc_now
from memvault.vault.config import default_config_data, render_config
from memvault.vault.errors import Conflict, InvalidRecord, NotAVault
from memvault.vault.fsio import PUBLIC_DIR_MODE, make_dir, read_bytes_nofollow
from memvault.vault.init import init_vault
from memvault.vault.layout import CONFIG_FILE
from memvault.vault.locks import VaultLock, replace_if_unchanged
from memvault.vault.paths import resolve_inside
from memvault.vault.runtime.entries import iso_utc

CATALOG_FILE = "spaces.json"
FORMAT = "memvault-spaces-v1"
DEFAULT_SPACE_ID = "default"
MODEL_CATALOG_LIMIT = 16
MAX_SPACES = 1024
MAX_CATALOG_BYTES = 4 * 1024 * 1024
_ID_RE = re.compile(r"default|s-[0-9a-f]{8}")
_MAX_TITLE, _MAX_DESCRIPTION = 120, 500


@dataclass(frozen=True)
class Space:
    id: str
    title: str
    description: str
    active: bool
    writable: bool
    created: str
    last_write: str | None

    def to_json(self) -> dict:
        data = asdict(self)
        data["lastWrite"] = data.pop("last_write")
        return data

    def cover(self) -> dict:
        """What a model may see: no paths, no statistics."""
        return {"id": self.id, "title": self.title, "description": self.description, "active": self.active}


def _clean(text: object, what: str, limit: int, *, required: bool) -> str:
    if not isinstance(text, str):
        raise InvalidRecord(f"the space {what} must be text, not {type(text).__name__}")
    cleaned = " ".join(text.split())
    if required and not cleaned:
        raise InvalidRecord(f"the space {what} is empty: give the space a short {what}")
    if len(cleaned) > limit or any(ord(ch) < 32 for ch in cleaned):
        raise InvalidRecord(f"the space {what} is over {limit} characters or holds control characters: shorten it")
    return cleaned


class SpaceCatalog:
    def __init__(self, storage_root: Path, *, clock: Callable[[], datetime] = utc_now, time_zone: str = "UTC") -> None:
        self.root = Path(storage_root)
        self._clock = clock
        self._time_zone = time_zone

    @property
    def catalog_path(self) -> Path:
        return self.root / CATALOG_FILE

    # --- reads ---------------------------------------------------------------------------------

    def list(self) -> list[Space]:
        return self._read()[0]

    def get(self, space_id: str) -> Space:
        for space in self.list():
            if space.id == space_id:
                return space
        raise InvalidRecord(f"no memory space {space_id!r} in {self.catalog_path}: see `memvault space list`")

    def path_of(self, space_id: str) -> Path:
        if not isinstance(space_id, str) or not _ID_RE.fullmatch(space_id):
            raise InvalidRecord(f"{space_id!r} is not a space id (like 'default' or 's-3f9a0c1d')")
        return resolve_inside(self.root, space_id)

    def eligible(self) -> list[Space]:
        """Active, writable spaces whose folder is a vault: the destinations maintenance may use."""
        return [s for s in self.list() if s.active and s.writable and (self.path_of(s.id) / CONFIG_FILE).is_file()]

    def model_catalog(self) -> list[dict]:
        """At most 16 covers: active spaces first, then most recently written, then by id."""
        ranked = sorted(self.list(), key=lambda s: (not s.active, _desc(s.last_write), s.id))
        return [space.cover() for space in ranked[:MODEL_CATALOG_LIMIT]]

    # --- writes --------------------------------------------------------------------------------

    def create(self, title: str, description: str = "", *, active: bool = True) -> Space:
        """A new space: the first one in an empty root is `default`, later ids are generated.

        The vault folder is created before the catalog names it; a crash in between leaves a
        folder the next create of the same id adopts instead of failing on.
        """
        title = _clean(title, "title", _MAX_TITLE, required=True)
        description = _clean(description, "description", _MAX_DESCRIPTION, required=False)
        with self._lock():
            spaces, raw = self._read()
            if len(spaces) >= MAX_SPACES:
                raise InvalidRecord(f"{self.catalog_path} already lists {MAX_SPACES} spaces: reuse one")
            now = iso_utc(self._clock())
            space_id = DEFAULT_SPACE_ID if not spaces else self._new_id(spaces, title, now)
            self._ensure_vault(space_id)
            space = Space(space_id, title, description, active, True, now, None)
            self._write([*spaces, space], raw)
            return space

    def mark_written(self, space_id: str) -> Space:
        """Record a successful write; writing to an inactive space activates it."""
        return self._update(space_id, lambda s: replace(s, active=True, last_write=iso_utc(self._clock())))

    # --- internals -----------------------------------------------------------------------------

    def _lock(self) -> VaultLock:
        make_dir(self.root, PUBLIC_DIR_MODE, parents=True)
        return VaultLock(self.root, "spaces")

    def _update(self, space_id: str, change: Callable[[Space], Space]) -> Space:
        with self._lock():
            spaces, raw = self._read()
            for index, space in enumerate(spaces):
                if space.id == space_id:
                    spaces[index] = change(space)
                    self._write(spaces, raw)
                    return spaces[index]
        raise InvalidRecord(f"no memory space {space_id!r} in {self.catalog_path}: see `memvault space list`")

    def _new_id(self, spaces: list[Space], title: str, now: str) -> str:
        taken = {space.id for space in spaces}
        for attempt in range(1000):
            candidate = "s-" + hashlib.sha256(f"{title}\0{now}\0{attempt}".encode()).hexdigest()[:8]
            if candidate not in taken and not self.path_of(candidate).exists():
                return candidate
        raise Conflict("could not find a free space id: retry")

    def _ensure_vault(self, space_id: str) -> None:
        path = self.path_of(space_id)
        if (path / CONFIG_FILE).is_file():
            return  # a folder left by a create that crashed before the catalog write
        if path.exists() and any(path.iterdir()):
            raise NotAVault(f"{path} exists and is not a memvault vault: move it aside, then create the space again")
        data = default_config_data(mode="lite", time_zone=self._time_zone)
        init_vault(path, render_config(data))

    def _read(self) -> tuple[list[Space], bytes | None]:
        try:
            raw = read_bytes_nofollow(resolve_inside(self.root, CATALOG_FILE))
        except FileNotFoundError:
            return [], None
        return _decode(raw, self.catalog_path), raw

    def _write(self, spaces: list[Space], expected: bytes | None) -> None:
        data = {"format": FORMAT, "spaces": [space.to_json() for space in spaces]}
        encoded = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        replace_if_unchanged(resolve_inside(self.root, CATALOG_FILE), expected, encoded, mode=0o644)


def _desc(stamp: str | None) -> tuple[int, ...]:
    return tuple(-ord(ch) for ch in (stamp or ""))


def _decode(raw: bytes, path: Path) -> list[Space]:
    def bad(problem: str) -> InvalidRecord:
        return InvalidRecord(f"{path} is not a valid space catalog: {problem}. Fix: restore it from git or a backup")

    if len(raw) > MAX_CATALOG_BYTES:
        raise bad(f"it is {len(raw)} bytes, over {MAX_CATALOG_BYTES}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise bad("it is not UTF-8 JSON") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("spaces"), list):
        raise bad(f'it lacks "format": "{FORMAT}" and a "spaces" list')
    spaces, seen = [], set()
    for number, item in enumerate(data["spaces"]):
        space = _decode_space(item, number, bad)
        if space.id in seen:
            raise bad(f"space id {space.id!r} is listed twice")
        seen.add(space.id)
        spaces.append(space)
    return spaces


def _decode_space(item: object, number: int, bad) -> Space:
    keys = {"id", "title", "description", "active", "writable", "created", "lastWrite"}
    if not isinstance(item, dict) or set(item) != keys:
        raise bad(f"entry {number} does not have exactly {', '.join(sorted(keys))}")
    if not isinstance(item["id"], str) or not _ID_RE.fullmatch(item["id"]):
        raise bad(f"entry {number} id is not like 'default' or 's-3f9a0c1d'")
    if not all(isinstance(item[k], str) for k in ("title", "description", "created")):
        raise bad(f"entry {number} title/description/created is not text")
    if not all(isinstance(item[k], bool) for k in ("active", "writable")):
        raise bad(f"entry {number} active/writable is not true or false")
    if item["lastWrite"] is not None and not isinstance(item["lastWrite"], str):
        raise bad(f"entry {number} lastWrite is not text or null")
    return Space(
        item["id"],
        item["title"],
        item["description"],
        item["active"],
        item["writable"],
        item["created"],
        item["lastWrite"],
    )
