"""What a vault kept in git needs so that merges just work: `.gitattributes` and the merge drivers.

`.gitattributes` (versioned, so every clone has it) names a driver per file of the format:

    daily/** merge=memvault-note
    audit/** merge=memvault-note
    graph.jsonl merge=memvault-graph
    index.md merge=memvault-index
    .replay-projection-v1.json merge=memvault-replay

and each clone's own `.git/config` (git never clones config) says what runs them:

    [merge "memvault-note"]
        name = memvault: union of a note's bullets, ids unique, in time order
        driver = /path/to/python -m memvault git merge-driver note %O %A %B %P

A clone where the drivers are not registered merges these files with git's plain text merge: a
conflict then leaves markers, the bullets of both sides stay searchable, and `memvault health`
names the note and the fix. Setup is idempotent (a second run changes nothing) and never touches
a line of a person's own `.gitattributes`: a pattern they already gave a `merge=` attribute keeps
theirs, and is reported.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from memvault.vault.errors import VaultError
from memvault.vault.fsio import atomic_write, read_bytes_nofollow
from memvault.vault.paths import resolve_inside

ATTRIBUTES_FILE = ".gitattributes"
#: pattern → the driver it merges through
ATTRIBUTES = (
    ("daily/**", "memvault-note"),
    ("audit/**", "memvault-note"),
    ("graph.jsonl", "memvault-graph"),
    ("index.md", "memvault-index"),
    (".replay-projection-v1.json", "memvault-replay"),
)
DRIVERS = {
    "memvault-note": ("note", "memvault: union of a note's bullets, ids unique, in time order"),
    "memvault-graph": ("graph", "memvault: graph.jsonl lines merged by key, deduplicated, sorted"),
    "memvault-index": ("index", "memvault: index.md merged, its generated block taken from ours"),
    "memvault-replay": ("replay", "memvault: the replay sidecar's entries merged by identity"),
}
_HEADER = "# memvault: how git merges this vault's files (docs/backup.md; `memvault git setup`)"
_GIT_TIMEOUT_SECONDS = 30.0


class NotInGit(VaultError):
    """The vault is not inside a git work tree (or git cannot be run)."""


@dataclass(frozen=True)
class SetupReport:
    #: lines added to .gitattributes
    attributes_added: tuple[str, ...] = ()
    #: patterns left to a `merge=` the person set themselves (their line, as it is)
    attributes_kept: tuple[str, ...] = ()
    #: `merge.<driver>.*` keys set in the repository's config
    config_set: tuple[str, ...] = ()
    #: the repository's top folder, or None when the vault is not in one
    repository: str | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def changed(self) -> bool:
        return bool(self.attributes_added or self.config_set)

    def to_json(self) -> dict:
        return {
            "repository": self.repository,
            "attributesAdded": list(self.attributes_added),
            "attributesKept": list(self.attributes_kept),
            "configSet": list(self.config_set),
            "changed": self.changed,
        }


def ensure_attributes(root: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Append the memvault lines `.gitattributes` lacks: (lines added, the person's lines kept)."""
    path = resolve_inside(Path(root), ATTRIBUTES_FILE)
    try:
        current = read_bytes_nofollow(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        current = ""
    merges: dict[str, str] = {}
    for line in current.splitlines():
        parts = line.split()
        if parts and not parts[0].startswith("#"):
            for attribute in parts[1:]:
                if attribute.startswith(("merge=", "-merge", "!merge")) or attribute == "merge":
                    merges[parts[0]] = line.strip()  # the last one counts, as in git
    added, kept = [], []
    for pattern, driver in ATTRIBUTES:
        ours = f"{pattern} merge={driver}"
        if pattern not in merges:
            added.append(ours)
        elif merges[pattern].split() != ours.split():
            kept.append(merges[pattern])
    if added:
        prefix = current if not current or current.endswith("\n") else current + "\n"
        header = _HEADER + "\n" if _HEADER not in current else ""
        atomic_write(path, (prefix + header + "\n".join(added) + "\n").encode("utf-8"), mode=0o644)
    return tuple(added), tuple(kept)


def repository_of(root: Path) -> Path | None:
    """The top folder of the git work tree holding `root`, or None (no repository, or no git)."""
    done = _git(Path(root), "rev-parse", "--show-toplevel", check=False)
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return None
    return Path(done.stdout.strip())


def register_drivers(root: Path, command: str) -> tuple[str, ...]:
    """Set `merge.memvault-*.name/driver` in the repository's own config where they differ;
    `command` starts the driver (`/path/to/python -m memvault`). Returns the keys set."""
    changed = []
    for driver, (kind, name) in DRIVERS.items():
        for key, value in ((f"merge.{driver}.name", name),
                           (f"merge.{driver}.driver", f"{command} git merge-driver {kind} %O %A %B %P")):  # fmt: skip
            done = _git(Path(root), "config", "--local", "--get", key, check=False)
            if done is not None and done.returncode == 0 and done.stdout.rstrip("\n") == value:
                continue
            _git(Path(root), "config", "--local", key, value)
            changed.append(key)
    return tuple(changed)


def drivers_missing(root: Path) -> tuple[str, ...]:
    """The memvault drivers this clone's config lacks (what `memvault git setup` would add)."""
    done = _git(Path(root), "config", "--get-regexp", r"^merge\.memvault-.*\.driver$", check=False)
    present = set() if done is None else {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    return tuple(driver for driver in DRIVERS if f"merge.{driver}.driver" not in present)


def names_memvault_drivers(root: Path) -> bool:
    """Whether the vault's `.gitattributes` sends any file to a memvault driver (no git run)."""
    try:
        text = read_bytes_nofollow(resolve_inside(Path(root), ATTRIBUTES_FILE)).decode("utf-8", errors="replace")
    except (OSError, VaultError):
        return False
    return any(f"merge={driver}" in text for driver in DRIVERS)


def setup(root: Path, command: str) -> SetupReport:
    """`memvault git setup`: the attributes and, in this clone, the drivers. Raises NotInGit
    (nothing written) when the vault is in no git repository."""
    repository = repository_of(root)
    if repository is None:
        raise NotInGit(
            f"{root} is not inside a git repository (or git is not installed), so there is nothing to set up. "
            "Fix: `git init` in the vault (or clone it), then run `memvault git setup` again"
        )
    added, kept = ensure_attributes(root)
    config = register_drivers(root, command)
    return SetupReport(added, kept, config, str(repository))


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              timeout=_GIT_TIMEOUT_SECONDS, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        if check:
            raise NotInGit(f"git could not run in {root} ({exc}). Fix: install git, then retry") from exc
        return None
    if check and done.returncode != 0:
        raise NotInGit(f"`git {' '.join(args[:3])}` failed in {root}: {done.stderr.strip()}")
    return done
