"""LayeredSet (vault/layered_set.py): a set of ids a day's note parse extends without copying."""

from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.vault.layered_set import LayeredSet

ids = st.text(alphabet="abcdef", min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["or", "difference"]), st.sets(ids, max_size=90)), max_size=40))
def test_it_answers_as_a_frozenset_would_after_any_unions_and_differences(steps):
    layered, plain = LayeredSet(), frozenset()
    for operation, items in steps:
        if operation == "or":
            layered, plain = layered | items, plain | items
        else:
            layered, plain = layered.difference(items), plain.difference(items)
        assert layered == plain and len(layered) == len(plain) and sorted(layered) == sorted(plain)
        assert all(item in layered for item in plain)
        assert not any(item in layered for item in {"zz", "q"} | (items - plain))


def test_growing_one_id_at_a_time_copies_each_id_a_few_times_not_the_whole_set_each_time():
    grown, copied = LayeredSet([f"m-{n}" for n in range(1000)]), 0
    for n in range(1000, 13000):
        grown = grown | {f"m-{n}"}
        copied += len(grown._layers[-1])  # the one layer each addition makes
        assert len(grown._layers) <= 15  # log2(13,000) + 1
    assert len(grown) == 13000 and "m-0" in grown and "m-12999" in grown and "m-13000" not in grown
    assert copied < 12000 * 15  # a frozenset grown by copying would have copied 84 million ids
    assert grown | {"m-5"} is grown  # nothing new: the same set


def test_a_difference_copies_only_the_layers_holding_what_leaves():
    """A person's save drops the ids of a day's note's last lines: they are in its newest, small
    layers, and the large layers below stay the very same sets (nothing of them is copied)."""
    grown = LayeredSet([f"m-{n}" for n in range(16_384)])
    for n in range(16_384, 16_400):
        grown = grown | {f"m-{n}"}
    largest = grown._layers[0]
    less = grown.difference({"m-16399", "m-16398", "absent"})
    assert less._layers[0] is largest and len(less) == 16_398 and "m-16399" not in less and "m-16397" in less
