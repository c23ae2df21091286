"""The passage the vector index embeds for a memory: its own words, then its note context.

The memory's text counts twice so it dominates the bag of words of its neighbours. A provider
that pools token embeddings by summing (the builtin one) builds the same passage from parts
instead (`memvault.indexer.maintenance.semantic.embed_passages`), embedding each distinct text once.
"""

from memvault.vault.records import MemoryRecord

#: how many times a memory's own text counts in its passage
OWN_WEIGHT = 2


def passage(record: MemoryRecord) -> str:
    """The passage as one text, for providers that embed text (HTTP models, e5)."""
    return " ".join([record.text] * OWN_WEIGHT + list(record.neighbours)).strip()
