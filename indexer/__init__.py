"""Derived state and read paths over a vault; the engine is `MemoryStore`."""
