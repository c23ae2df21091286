"""Derived state and read paths over a vault, and the engine that wires them (`MemoryStore`).

Groups, top to bottom; a group imports only from the groups below it (a test enforces it):
`runtime/` (hot memory, documents, memory spaces) → `engine/` (`MemoryStore`) → `services/`
(intake worker, capture, chat models) → `journal/` → `maintenance/` (sync, generations, watch,
health, consolidation, vector upkeep) → `search/` (BM25, vectors, embeddings, fusion, coverage,
the auto gate). `results.py` is plain data every group may use.
"""
