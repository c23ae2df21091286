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
        return f"{folder}/{day.isoformat()}.md"

    def note_path(self, folder: str, day: date) -> Path:
        return self.root / self.note_relpath(folder, day)

    def note_relpaths(self) -> list[str]:
        """Every canonical note, sorted: `daily/*.md` then `audit/*.md` with date names."""
        found = []
        for folder in (DAILY, AUDIT):
            directory = self.root / folder
            if not directory.is_dir() or directory.is_symlink():
                continue
            for entry in directory.iterdir():
                if parse_note_relpath(f"{folder}/{entry.name}") is not None and entry.is_file():
                    found.append(f"{folder}/{entry.name}")
        return sorted(found)


def parse_note_relpath(relpath: str) -> tuple[str, date] | None:
    """`daily/2026-11-30.md` → ("daily", date); None for anything that is not a canonical note."""
    folder, _, name = relpath.partition("/")
    if folder not in NOTE_KINDS or "/" in name:
        return None
    match = _NOTE_NAME_RE.fullmatch(name)
    if match is None:
        return None
    try:
        return folder, date.fromisoformat(match["day"])
    except ValueError:
        return None


def is_vault(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file() or (path / DAILY).is_dir()


def find_vault(start: Path) -> Path | None:
    """The nearest folder at or above `start` that holds a vault, as git finds a repository."""
    current = start.resolve()
    for candidate in (current, *current.parents):
        if (candidate / CONFIG_FILE).is_file():
            return candidate
    return None
