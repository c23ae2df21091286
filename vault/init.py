"""Creating a vault: folders, the config file, and a `.gitignore` for derived and lock state."""

import os
from pathlib import Path

from memvault.vault.config import is_time_zone
from memvault.vault.errors import NotAVault
from memvault.vault.fsio import PUBLIC_DIR_MODE, atomic_write, fsync_dir, make_dir, read_bytes_nofollow
from memvault.vault.git_setup import ATTRIBUTES_FILE, ensure_attributes, register_drivers, repository_of
from memvault.vault.layout import CONFIG_FILE, DAILY, GITIGNORE_LINES
from memvault.vault.paths import resolve_inside


def init_vault(root: Path, config_bytes: bytes, *, git_driver: str | None = None) -> list[str]:
    """Create a vault at `root` (which may exist and hold notes). Returns what was created.

    `.gitattributes` is written whether or not the vault is in git yet (it travels with the
    first commit); with `git_driver` (how git starts memvault) and a repository holding `root`,
    the merge drivers are registered in its config too (vault/git_setup.py)."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise NotAVault(f"{root} exists and is not a folder: choose another path")
    if (root / CONFIG_FILE).exists():
        raise NotAVault(f"{root} is already a vault ({CONFIG_FILE} exists): edit that file instead")
    created = []
    if not root.exists():
        make_dir(root, PUBLIC_DIR_MODE, parents=True)
        fsync_dir(root.parent)
        created.append(".")
    daily = resolve_inside(root, DAILY)
    if not daily.exists():
        make_dir(daily, PUBLIC_DIR_MODE)
        created.append(DAILY + "/")
    created += _ensure_gitignore(root)
    created += _ensure_living_index(root)
    created += [ATTRIBUTES_FILE] if ensure_attributes(root)[0] else []
    if git_driver is not None and repository_of(root) is not None:
        register_drivers(root, git_driver)
    atomic_write(root / CONFIG_FILE, config_bytes, mode=0o644)
    created.append(CONFIG_FILE)
    fsync_dir(root)
    return created


#: the empty consolidation block: a vault made by `init` opts into the living index.md (the
#: markers are consolidate.START/END; vault/ cannot import indexer/, a test keeps them equal)
LIVING_INDEX_BLOCK = "# Memory index\n\n<!-- memvault:consolidate:start -->\n<!-- memvault:consolidate:end -->\n"


def _ensure_living_index(root: Path) -> list[str]:
    path = resolve_inside(root, "index.md")
    if path.exists():
        return []  # a person's own index.md: consolidation opts in only when asked
    atomic_write(path, LIVING_INDEX_BLOCK.encode("utf-8"), mode=0o644)
    return ["index.md"]


def _ensure_gitignore(root: Path) -> list[str]:
    path = resolve_inside(root, ".gitignore")
    try:
        current = read_bytes_nofollow(path).decode("utf-8", errors="replace")
    except FileNotFoundError:
        current = ""
    present = {line.strip() for line in current.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line not in present]
    if not missing:
        return []
    prefix = current if not current or current.endswith("\n") else current + "\n"
    header = "" if current else "# memvault: derived indexes and lock files are rebuilt, not versioned\n"
    atomic_write(path, (prefix + header + "\n".join(missing) + "\n").encode("utf-8"), mode=0o644)
    return [".gitignore"]


def host_time_zone(env: dict[str, str]) -> str:
    """The machine's IANA zone for a new vault's config (written there explicitly), else UTC."""
    candidate = env.get("TZ", "").lstrip(":")
    if not candidate:
        try:
            link = os.readlink("/etc/localtime")
            candidate = link.split("zoneinfo/", 1)[1] if "zoneinfo/" in link else ""
        except OSError:
            candidate = ""
    return candidate if candidate and is_time_zone(candidate) else "UTC"
