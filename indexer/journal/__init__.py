"""MemoryJournal: date-range retrospectives over the curated index.

Owns the calendar range (inclusive local dates in an IANA zone → a half-open UTC interval), the
query over the serving generation, and frozen snapshots paged by authenticated cursors.
"""
