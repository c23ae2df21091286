"""memvault: a filesystem-first memory vault for AI agents.

The public Python API is `from memvault import MemoryStore`. The project's three layers live
in the repository's top-level folders and install beneath this package (see pyproject's
`package-dir`): `vault/` as `memvault.vault` (the canonical format and every write protocol),
`indexer/` as `memvault.indexer` (derived state, read paths and the engine), and `cli/` as
`memvault.cli` (the command line and the MCP server). Names resolve lazily, so importing
`memvault` stays cheap.
"""

from memvault.vault.errors import VaultError

__all__ = ["MemoryStore", "RuntimeService", "VaultError", "search_across"]


def __getattr__(name: str):
    if name == "MemoryStore":
        from memvault.indexer.engine.store import MemoryStore

        return MemoryStore
    if name == "RuntimeService":
        from memvault.indexer.runtime.service import RuntimeService

        return RuntimeService
    if name == "search_across":  # a team's vaults on one index server (docs/team.md)
        from memvault.indexer.engine.across import search_across

        return search_across
    if name == "__version__":  # the installed distribution's version, read only when asked
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("memvault")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'memvault' has no attribute {name!r}")
