"""Markdown under `daily/` that memvault does not index, and why: what `health` lists.

A person who keeps notes in `daily/` expects every one of them to be searched. Files that are
not notes by memvault's rules (docs/format.md, "Where notes live") are not silently skipped:
each is named with the reason and the fix. Hidden files and editor temp/backup files are not
content (`vault/paths.py`) and are left out.
"""

import os
import re
from dataclasses import dataclass
from datetime import date

from memvault.vault.layout import DAILY, VaultLayout, note_relpath_candidates, parse_note_relpath
from memvault.vault.paths import is_ignored_name

_MARKDOWN_SUFFIXES = (".md", ".markdown")
_LOOSE_DATE_RE = re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})")
_SCAN_DEPTH = 4  # daily/YYYY/MM/note is the deepest layout; a little deeper is still reported
MAX_LISTED = 1000


@dataclass(frozen=True)
class UnindexedFile:
    path: str
    why: str
    fix: str


def unindexed_daily_files(layout: VaultLayout) -> list[UnindexedFile]:
    """Every markdown-looking file under `daily/` that is not indexed (at most MAX_LISTED)."""
    root = layout.root / DAILY
    if os.path.islink(root):
        return [UnindexedFile(DAILY, "daily/ is a symlink; memvault never follows links inside a vault",
                              "move the real folder into the vault as daily/ "
                              "(and link the other way if needed)")]  # fmt: skip
    if os.path.lexists(root) and not root.is_dir():
        return [UnindexedFile(DAILY, "daily is a file, not a folder", "rename that file, then run `memvault rebuild`")]
    found: list[UnindexedFile] = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        relfolder = os.path.relpath(folder, layout.root).replace(os.sep, "/")
        depth = relfolder.count("/")
        for name in sorted(dirs):
            if os.path.islink(os.path.join(folder, name)) and not is_ignored_name(name):
                found.append(UnindexedFile(f"{relfolder}/{name}", "a symlinked folder (not followed)",
                                           "replace the link with the real folder"))  # fmt: skip
        dirs[:] = sorted(d for d in dirs if not is_ignored_name(d) and depth < _SCAN_DEPTH)
        for name in sorted(files):
            if is_ignored_name(name) or not name.lower().endswith(_MARKDOWN_SUFFIXES):
                continue
            relpath = f"{relfolder}/{name}"
            why_fix = _why_not_indexed(relpath, os.path.join(folder, name))
            if why_fix is not None:
                found.append(UnindexedFile(relpath, *why_fix))
        if len(found) >= MAX_LISTED:
            break
    return found[:MAX_LISTED]


def _why_not_indexed(relpath: str, path: str) -> tuple[str, str] | None:
    if parse_note_relpath(relpath) is not None:
        return None  # a note, or a link or oversized file with a note's name: `files` reports those
    if os.path.islink(path):
        return "a symlink (not followed)", "replace the link with the real file"
    folder, _, name = relpath.rpartition("/")
    stem, _, suffix = name.rpartition(".")
    if suffix != "md":
        return f"the extension is .{suffix}; notes end in .md", f"rename it to {folder}/{stem}.md"
    if (loose := _LOOSE_DATE_RE.fullmatch(stem)) is not None:
        try:
            day = date(int(loose["y"]), int(loose["m"]), int(loose["d"]))
        except ValueError:
            return f"{stem} is not a calendar date", "rename it to the real date (YYYY-MM-DD.md)"
        flat, nested = note_relpath_candidates(DAILY, day)  # the names the layout knows (vault/layout.py)
        expected = flat.rpartition("/")[2]
        if name != expected:
            return "the date is not written YYYY-MM-DD", f"rename it to {folder}/{expected}"
        return (f"it is filed under {folder}/, not {DAILY}/ or {nested.rpartition('/')[0]}/",
                f"move it to {flat} or {nested}")  # fmt: skip
    return ("its name is not a date; daily notes are named YYYY-MM-DD.md",
            "rename it to the date it belongs to, or move it out of daily/ (e.g. into documents/)")  # fmt: skip
