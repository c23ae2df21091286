"""What git has just done to a note, so the recent-writes repair never fights a git command.

The repair (`vault/recent_writes.py`) puts back a line memvault wrote less than a minute ago
when an editor's save of an older copy dropped it. A git command that replaces the whole file
(`git stash`, `git checkout <branch>`, `git revert`, `git reset --hard`) drops the line too, but
there the line is not lost: git keeps it (in the stash, in the commit HEAD was on before), and
putting it back would make the file dirty under git's feet (`git stash pop` then aborts with
"local changes would be overwritten"). The two cases are told apart by what git itself holds:

* git wrote the note: its bytes are exactly the version git has for it in the index or in HEAD
  (an editor's save of a person's buffer is that only if the person changed nothing), and
* git keeps the line: its `^id` is in the note's version in the top stash, in HEAD's previous
  position (`HEAD@{1}`) or in `ORIG_HEAD`.

Both must hold. While git is in the middle of something (`index.lock`, a merge, revert,
cherry-pick or rebase stopped on a conflict) nothing is decided: the repair waits for it.

Only read-only plumbing is run (`git cat-file --batch`, which takes no lock), only when a line
is missing, so a vault without git, or a repair that never happens, costs nothing.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: how long a repair waits for a git command that holds `.git/index.lock` to finish
GIT_SETTLE_SECONDS = 2.0
#: a cat-file over a handful of blobs; a hung git must not hold the vault lock for long
_GIT_TIMEOUT_SECONDS = 10.0
#: where git may have put the version the note now has
_WRITTEN_FROM = (":", "HEAD:")
#: where git keeps the version the note had before (the stash, the commit before a checkout,
#: revert or reset)
_KEPT_IN = ("refs/stash:", "HEAD@{1}:", "ORIG_HEAD:")
#: files git leaves while a command waits for a person to resolve a conflict
_IN_PROGRESS = ("MERGE_HEAD", "REVERT_HEAD", "CHERRY_PICK_HEAD", "rebase-merge", "rebase-apply")


@dataclass(frozen=True)
class GitVerdict:
    #: git is writing, or stopped mid-command on a conflict: decide nothing now
    busy: bool = False
    #: the block ids git replaced the note without and keeps elsewhere: not to be put back
    kept_by_git: frozenset[str] = frozenset()


def git_dir_of(root: Path) -> Path | None:
    """The `.git` folder of the repository holding `root` (a worktree's `gitdir:` followed), or None."""
    for folder in (root, *root.parents):
        candidate = folder / ".git"
        if candidate.is_dir():
            return candidate
        if candidate.is_file():
            try:
                first = candidate.read_text(encoding="utf-8", errors="replace").splitlines()[0]
            except (OSError, IndexError):
                return None
            if first.startswith("gitdir:"):
                target = Path(first.removeprefix("gitdir:").strip())
                return target if target.is_absolute() else (folder / target).resolve()
            return None
    return None


def judge(root: Path, relpath: str, current: bytes, block_ids: list[str]) -> GitVerdict:
    """Whether git replaced `relpath` (whose bytes are now `current`) without these lines."""
    git_dir = git_dir_of(Path(root))
    if git_dir is None or not block_ids:
        return GitVerdict()
    if not _settled(git_dir):
        return GitVerdict(busy=True)
    versions = _versions(Path(root), relpath, (*_WRITTEN_FROM, *_KEPT_IN))
    if versions is None:
        return GitVerdict()  # no git binary, or not a repository after all: nothing to defer to
    if not any(_same(current, versions.get(name)) for name in _WRITTEN_FROM):
        return GitVerdict()  # not a version git holds: an editor's save, repaired as always
    kept = {block_id for block_id in block_ids
            if any(f"^{block_id}".encode() in (versions.get(name) or b"") for name in _KEPT_IN)}  # fmt: skip
    return GitVerdict(kept_by_git=frozenset(kept))


def _settled(git_dir: Path) -> bool:
    """False while git holds its index lock (after GIT_SETTLE_SECONDS) or waits on a conflict."""
    deadline = time.monotonic() + GIT_SETTLE_SECONDS
    while os.path.lexists(git_dir / "index.lock"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return not any(os.path.lexists(git_dir / name) for name in _IN_PROGRESS)


def _same(current: bytes, version: bytes | None) -> bool:
    # git may hold LF where the work tree has CRLF (core.autocrlf): the same version either way
    return version is not None and (current == version or current.replace(b"\r\n", b"\n") == version)


def _versions(root: Path, relpath: str, prefixes: tuple[str, ...]) -> dict[str, bytes | None] | None:
    """Each `<prefix>./relpath` blob git holds (None where it has none), from one `cat-file`."""
    names = [f"{prefix}./{relpath}" for prefix in prefixes]
    try:
        done = subprocess.run(["git", "cat-file", "--batch"], input="".join(n + "\n" for n in names).encode(),
                              cwd=root, capture_output=True, timeout=_GIT_TIMEOUT_SECONDS, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return dict(zip(prefixes, _parse_batch(done.stdout, len(names)), strict=False))


def _parse_batch(output: bytes, count: int) -> list[bytes | None]:
    """`git cat-file --batch` answers: `<oid> <type> <size>\\n<bytes>\\n`, or `<name> missing\\n`."""
    blobs: list[bytes | None] = []
    position = 0
    for _ in range(count):
        end = output.find(b"\n", position)
        if end < 0:
            break
        header = output[position:end].split()
        position = end + 1
        if len(header) == 3 and header[1] in (b"blob", b"commit", b"tree", b"tag") and header[2].isdigit():
            size = int(header[2])
            blobs.append(output[position : position + size] if header[1] == b"blob" else None)
            position += size + 1
        else:
            blobs.append(None)  # missing or ambiguous: git holds no such version
    return blobs
