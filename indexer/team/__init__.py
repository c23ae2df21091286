"""A team's shared memory on the index server: agents on any machine admit completed turns and
remember facts over the network (the fingerprint LRU, `lru.py`), the vault's owner drains them
into its files (`drain.py`) under one server-side owner fence per vault (`fence.py`)."""
