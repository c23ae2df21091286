"""One schema, two uses: every answer the strict parsers accept is valid under the JSON Schema
sent to the model (checked with the `jsonschema` package, independent of our code).

The generators below are written by hand from the documented grammar (not from the shape
module), produce mostly acceptable answers, and mutate them (a field dropped or added, a type
changed, a bound crossed); whatever the parser accepts must validate. The rules the schema
cannot express are listed in `vault/capture/schema.py` and checked by the parser tests.
"""

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memvault.vault.capture.extraction import EXTRACTION_OUTPUT, parse_extraction
from memvault.vault.capture.fields import ModelOutputInvalid
from memvault.vault.capture.reconcile import parse_reconciliation, reconciliation_output

SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
WORDS = [
    "Morgan",
    "Atlas",
    "launch",
    "blue",
    "moved",
    "is",
    "on",
    "March",
    "15.",
    "the",
    "team",
    "chose",
    "ü",
    "日本",
    '"q"',
    "\\",
    "x" * 60,
]
TYPES = ["person", "project", "organization", "concept", "place", "tool", "event", "time", "human"]


def sentence(max_words=12):
    return st.lists(st.sampled_from(WORDS), min_size=0, max_size=max_words).map(" ".join)


def refs():
    return st.sampled_from(["e1", "e2", "e3", "e4", "e10", "e99", "e0", "E1", "e100"])


def salience():
    return st.one_of(st.floats(-0.5, 1.5, allow_nan=False), st.sampled_from([0, 1, 0.5, True, "0.5"]))


@st.composite
def extraction_answers(draw):
    entities = draw(
        st.lists(
            st.fixed_dictionaries({"ref": refs(), "name": sentence(3), "type": st.sampled_from(TYPES)}), max_size=5
        )
    )
    declared = [e["ref"] for e in entities] or ["e1"]
    memories = draw(st.lists(st.fixed_dictionaries({
        "text": sentence(), "salience": salience(), "entities": st.lists(st.sampled_from(declared), max_size=3)}),
        max_size=9))  # fmt: skip
    relations = draw(st.lists(st.fixed_dictionaries({
        "from": st.sampled_from(declared), "relation": st.sampled_from(["works_on", "owns", "Leads", "x"]),
        "to": st.sampled_from(declared)}), max_size=3))  # fmt: skip
    return {"memories": memories, "entities": entities, "relations": relations}


def mutations(value):
    """A few structural changes of one answer (the parser must refuse what the schema refuses)."""
    return st.sampled_from(["none", "drop", "add", "retype", "wrap"]).map(lambda kind: _mutate(value, kind))


def _mutate(value, kind):
    value = json.loads(json.dumps(value))
    if kind == "drop" and value:
        value.pop(sorted(value)[0])
    elif kind == "add":
        value["confidence"] = 0.9
    elif kind == "retype":
        value[sorted(value)[-1]] = {}
    elif kind == "wrap":
        return [value]
    return value


def accepted(parse, value) -> bool:
    try:
        parse(json.dumps(value, ensure_ascii=False))
    except ModelOutputInvalid:
        return False
    return True


@pytest.mark.slow
@SETTINGS
@given(extraction_answers())
def test_every_accepted_extraction_is_valid_under_the_schema(answer):
    assume(accepted(parse_extraction, answer))  # most generated answers pass; hypothesis fails if too few do
    jsonschema.validate(answer, EXTRACTION_OUTPUT.schema, cls=jsonschema.Draft202012Validator)


@SETTINGS
@given(extraction_answers().flatmap(mutations))
def test_a_mutated_extraction_the_parser_accepts_is_still_valid(answer):
    if accepted(parse_extraction, answer):
        jsonschema.validate(answer, EXTRACTION_OUTPUT.schema, cls=jsonschema.Draft202012Validator)


OFFERED = {0: ["m-1111111111", "f-2222222222"], 2: ["d-3333333333"]}
TARGETS = ["m-1111111111", "f-2222222222", "d-3333333333", "m-9999999999"]


@st.composite
def reconciliation_answers(draw):
    decisions = []
    for index in draw(st.lists(st.sampled_from([0, 1, 2, "0"]), min_size=1, max_size=3)):
        action = draw(st.sampled_from(["ADD", "NOOP", "UPDATE", "SUPERSEDE", "add"]))
        decision = {"index": index, "action": action}
        if action != "ADD" or draw(st.booleans()) and draw(st.booleans()):
            decision["target"] = draw(st.sampled_from(TARGETS))
        if action in ("UPDATE", "SUPERSEDE") or draw(st.integers(0, 9)) == 0:
            decision["text"] = draw(sentence())
        decisions.append(decision)
    return {"decisions": decisions}


@SETTINGS
@given(reconciliation_answers().flatmap(mutations))
def test_every_accepted_reconciliation_is_valid_under_the_schema(answer):
    if accepted(lambda text: parse_reconciliation(text, OFFERED), answer):
        jsonschema.validate(answer, reconciliation_output(OFFERED).schema, cls=jsonschema.Draft202012Validator)


def test_the_generators_reach_accepted_answers_of_every_action():
    # a property that is never exercised proves nothing: each action shape is accepted somewhere
    for action, extra in (("ADD", {}), ("NOOP", {"target": "d-3333333333"}),
                          ("UPDATE", {"target": "d-3333333333", "text": "Atlas moved."}),
                          ("SUPERSEDE", {"target": "d-3333333333", "text": "Atlas moved."})):  # fmt: skip
        answer = {"decisions": [{"index": 0, "action": "ADD"}, {"index": 2, "action": action, **extra}]}
        assert accepted(lambda text: parse_reconciliation(text, OFFERED), answer)
        jsonschema.validate(answer, reconciliation_output(OFFERED).schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "answer",
    [
        {"memories": [{"text": "Atlas ships.", "salience": 0.5, "entities": ["e7"]}], "entities": [], "relations": []},
        {"memories": [], "entities": [{"ref": "e1", "name": "Atlas", "type": "project"}], "relations": []},
        {
            "memories": [{"text": "Atlas ships. ^m-1f3a9c0d2e", "salience": 0.5, "entities": []}],
            "entities": [],
            "relations": [],
        },
    ],
)
def test_what_the_schema_cannot_express_the_parser_still_refuses(answer):
    # an undeclared ref, an unused entity, a forged block id: valid JSON Schema, invalid answers
    jsonschema.validate(answer, EXTRACTION_OUTPUT.schema, cls=jsonschema.Draft202012Validator)
    assert not accepted(parse_extraction, answer)


def test_the_token_cap_fits_the_longest_valid_extraction():
    # eight 500-character memories with eight refs each, 24 entities of 80 characters, 24 relations
    longest = {
        "memories": [
            {"text": f"{i}" + "y" * 499, "salience": 0.123456789, "entities": [f"e{j}" for j in range(1, 9)]}
            for i in range(8)
        ],
        "entities": [{"ref": f"e{j}", "name": f"{j:02d}" + "n" * 78, "type": "organization"} for j in range(1, 25)],
        "relations": [{"from": f"e{j}", "relation": "r" * 40, "to": f"e{j + 1}"} for j in range(1, 25)],
    }
    longest["relations"][-1]["to"] = "e1"
    text = json.dumps(longest)
    assert parse_extraction(text).memories
    assert EXTRACTION_OUTPUT.max_tokens * 3 >= len(text)  # 3 characters a token, the sizing's floor
    assert EXTRACTION_OUTPUT.max_tokens <= 8192  # and it never asks for a whole 8,192-token context
