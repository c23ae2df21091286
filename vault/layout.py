"""Where things live in a vault (format v1), and how a vault is found and created."""

import re
from dataclasses import dataclass
from datetime import date
from pathlib import Path

CONFIG_FILE = "memvault.json"
DAILY, AUDIT = "daily", "audit"
NOTE_KINDS = {DAILY: "curated", AUDIT: "audit"}
FORMAT_VERSION = 1
#: derived state, lock files, and the intake (it holds turn summaries and capture text: private
#: data that `memvault export` backs up, not something to push to a git remote)
GITIGNORE_LINES = (".index/", ".locks/", ".capture-intake/", ".capture-intake-schema")
_NOTE_NAME_RE = re.compile(r"(?P<day>\d{4}-\d{2}-\d{2})\.md")
_YEAR_RE, _MONTH_RE = re.compile(r"\d{4}"), re.compile(r"\d{2}")


@dataclass(frozen=True)
class VaultLayout:
    root: Path

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def index_dir(self) -> Path:
        return self.root / ".index"

    @property
    def locks_dir(self) -> Path:
        return self.root / ".locks"

    @property
    def intake_dir(self) -> Path:
        return self.root / ".capture-intake"

    @property
    def runtime_dir(self) -> Path:
        return self.root / "runtime"

    @property
    def documents_dir(self) -> Path:
        return self.root / "documents"

    def note_relpath(self, folder: str, day: date) -> str:
        """Where the note of `day` is, or goes: the flat name, or the Daily Notes plugin's layout.

        A note that exists (flat `daily/2026-11-30.md` or nested `daily/2026/11/2026-11-30.md`)
        is used where it is. A new one goes nested when the vault already keeps that year (or
        the year before) in a `daily/YYYY/` folder, else flat: memvault follows the person.
        """
        flat, nested = f"{folder}/{day.isoformat()}.md", nested_note_relpath(folder, day)
        if (self.root / flat).exists():
            return flat
        if (self.root / nested).exists():
            return nested
        years = (f"{day.year:04d}", f"{day.year - 1:04d}")
        if any((self.root / folder / year).is_dir() for year in years):
            return nested
        return flat

    def note_path(self, folder: str, day: date) -> Path:
        return self.root / self.note_relpath(folder, day)

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


def nested_note_relpath(folder: str, day: date) -> str:
    """The Daily Notes plugin's `YYYY/MM/YYYY-MM-DD.md` name for `day`."""
    return f"{folder}/{day.year:04d}/{day.month:02d}/{day.isoformat()}.md"


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
    """`daily/2026-11-30.md` or `daily/2026/11/2026-11-30.md` → ("daily", date); None otherwise."""
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


def is_vault(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() or (path / DAILY).is_dir()


def find_vault(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds a vault, as git finds a repository."""
    current = start.resolve()
    for candidate in (current, *current.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None
