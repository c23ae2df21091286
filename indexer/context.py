"""The passage the vector index embeds for a memory: its own words, then its note context.

The memory's text appears twice so it dominates the bag of words of its neighbours.
"""

from vault.records import MemoryRecord


def passage(record: MemoryRecord) -> str:
    return f"{record.text} {record.text} {record.context}".strip()
