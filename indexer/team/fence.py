"""One owner per vault across machines: the server-side fence beside the local one.

The local fence (vault/locks.py) keeps a second owner off this machine; two copies of a vault
folder on two machines naming the same index would each take their own. The server fence is a
lock on the vault's fence view, which only the role owning memvault's tables may take, held by a
transaction its own connection keeps open for the owner's lifetime (backend/postgres/team.py,
`OwnerLock`): the server frees it when the session ends (a stopped owner, a SIGKILL, a machine
gone once TCP keepalive gives up), and a second owner is refused with the first one's host and
pid. No agent's role can take it (it was a session advisory lock, which any role can take).
"""

from __future__ import annotations

import os
import socket

from memvault.indexer.backend import owner_lock


class ServerFence:
    def __init__(self, dsn: str, vault: str):
        self.vault = vault
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self._lock = owner_lock(dsn, vault)

    def hold(self) -> None:
        """Take the vault's owner lock, or VaultLocked naming its holder (host, pid)."""
        self._lock.acquire(self.host, self.pid)

    def held(self) -> bool:
        return self._lock.held()

    def release(self) -> None:
        self._lock.release()
