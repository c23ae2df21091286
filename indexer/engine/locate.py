"""Finding the vault a command means. Light (standard library and vault/ only): thin clients
locate the vault with this before deciding whether to import anything heavy."""

import os
from collections.abc import Mapping
from pathlib import Path

from memvault.vault.errors import NotAVault
from memvault.vault.layout import find_vault, is_vault

__all__ = ["locate_vault"]


def locate_vault(path: str | os.PathLike | None, env: Mapping[str, str], cwd: Path) -> Path:
    """`path`, else MEMVAULT_MEMORY_PATH, else the nearest enclosing vault (as git finds a repo)."""
    chosen = path if path is not None else env.get("MEMVAULT_MEMORY_PATH") or None
    if chosen is not None:
        root = Path(chosen).expanduser()
        if not root.is_dir():
            raise NotAVault(f"{root} is not a folder: create it with `memvault init {root}`")
        if not is_vault(root):
            raise NotAVault(f"{root} is not a memvault vault (no memvault.json): run `memvault init {root}`")
        return root.resolve()
    found = find_vault(cwd)
    if found is None:
        raise NotAVault(
            f"no vault at or above {cwd}: pass --vault PATH, set MEMVAULT_MEMORY_PATH, or run `memvault init`"
        )
    return found
