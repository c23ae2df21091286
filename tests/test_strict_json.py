"""The one strict JSON loader every document memvault reads back goes through."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.vault.strict_json import loads_strict, nesting_depth


@pytest.mark.parametrize("depth", [65, 1_000, 100_000])
def test_deep_nesting_is_a_value_error_not_a_recursion_error(depth):
    for opener, closer in (("[", "]"), ('{"a":', "}")):
        with pytest.raises(ValueError, match="nested deeper than 64 levels"):
            loads_strict(opener * depth + "1" + closer * depth)


def test_sixty_four_levels_still_load():
    assert loads_strict("[" * 64 + "]" * 64) == json.loads("[" * 64 + "]" * 64)


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"text": "[" * 500 + '\\"{' * 300})
    assert nesting_depth(text) == 1
    assert loads_strict(text)["text"].startswith("[[[")


@pytest.mark.parametrize("text, problem", [('{"a": 1, "a": 2}', "duplicate key 'a'"), ("[NaN]", "NaN is not JSON"),
                                            ("[-Infinity]", "-Infinity is not JSON")])  # fmt: skip
def test_refusals_name_the_problem(text, problem):
    with pytest.raises(ValueError, match=problem):
        loads_strict(text)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=20))  # fmt: skip
def test_nesting_depth_matches_the_structure(value):
    def depth(v):
        if isinstance(v, (list, dict)):
            children = v.values() if isinstance(v, dict) else v
            return 1 + max((depth(c) for c in children), default=0)
        return 0

    assert nesting_depth(json.dumps(value)) == depth(value)
    assert loads_strict(json.dumps(value)) == value
