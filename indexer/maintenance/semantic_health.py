"""Health of the second vector list (memory.extraEmbeddings): present, of the configured model,
loadable, and (strict) one current vector per curated row, as the first list is checked.

A missing or unreadable `vectors-extra/` does not stop recall (it fuses the lists it has and
says `degraded`), but the answer is not what the config asks for, so health reports it as an
error with the one fix, `memvault rebuild` (which builds both lists).
"""

from collections.abc import Iterable

from memvault.indexer.maintenance.health_checks import ERROR, REBUILD, Finding, HealthContext
from memvault.vault.errors import VaultError


def check_extra_vectors(ctx: HealthContext) -> Iterable[Finding]:
    extra = getattr(ctx.config.memory, "extra_embeddings", None)
    if ctx.index is None or extra is None or ctx.config.memory.mode == "lite":
        return
    if not getattr(ctx.index, "has_local_vectors", True):  # a server's rows carry one model's vectors
        return
    from memvault.indexer.maintenance.semantic import EXTRA_FOLDER, coverage_findings  # numpy: only vaults that embed
    from memvault.indexer.search.embeddings import EmbeddingIdentity
    from memvault.indexer.search.vectors import VectorIndex, read_identity

    identity = EmbeddingIdentity(extra.provider, extra.model, extra.dim)
    folder = ctx.index.generation / EXTRA_FOLDER
    subject = str(folder.relative_to(ctx.layout.root)) + "/"
    if not folder.is_dir():
        if ctx.index.bm25.count_kind("curated"):
            yield Finding(
                "extra_vectors",
                ERROR,
                "extra_vectors_missing",
                subject,
                f"{subject} is missing (memory.extraEmbeddings was added after the last rebuild?): "
                f"recall runs without the {extra.provider} list",
                REBUILD,
            )
        return
    built = read_identity(folder)
    if built != identity:
        shown = "none" if built is None else built.describe()
        yield Finding(
            "extra_vectors",
            ERROR,
            "extra_vector_meta_mismatch",
            subject,
            f"the extra vectors were built with {shown} but memory.extraEmbeddings says {identity.describe()}",
            REBUILD,
        )
        return
    try:
        VectorIndex.open(folder, identity)
    except (VaultError, OSError) as exc:
        yield Finding(
            "extra_vectors",
            ERROR,
            "extra_vectors_unreadable",
            subject,
            f"the {extra.provider} vector index cannot be loaded, so recall runs without it ({exc})",
            REBUILD,
        )
        return
    if ctx.strict:
        for code, key, message in coverage_findings(ctx.index.generation, identity, ctx.index.all_rows(), EXTRA_FOLDER):
            yield Finding("extra_vectors", ERROR, f"extra_{code}", key, message, REBUILD)
