"""Search: the read side of one index generation.

Owns Tantivy BM25 (schema, analysis, lenient queries), the hnswlib vector index and its id map,
the embedding providers (builtin wordllama, e5-small, HTTP), evidence-weighted fusion, question
coverage, query routing, the auto-mode gate with its direct-fact parser, the supersession
filter, one-hop graph expansion and access telemetry. It reads generations; it never builds,
swaps or repairs them (that is `maintenance/`).
"""
