"""What two versions of a sequence share, found at C speed: a day's note of 20,000 memories and
the records and rows made of it are compared by slices (one C comparison each), never item by item.

The parse of a note takes the memories below a change up again as the same objects
(vault/note_reparse.py), so the records made of them (vault/records.py) and the rows made of
those (indexer/maintenance/sync.py) are found again here by identity, and only what changed is
made or written again.
"""


def common_prefix(old: tuple, new: tuple) -> int:
    """How many leading items two tuples share, by halving: each step is one C comparison of
    slices (an item identical in both compares equal without a call)."""
    limit = min(len(old), len(new))
    if old[:limit] == new[:limit]:
        return limit
    low, high = 0, limit  # old[:low] == new[:low] and old[:high] != new[:high]: halve (tuple == is C)
    while high - low > 1:
        middle = (low + high) // 2
        if old[low:middle] == new[low:middle]:
            low = middle
        else:
            high = middle
    return low


def common_suffix(old: tuple, new: tuple, prefix: int = 0) -> int:
    """How many trailing items two tuples share beyond the `prefix` leading ones they share, by
    halving as `common_prefix` does."""
    limit, old_end, new_end = min(len(old), len(new)) - prefix, len(old), len(new)
    if limit <= 0:
        return 0
    if old[old_end - limit :] == new[new_end - limit :]:
        return limit
    low, high = 0, limit  # the last `low` items are shared, the last `high` are not
    while high - low > 1:
        middle = (low + high) // 2
        if old[old_end - middle : old_end - low] == new[new_end - middle : new_end - low]:
            low = middle
        else:
            high = middle
    return low


def shared_runs(old: tuple, new: tuple) -> list[tuple[int, int, int]]:
    """The runs of items that `new` holds as `old` held them (the same objects, in the same
    order): (where in `old`, where in `new`, how many), in `new`'s order, none empty. The runs at
    the start and the end are found by halving; between them, each item of `new` outside a run
    costs a look-up, and each run costs the comparisons that measure it."""
    shared = common_prefix(old, new)
    suffix = common_suffix(old, new, shared)
    old_end, new_end = len(old) - suffix, len(new) - suffix
    runs = [(0, 0, shared)] if shared else []
    if shared < old_end and shared < new_end:
        where = {id(item): at for at, item in enumerate(old[shared:old_end], shared)}
        at = shared
        while at < new_end:
            found = where.get(id(new[at]))
            if found is None:
                at += 1
                continue
            length = _run_length(old, found, new, at, min(old_end - found, new_end - at))
            runs.append((found, at, length))
            at += length
    if suffix:
        runs.append((old_end, new_end, suffix))
    return runs


def _run_length(old: tuple, at: int, new: tuple, start: int, limit: int) -> int:
    """How many items from old[at] on are new's from new[start] on (old[at] is new[start]), up to
    `limit`: steps that double while the slices are equal, then halving within the last."""
    length, step = 1, 1
    while length < limit:
        step = min(2 * step, limit - length)
        ahead_old, ahead_new = old[at + length : at + length + step], new[start + length : start + length + step]
        if ahead_old != ahead_new:
            return length + common_prefix(ahead_old, ahead_new)
        length += step
    return length
