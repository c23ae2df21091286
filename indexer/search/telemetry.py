"""Access telemetry: when each memory was last recalled, and how often.

Telemetry only: it is never read by ranking (recall's order depends on the files and the query
alone, which a test checks), never shown to a model, and never part of canonical state. It
lives in `.index/access.json`, outside the generations so a rebuild keeps it; deleting `.index/`
forgets it, as it should. Counts accumulate in memory and are merged into the file under its own
lock on `flush()` (the store flushes on close), so recall never waits on a write. The file is
bounded: past `MAX_ENTRIES` the least recently accessed entries are dropped.
"""

import json
import threading
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from memvault.vault.errors import VaultError
from memvault.vault.fsio import MACHINE_DIR_MODE, atomic_write, make_dir
from memvault.vault.locks import VaultLock

FILE = "access.json"
MAX_ENTRIES = 100_000


class AccessLog:
    def __init__(self, vault_root: Path, index_dir: Path):
        self._root = vault_root
        self._path = index_dir / FILE
        self._pending: dict[str, tuple[int, str]] = {}
        self._guard = threading.Lock()

    def record(self, keys: Iterable[str], at: datetime) -> None:
        stamp = at.isoformat()
        with self._guard:
            for key in keys:
                count, _ = self._pending.get(key, (0, stamp))
                self._pending[key] = (count + 1, stamp)

    def flush(self) -> None:
        """Merge pending counts into the file. Best effort: telemetry never fails a caller."""
        with self._guard:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            with VaultLock(self._root, name="telemetry", timeout=2.0):
                merged = self.read()
                for key, (count, last) in pending.items():
                    old = merged.get(key, {"count": 0, "last": last})
                    merged[key] = {"count": old["count"] + count, "last": max(old["last"], last)}
                if len(merged) > MAX_ENTRIES:
                    newest = sorted(merged.items(), key=lambda item: item[1]["last"], reverse=True)
                    merged = dict(newest[:MAX_ENTRIES])
                make_dir(self._path.parent, MACHINE_DIR_MODE, parents=True)
                body = json.dumps(merged, sort_keys=True, separators=(",", ":")) + "\n"
                atomic_write(self._path, body.encode("utf-8"), mode=0o600)
        except (OSError, VaultError):  # a lost count is acceptable; a failed recall or close is not
            return

    def read(self) -> dict[str, dict]:
        """Every entry on disk: `{row key: {"count": n, "last": ISO-8601}}` (empty if none or unreadable)."""
        try:
            body = json.loads(self._path.read_bytes())
        except (OSError, ValueError):
            return {}
        if not isinstance(body, dict):
            return {}
        return {
            k: v
            for k, v in body.items()
            if isinstance(v, dict) and isinstance(v.get("count"), int) and isinstance(v.get("last"), str)
        }
