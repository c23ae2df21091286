"""Maintenance: keeping derived state in step with the canonical files.

Owns index generations and their atomic swap, full rebuilds and incremental sync, the watcher,
the semantic (vector) queue and catch-up, the replay sidecar's index side, consolidation of
`index.md`, and `health`, which compares what is derived with what the files say.
"""
