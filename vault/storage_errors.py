"""The file system's refusals as typed errors that name the path and the fix.

    with storage_errors(root):
        write_fact(...)          # ENOSPC -> StorageFull("no space left ... on /v/daily/...: free space ...")

Only the refusals a person can act on are translated (read-only, full, quota, permission);
any other OSError is a bug or damage and keeps its own type and traceback for the report.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from memvault.vault.errors import ReadOnlyVault, StorageError, StorageFull, StoragePermission

_F = TypeVar("_F", bound=Callable)

READ_ONLY_ERRNOS = frozenset({errno.EROFS})
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
PERMISSION_ERRNOS = frozenset({errno.EACCES, errno.EPERM})


def storage_error(exc: OSError, root: Path | str | None = None) -> StorageError | None:
    """The typed error for `exc`, or None when it is not a refusal a person can fix."""
    path = exc.filename or root or "the vault"
    where = f" (vault {root})" if root is not None and str(root) != str(path) else ""
    if exc.errno in READ_ONLY_ERRNOS:
        return ReadOnlyVault(
            f"the vault is read-only: {path}{where} cannot be written, so nothing was written. "
            "Reads (search, journal, health) still work; to write, remount it writable or copy the vault."
        )
    if exc.errno in FULL_ERRNOS:
        return StorageFull(
            f"No space left on the device holding {path}{where}; nothing was written (a partial temp file "
            "was removed). Free some space (`df -h`), then retry."
        )
    if exc.errno in PERMISSION_ERRNOS:
        return StoragePermission(
            f"Permission denied writing {path}{where}; nothing was written. Run memvault as the vault's owner, "
            "or fix the ownership (`chown -R $USER`) or mode of that path."
        )
    return None


@contextmanager
def storage_errors(root: Path | str | None = None) -> Iterator[None]:
    """Re-raise the file system's actionable refusals inside the block as StorageError."""
    try:
        yield
    except OSError as exc:
        typed = storage_error(exc, root)
        if typed is None:
            raise
        raise typed from exc


def translates_storage_errors(method: _F) -> _F:
    """`storage_errors` around a method of an object with a `layout.root` (the store)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with storage_errors(getattr(getattr(self, "layout", None), "root", None)):
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def is_read_only(root: Path) -> bool:
    """True when this process cannot write the vault folder (a read-only mount, or no permission)."""
    return not os.access(root, os.W_OK)
