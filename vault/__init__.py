"""The canonical vault: on-disk format and every write protocol. Imports nothing from indexer/ or cli/."""
