"""Where things live in a vault (format v1), and how a vault is found and created."""

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from memvault.vault.ids import BLOCK_ID_PATTERN

CONFIG_FILE = "memvault.json"
DAILY, AUDIT = "daily", "audit"
NOTE_KINDS = {DAILY: "curated", AUDIT: "audit"}
#: derived state, lock files, and the intake (it holds turn summaries and capture text: private
#: data that `memvault export` backs up, not something to push to a git remote)
GITIGNORE_LINES = (".index/", ".locks/", ".capture-intake/", ".capture-intake-schema")
_NOTE_NAME_RE = re.compile(r"(?P<day>\d{4}-\d{2}-\d{2})\.md")
_YEAR_RE, _MONTH_RE = re.compile(r"\d{4}"), re.compile(r"\d{2}")
_BLOCK_REF_RE = re.compile(BLOCK_ID_PATTERN)


@dataclass(frozen=True)
class VaultLayout:
    root: Path

    @property
    def index_dir(self) -> Path:
        return self.root / ".index"

    @property
    def locks_dir(self) -> Path:
        return self.root / ".locks"

    def note_relpath(self, folder: str, day: date) -> str:
        """Where the note of `day` is, or goes: the flat name, or the Daily Notes plugin's layout.

        A note that exists (flat `daily/2026-11-30.md` or nested `daily/2026/11/2026-11-30.md`)
        is used where it is. A new one goes nested when the vault already keeps that year (or
        the year before) in a `daily/YYYY/` folder, else flat: memvault follows the person.
        """
        flat, nested = note_relpath_candidates(folder, day)
        if (self.root / flat).exists():
            return flat
        if (self.root / nested).exists():
            return nested
        years = (f"{day.year:04d}", f"{day.year - 1:04d}")
        if any((self.root / folder / year).is_dir() for year in years):
            return nested
        return flat

    def note_relpaths(self) -> list[str]:
        """Every canonical note, sorted: `daily/` then `audit/`, flat or in `YYYY/MM/` folders."""
        found = []
        for folder in (DAILY, AUDIT):
            directory = self.root / folder
            if not directory.is_dir() or directory.is_symlink():
                continue
            for relpath, entry in _candidate_files(directory, folder):
                if parse_note_relpath(relpath) is not None and entry.is_file():  # a symlink is reported when read
                    found.append(relpath)
        return sorted(found)


def flat_note_relpath(folder: str, day: date) -> str:
    """The flat `daily/YYYY-MM-DD.md` name for `day`."""
    return f"{folder}/{day.isoformat()}.md"


def nested_note_relpath(folder: str, day: date) -> str:
    """The Daily Notes plugin's `YYYY/MM/YYYY-MM-DD.md` name for `day`."""
    return f"{folder}/{day.year:04d}/{day.month:02d}/{day.isoformat()}.md"


def note_relpath_candidates(folder: str, day: date) -> tuple[str, str]:
    """Every name the note of `day` may have, flat first (the order `note_relpath` prefers)."""
    return flat_note_relpath(folder, day), nested_note_relpath(folder, day)


def _candidate_files(directory: Path, folder: str):
    """Files directly in `directory` and in its `YYYY/MM/` folders (not deeper, no symlinks)."""
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink() and _YEAR_RE.fullmatch(entry.name):
            for month in entry.iterdir():
                if month.is_dir() and not month.is_symlink() and _MONTH_RE.fullmatch(month.name):
                    for note in month.iterdir():
                        yield f"{folder}/{entry.name}/{month.name}/{note.name}", note
        else:
            yield f"{folder}/{entry.name}", entry


def parse_note_relpath(relpath: str) -> tuple[str, date] | None:
    """`daily/2026-11-30.md` or `daily/2026/11/2026-11-30.md` → ("daily", date); None otherwise.

    The one place that knows how a note's path maps to its date: every surface (index, intake
    records, graph, journal, web pages) asks here instead of slicing the path itself, so a
    layout added here is understood everywhere.
    """
    parts = relpath.split("/")
    if parts[0] not in NOTE_KINDS or len(parts) not in (2, 4):
        return None
    match = _NOTE_NAME_RE.fullmatch(parts[-1])
    if match is None:
        return None
    try:
        day = date.fromisoformat(match["day"])
    except ValueError:
        return None
    if len(parts) == 4 and (parts[1], parts[2]) != (f"{day.year:04d}", f"{day.month:02d}"):
        return None  # a note filed under another month would be found under two dates
    return parts[0], day


def note_day(relpath: str, folder: str | None = None) -> date | None:
    """The date of the note at `relpath` (in `folder`, when given), or None if it is not a note."""
    parsed = parse_note_relpath(relpath)
    if parsed is None or (folder is not None and parsed[0] != folder):
        return None
    return parsed[1]


def note_sort_key(relpath: str) -> tuple:
    """Notes in date order within their folder (flat and nested names interleave by date)."""
    parsed = parse_note_relpath(relpath)
    return (0, parsed[0], parsed[1], relpath) if parsed is not None else (1, "", date.min, relpath)


def parse_note_ref(ref: str) -> tuple[str, str] | None:
    """`daily/…/2026-11-30.md#^m-1f3a9c0d2e` → (relpath, block id); None unless both are valid."""
    relpath, hash_, block = ref.partition("#^")
    if not hash_ or parse_note_relpath(relpath) is None or _BLOCK_REF_RE.fullmatch(block) is None:
        return None
    return relpath, block


def is_vault(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() or (path / DAILY).is_dir()


def find_vault(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds a vault, as git finds a repository."""
    current = start.resolve()
    for candidate in (current, *current.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None
