"""Which engine keeps a vault's generations: the config's index block says (`IndexConfig.on_server`)."""

from memvault.indexer.maintenance.local_generations import LocalGenerations
from memvault.indexer.maintenance.server_generations import ServerGenerations


def engine_class(config) -> type:
    """`LocalGenerations` for `.index/`, `ServerGenerations` for an index server."""
    return ServerGenerations if config.index.on_server else LocalGenerations


def open_generations(layout, config, **parts):
    """The store's `backend.base.IndexGenerations` (`parts`: its locks and its `apply`)."""
    return engine_class(config)(layout, config, **parts)


def index_for_reader(store):
    """The serving generation for a reader beside the store (the web pages): the vault's own
    files opened afresh (never the store's, whose commits it would race), or, on a server, the
    store's own; None when there is none (an owner's client keeps no index)."""
    if engine_class(store.config).files_on_this_machine:
        return LocalGenerations.open_current(store.layout)
    return store.serving_index()
