"""memvault: a filesystem-first memory vault for AI agents.

The public Python API is `from memvault import MemoryStore`. The project's three layers live
in the repository's top-level folders and install beneath this package (see pyproject's
`package-dir`): `vault/` as `memvault.vault` (the canonical format and every write protocol),
`indexer/` as `memvault.indexer` (derived state, read paths and the engine), and `cli/` as
`memvault.cli` (the command line and the MCP server). Names resolve lazily, so importing
`memvault` stays cheap.
"""

__all__ = ["MemoryStore", "RuntimeService", "VaultError"]


def __getattr__(name: str):
    if name == "MemoryStore":
        from memvault.indexer.engine.store import MemoryStore

        return MemoryStore
    if name == "RuntimeService":
        from memvault.indexer.runtime.service import RuntimeService

        return RuntimeService
    if name == "VaultError":
        from memvault.vault.errors import VaultError

        return VaultError
    raise AttributeError(f"module 'memvault' has no attribute {name!r}")
