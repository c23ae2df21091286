"""Health of an index that lives on a server: the connection, the versions, the vectors.

The file checks of `health.py` run on the server's generation as they do on `.index/` (which
notes changed since the server saw them: that is what lags after an outage); these findings
come first and say whether the server can be used at all, and how to fix it.
"""

from collections.abc import Callable

from memvault.indexer.backend import check_server, server_versions_of
from memvault.indexer.maintenance.health import ERROR, REBUILD, WARNING, Finding
from memvault.vault.errors import VaultError, VaultLocked
from memvault.vault.locks import VaultLock

SERVER_FIX = ("start the index server, or point MEMVAULT_INDEX_DSN (or a libpq service) at a PostgreSQL 16+ "
              "with pgvector 0.8+ (docs/team.md)")  # fmt: skip


def server_findings(
    index_config, open_index: Callable[[], object], *, strict: bool = False
) -> tuple[list[Finding], object | None]:
    """(findings, the serving generation or None when it cannot be read). `strict` names each
    curated row without a vector, as the local engine's strict vector check does."""
    subject = f"index server ({index_config.backend}, vault {index_config.name})"
    problems = check_server(index_config)
    if problems:
        return [Finding("server", ERROR, "server_unusable", subject, problem, SERVER_FIX) for problem in problems], None
    try:
        index = open_index()
    except VaultError as exc:
        return [Finding("server", ERROR, "index_unavailable", subject, str(exc), REBUILD)], None
    findings = []
    try:  # shown beside the counts: which server the figures come from
        index.server_details = {**server_versions_of(index_config), "vault": index_config.name,
                                "generation": index.number}  # fmt: skip
    except VaultError:
        pass
    counts = index.backend.counts(index.number)
    # never a lag on a server (a row's vector is in its commit): a fault, where the config wants
    # vectors at all (as the local vector checks: without a model, recall never reads them)
    if counts.without_vector and index.embedder is not None:
        findings.append(Finding("vector_index", ERROR, "vectors_missing", subject,
                                f"{counts.without_vector} curated row(s) on the server have no vector: recall "
                                "finds them by BM25 alone", REBUILD))  # fmt: skip
        if strict:
            findings += [Finding("vector_rows", ERROR, "missing_vector", key, f"{key} has no vector", REBUILD)
                         for key in index.backend.keys_without_vector(index.number)]  # fmt: skip
    findings += _stray_generations(index)
    return findings, index


def _stray_generations(index) -> list[Finding]:
    """Generations a killed or failed rebuild left on the server beside the serving one (the next
    rebuild drops them), as `.index/gen-*` folders locally; none while a rebuild is building one."""
    from memvault.indexer.maintenance.server_index import generation_name

    strays = index.backend.stray_generations()
    if not strays:
        return []
    try:
        with VaultLock(index.layout.root, name="rebuild", timeout=0):
            pass
    except VaultLocked:
        return []  # a rebuild is building one of them
    return [Finding("generations", WARNING, "stray_generation", generation_name(index.backend, number),
                    f"generation {number} of vault {index.backend.vault!r} on the index server is left over from an "
                    "interrupted rebuild", REBUILD) for number in strays]  # fmt: skip
