"""Become the vault's owner when none runs, or its client when one does: the choice a long-running
host makes at start (the MCP server; `watch` and `serve` insist on owning instead).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memvault.indexer.engine.client import find_owner
from memvault.indexer.engine.owner import Log, Owner
from memvault.indexer.engine.remote import RemoteStore
from memvault.vault.errors import VaultLocked
from memvault.vault.storage_errors import is_read_only

#: how long a host that lost the race for the fence waits for the winner's socket to answer
_RACE_WAIT_SECONDS = 10.0


@dataclass
class Attached:
    store: object  # MemoryStore (owner) or RemoteStore (client)
    owner: Owner | None
    note: str | None = None  # what the operator should know (serving without owning, …)

    def close(self) -> None:
        if self.owner is not None:
            self.owner.stop()
        self.store.close()


def owner_or_client(
    root: Path, env: Mapping[str, str], *, role: str, log: Log | None = None, calls_lock: threading.Lock | None = None
) -> Attached:
    """A client of the live owner, else this process as the owner (store opened and synced).

    Raises the store's VaultError when the vault cannot be opened in-process.
    """
    remote = _client(root, env)
    if remote is not None:
        return Attached(remote, None)
    from memvault.indexer.engine.store import MemoryStore

    store = MemoryStore.open(root, env=env, sync=True, engine=False)
    if is_read_only(root):  # nothing to own: no fence, socket or intake can be written here
        return Attached(store, None, note="the vault is read-only: serving reads without owning it")
    owner = Owner(store, role=role, log=log, calls_lock=calls_lock)
    try:
        owner.start()
        return Attached(store, owner)
    except VaultLocked as exc:
        # another host won the race (its socket answers soon), or a process that does not
        # serve holds the fence (a short `admit` drain, `import`): wait for an owner to appear
        deadline = time.monotonic() + _RACE_WAIT_SECONDS
        while time.monotonic() < deadline:
            remote = _client(root, env)
            if remote is not None:
                store.close()
                return Attached(remote, None)
            time.sleep(0.2)
        return Attached(store, None, note=f"serving without owning the vault: {exc}")


def _client(root: Path, env: Mapping[str, str]) -> RemoteStore | None:
    owner = find_owner(root)  # EngineStuck propagates: never a second writer beside a silent owner
    if owner is None or owner.is_this_process:
        return None
    return RemoteStore(root, owner, env)
