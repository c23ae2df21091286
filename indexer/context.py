"""The passage the vector index embeds for a memory: its own words, then its note context.

The memory's text counts twice so it dominates the bag of words of its neighbours. A passage is
kept as parts (own text, neighbours) so a provider that pools token embeddings by summing (the
builtin one) can embed each distinct text once and add the parts, instead of tokenizing every
text again inside each of its neighbours' passages.
"""

from vault.records import MemoryRecord

#: how many times a memory's own text counts in its passage
OWN_WEIGHT = 2


def passage(record: MemoryRecord) -> str:
    """The passage as one text, for providers that embed text (HTTP models, e5)."""
    return " ".join([record.text] * OWN_WEIGHT + list(record.neighbours)).strip()


def passage_parts(record: MemoryRecord) -> tuple[str, tuple[str, ...]]:
    return record.text, record.neighbours
