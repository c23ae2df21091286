"""One vault of a search across vaults, opened on a backend of its own: what the reference path
(`across_per_vault.py`) searches, and what `search_across` (across.py) opens for a vault only when
recall asks for something its batch did not fetch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from memvault.indexer.backend import open_backend
from memvault.vault.config import IndexConfig
from memvault.vault.layout import VaultLayout

if TYPE_CHECKING:
    from memvault.indexer.maintenance.server_index import ServerIndex, ServerVectors

#: a vault searched across has no folder here: only rows are read, never file states
_NO_FOLDER = Path("/nonexistent-memvault-vault")


def embedder_for(embedding: dict, cache: dict):
    """() -> the provider of a stored embedding identity, made once per identity in `cache`."""
    key = (embedding["provider"], embedding["model"], int(embedding["dim"]))

    def embedder():
        if key not in cache:
            from memvault.indexer.search.embeddings import make_provider

            cache[key] = make_provider(*key, None)
        return cache[key]

    return embedder


def vault_index(backend) -> tuple[ServerIndex, ServerVectors | None]:
    """A vault's serving generation and its vector list, as its own recall reads them."""
    from memvault.indexer.maintenance.server_index import ServerIndex, ServerVectors  # only when a vault is opened

    number = backend.serving_generation()
    embedding = backend.generation_embedding(number)
    embedder = None if embedding is None else embedder_for(embedding, {})
    index = ServerIndex(backend, number, VaultLayout(_NO_FOLDER), embedder, file_states=False)
    vectors = None
    if embedder is not None:
        vectors = ServerVectors(embedder)
        vectors.attach_serving(index)
    return index, vectors


def open_vault_index(name: str, dsn: str, like: IndexConfig | None):
    """`vault_index` of a vault opened on a backend of its own (close `index.backend` after)."""
    backend = open_backend(IndexConfig.server(name, dsn, like=like), create=False)
    try:
        return vault_index(backend)
    except BaseException:
        backend.close()
        raise
