"""Vault-relative paths: turning names from notes, configs, agents and file events into safe paths.

Every path memvault derives from outside input goes through ``resolve_inside`` before any
read or write, so a crafted name (``../../etc/passwd``, an absolute path, a NUL byte) or a
symlink planted inside the vault cannot make a write land outside it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePosixPath

from memvault.vault.errors import UnsafePath

__all__ = ["is_ignored_name", "resolve_inside", "vault_relative"]

# Names editors, office suites and sync tools create beside real notes (checked by suffix).
_IGNORED_SUFFIXES = ("~", ".swp", ".swo", ".swx", ".tmp", ".bak", ".orig", ".crswap")
# vim writes and deletes "4913" to probe whether it may create files in a folder.
_IGNORED_EXACT = frozenset({"4913"})


def _normalised_parts(relative: str | Path) -> list[str]:
    """Split a vault-relative path into clean parts, refusing anything that leaves the vault.

    ``..`` is resolved lexically against the parts already seen; one that would climb above
    the vault root is an escape. The lexical result is what callers get back, and it is
    exactly what ``resolve_inside`` then checks component by component for symlinks.
    """
    text = os.fspath(relative)
    if "\x00" in text:
        raise UnsafePath(f"{text!r} contains a NUL byte; vault paths are plain names. Fix: remove the NUL byte.")
    pure = PurePosixPath(text)
    if pure.is_absolute():
        raise UnsafePath(f"{text} is absolute; vault paths are relative to the vault root. Fix: drop the leading '/'.")
    parts: list[str] = []
    for part in pure.parts:
        if part == "..":
            if not parts:
                raise UnsafePath(f"{text} climbs out of the vault with '..'. Fix: use a path inside the vault.")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return parts


def resolve_inside(root: Path, relative: str | Path) -> Path:
    """Return ``root / relative`` normalised, refusing escapes and symlinked components.

    Each existing component below ``root`` (the target included) is checked with ``lstat``;
    components that do not exist yet are fine, since writers create them. ``root`` itself may
    be a symlink (a vault kept elsewhere); nothing below it may be.
    """
    root = Path(root)
    parts = _normalised_parts(relative)
    current = root
    for part in parts:
        current = current / part
        if not _exists_as_non_link(current):
            break
    return root.joinpath(*parts)


def _exists_as_non_link(path: Path) -> bool:
    """True if ``path`` exists and is not a symlink; False if absent; refuse a symlink."""
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISLNK(mode):
        raise UnsafePath(
            f"{path} is a symlink inside the vault; memvault never follows links there. "
            f"Fix: replace the link with the real file or folder."
        )
    return True


def vault_relative(root: Path, path: Path) -> str:
    """Name ``path`` the way the vault does: a POSIX-style string relative to ``root``.

    Compared lexically first. File-event paths may arrive through the vault root's real
    location when the root is itself a symlink, so that is tried too (the final component is
    not followed: we are naming the entry, not its target).
    """
    root_abs = Path(os.path.abspath(root))
    path_abs = Path(os.path.abspath(path))
    candidates = (  # lazily: resolving costs system calls per component, and the first usually fits
        lambda: (root_abs, path_abs),
        lambda: (root_abs.resolve(), path_abs.parent.resolve() / path_abs.name),
    )
    for candidate_of in candidates:
        base, candidate = candidate_of()
        try:
            return candidate.relative_to(base).as_posix()
        except ValueError:
            continue
    raise UnsafePath(f"{path} is outside the vault {root}. Fix: use a path inside the vault.")


def is_ignored_name(name: str) -> bool:
    """True for names that are not vault content: hidden files and editor temp/backup files.

    Hidden covers ``.#lock`` (emacs), ``.~lock.*#`` (LibreOffice), ``.name.*.tmp`` (our own
    atomic writes) and ``.index/``. Editors save via temp + rename, so indexing these would
    index half-written or duplicate copies of notes.
    """
    if name.startswith(".") or name in _IGNORED_EXACT:
        return True
    if len(name) >= 2 and name.startswith("#") and name.endswith("#"):
        return True
    return name.endswith(_IGNORED_SUFFIXES)
