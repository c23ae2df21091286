"""vault/sequences.py: what two versions of a note's memories (or records) share, found by slices."""

from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.vault.sequences import common_prefix, common_suffix, shared_runs


class Item:
    """A distinct object, equal only to itself (as a memory taken up again by a parse is)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def _check_runs(old: tuple, new: tuple) -> list[tuple[int, int, int]]:
    runs = shared_runs(old, new)
    in_new = 0
    for old_from, new_from, count in runs:
        assert count > 0 and new_from >= in_new  # in new's order, apart
        assert all(old[old_from + k] is new[new_from + k] for k in range(count))
        in_new = new_from + count
    covered = {new_from + k for _, new_from, count in runs for k in range(count)}
    olds = {id(item) for item in old}
    assert covered == {at for at, item in enumerate(new) if id(item) in olds}  # every kept item is in a run
    return runs


# a version of a note: runs of the one before, cut, dropped, moved, and new items between them
_EDITS = st.lists(
    st.one_of(
        st.tuples(st.just("keep"), st.integers(0, 60), st.integers(1, 40)), st.tuples(st.just("new"), st.integers(1, 5))
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 80), _EDITS)
def test_the_runs_two_versions_share_are_the_same_objects_and_cover_every_kept_one(size, edits):
    old = tuple(Item(f"o{n}") for n in range(size))
    new, used = [], set()
    for edit in edits:
        if edit[0] == "new":
            new += [Item("n") for _ in range(edit[1])]
        else:
            taken = [at for at in range(edit[1], min(edit[1] + edit[2], size)) if at not in used]
            used.update(taken)
            new += [old[at] for at in taken]
    _check_runs(old, tuple(new))


def test_a_line_added_at_the_top_after_an_append_leaves_two_runs_found_without_a_walk():
    """The case the note's records meet: records made of version A; an agent appends two lines (B,
    no records made); the person adds a line at the top (C). A's memories are one run of C's."""
    a = tuple(Item(f"m{n}") for n in range(20_000))
    c = (Item("top"), *a, Item("appended 1"), Item("appended 2"))
    assert _check_runs(a, c) == [(0, 1, 20_000)]


def test_prefix_and_suffix_by_halving():
    old, new = (1, 2, 3, 4, 5), (1, 2, 9, 4, 5)
    assert common_prefix(old, new) == 2 and common_suffix(old, new, 2) == 2
    assert common_suffix((1, 2), (1, 2), 2) == 0  # what the prefix holds is not counted twice
    assert shared_runs((), (1,)) == [] and shared_runs((1,), ()) == []
