"""Derived state and read paths over a vault; the engine is `MemoryStore`.

`from indexer import MemoryStore` is the public entry point; it is imported lazily so that
importing a submodule stays cheap.
"""

__all__ = ["MemoryStore"]


def __getattr__(name: str):
    if name == "MemoryStore":
        from indexer.store import MemoryStore

        return MemoryStore
    raise AttributeError(name)
