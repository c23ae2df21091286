"""`memvault --remote NAME mcp`: MemoryRecall, MemoryJournal and Remember of a vault on the index
server, for an agent on any machine. The same tools, schemas, argument checks and error shapes as
`memvault mcp` (cli/mcp_tools.py), over a ConnectedStore instead of a vault folder; no runtime
tools and no Wake (those live in the vault's files)."""

from __future__ import annotations

import signal
import sys
import threading

from memvault.cli.mcp_server import _run, _terminate
from memvault.cli.mcp_tools import JOURNAL, RECALL, REMEMBER, VaultSession, describe
from memvault.vault.errors import VaultError
from memvault.vault.runtime.wake import ROUTING_GUIDANCE, RUNTIME_MEMORY_PROTOCOL


class RemoteSession(VaultSession):
    def __init__(self, name: str, env: dict):
        super().__init__(None, env, None)
        self.name = name

    def _prepare(self) -> None:
        from memvault.indexer.engine.connected import ConnectedStore

        try:
            self.store = ConnectedStore.connect(self.name, env=self._env)
        except VaultError as exc:  # keep serving: recall says why it is degraded, the rest are tool errors
            self.problem = f"memory is unavailable: {exc}"
            self.notes.append(self.problem)

    def offered_tools(self) -> list[str]:
        return [RECALL] if self.store is None else [RECALL, JOURNAL, REMEMBER]

    def description(self, name: str) -> str:
        return describe(name, None)

    def writable(self) -> bool:
        return self.store is not None

    def _fresh_store(self):
        return self.store  # every read asks the server: nothing to sync

    def protocol_text(self) -> str:

        self.wait_ready()
        return RUNTIME_MEMORY_PROTOCOL + "\n" + ROUTING_GUIDANCE


def serve_remote(name: str, env: dict) -> None:

    session = RemoteSession(name, env)

    def prepare() -> None:
        session.prepare()
        for note in session.notes:
            print(f"memvault mcp: {note}", file=sys.stderr, flush=True)

    threading.Thread(target=prepare, name="memvault-mcp-prepare", daemon=True).start()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: _terminate(session))
    try:
        _run(session)
    finally:
        session.close()
