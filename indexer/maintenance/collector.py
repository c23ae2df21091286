"""CPython's cycle collector, set for a resident owner (`memvault serve`, `memvault watch`).

Nearly everything the owner keeps is acyclic and freed by reference counting the moment it is
dropped: parsed notes, records, rows, pending writes. The cycle collector is there for the rare
cycle, but a full collection walks every object the process tracks, with the interpreter lock
held: with a day's note of 20,000 memories cached (a Bullet, a record and their dicts each), a
full collection took 70-120 ms and found nothing to free. At CPython's default thresholds a
person saving that note every second (each save allocates new copies of the memories it moved)
set one off every second or so: 29 in a 20 s run, 2.7 s of stopped owner, every client waiting.

So the owner freezes what it made while starting (modules, configuration, the embedding model's
tables: never garbage) and collects young objects every `YOUNG_ALLOCATIONS` allocations instead
of every 700, which makes collections of the middle and old generations rarer by as much (old
ones also wait, as CPython has them wait, until a quarter of the old objects are new). Cycles
are still collected, later; the idle watcher collects fully once the vault has been quiet
(`collect_while_idle`), when nobody waits.
"""

import gc

#: allocations (less deallocations) between two collections of the youngest generation
YOUNG_ALLOCATIONS = 50_000
#: young collections between two of the middle generation, and those between two of the oldest
MIDDLE_EVERY = 20
OLD_EVERY = 100


def settle_for_a_resident_owner() -> None:
    """Freeze what start-up made and space collections out (see the module docstring)."""
    gc.collect()  # what start-up dropped is not frozen
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, MIDDLE_EVERY, OLD_EVERY)


def collect_while_idle() -> None:
    """A full collection at a quiet moment: the cycles the spaced-out collections left."""
    gc.collect()
