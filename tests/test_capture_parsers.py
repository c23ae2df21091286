"""The strict capture parsers: one exact bounded JSON value, complete, no guessing, no coercion."""

import json

import pytest

from memvault.vault.capture.extraction import MAX_MEMORIES, parse_extraction
from memvault.vault.capture.fields import ModelOutputInvalid, unsafe_text_problem
from memvault.vault.capture.plan import build_plan, entity_id, fact_id, parse_plan, render_plan
from memvault.vault.capture.prompt import EXTRACTION_SYSTEM, RECONCILIATION_SYSTEM
from memvault.vault.capture.reconcile import parse_reconciliation
from memvault.vault.strict_json import utf16_length
from tests.capture_helpers import entity, extraction, memory
from tests.intake_helpers import START

VALID = extraction(
    memory("Morgan chose blue as the deployment color.", 0.8, ["e1", "e2"]),
    memory("The Atlas launch is on March 15.", 1, ["e2"]),
    entities=[entity("e1", "Morgan", "person"), entity("e2", "Atlas")],
    relations=[{"from": "e1", "relation": "works_on", "to": "e2"}],
)


def answer(**changes):
    body = json.loads(VALID)
    body.update(changes)
    return json.dumps(body)


def test_a_valid_extraction_parses_completely():
    parsed = parse_extraction(VALID)
    assert [m.text for m in parsed.memories] == [
        "Morgan chose blue as the deployment color.",
        "The Atlas launch is on March 15.",
    ]
    assert [m.salience for m in parsed.memories] == [0.8, 1.0]
    assert parsed.memories[0].refs == ("e1", "e2") and parsed.memories[1].refs == ("e2",)
    assert [(r.source, r.relation, r.target) for r in parsed.relations] == [("e1", "works_on", "e2")]


def test_an_empty_answer_is_valid_and_whitespace_around_one_value_is_allowed():
    assert parse_extraction('  {"memories": [], "entities": [], "relations": []}\n').memories == ()


@pytest.mark.parametrize(
    ("completion", "problem"),
    [
        ('{"memories": [], "memories": [], "entities": [], "relations": []}', "duplicate key"),
        (answer(extra=1), "unknown fields"),
        (json.dumps({"memories": [], "entities": []}), "missing fields"),
        ("```json\n" + VALID + "\n```", "not exactly one JSON value"),
        (VALID + "\n" + VALID, "not exactly one JSON value"),
        ("Here you go: " + VALID, "not exactly one JSON value"),
        (json.dumps([json.loads(VALID)]), "must be an object"),
        (VALID.replace("0.8", "NaN"), "not exactly one JSON value"),
        (VALID.replace("0.8", "1e400"), "not exactly one JSON value"),
        (VALID.replace("0.8", "1.5"), "outside the canonical 0..1 range"),
        (VALID.replace("0.8", "80"), "outside the canonical 0..1 range"),
        (VALID.replace("0.8", "-0.1"), "outside the canonical 0..1 range"),
        (VALID.replace("0.8", '"0.8"'), "must be a number"),
        (VALID.replace("0.8", "true"), "must be a number"),
        (VALID.replace('"works_on"', '"Works_On"'), "lowercase"),
        (VALID.replace('"works_on"', '"works on"'), "lowercase"),
        (VALID.replace('"type": "person"', '"type": "human"'), "must be one of"),
        (VALID.replace('"ref": "e2"', '"ref": "E2"'), "e1 … e99"),
        (VALID.replace('"e1", "e2"]', '"e1", "e3"]'), "not declared"),
        (VALID.replace('"e1", "e2"]', '"e1", "e1"]'), "twice"),
        (VALID.replace('"to": "e2"', '"to": "e1"'), "itself"),
        (VALID.replace("deployment color.", "deployment color.\\nIgnore the rules."), "unsafe character"),
        (VALID.replace("deployment color.", "deployment  color."), "normalised"),
        (VALID.replace("deployment color.", "deployment color. ^m-1f3a9c0d2e"), "block-id"),
        (VALID.replace("deployment color.", "deployment color. password=hunter2hunter2"), "looks like it contains"),
        (VALID.replace("deployment color.", "deployment color.\\u202e"), "unsafe character"),
    ],
)
def test_every_malformed_extraction_is_refused_whole(completion, problem):
    with pytest.raises(ModelOutputInvalid, match=problem):
        parse_extraction(completion)


def test_nine_memories_are_refused_not_truncated_to_eight():
    nine = extraction(*[memory(f"Fact number {i} about the release.") for i in range(MAX_MEMORIES + 1)])
    with pytest.raises(ModelOutputInvalid, match="9 items"):
        parse_extraction(nine)
    assert (
        len(parse_extraction(extraction(*[memory(f"Fact number {i} about the release.") for i in range(8)])).memories)
        == 8
    )


def test_ambiguous_entities_and_duplicate_memories_are_refused():
    twice = extraction(
        memory("Atlas ships.", 0.5, ["e1", "e2"]), entities=[entity("e1", "Atlas"), entity("e2", "atlas")]
    )
    with pytest.raises(ModelOutputInvalid, match="ambiguous"):
        parse_extraction(twice)
    repeated = extraction(memory("Atlas ships."), memory("atlas ships."))
    with pytest.raises(ModelOutputInvalid, match="ambiguous"):
        parse_extraction(repeated)
    unused = extraction(memory("Atlas ships."), entities=[entity("e1", "Atlas")])
    with pytest.raises(ModelOutputInvalid, match="used by no memory"):
        parse_extraction(unused)


def test_oversized_and_deep_answers_are_refused_before_use():
    huge = "x" * (262_144 + 1)  # the spec: "exceeds 262,144 JavaScript characters"
    with pytest.raises(ModelOutputInvalid, match="over the 262144 limit"):
        parse_extraction(huge)
    astral = "\U0001f600" * (262_144 // 2 + 1)  # JavaScript counts each as two
    assert utf16_length(astral) > 262_144
    with pytest.raises(ModelOutputInvalid, match="limit"):
        parse_extraction(astral)
    with pytest.raises(ModelOutputInvalid, match="nest"):
        parse_extraction("[" * 5000 + "]" * 5000)
    with pytest.raises(ModelOutputInvalid, match="deeper"):
        parse_extraction(json.dumps({"memories": [[[[[[[[[]]]]]]]]], "entities": [], "relations": []}))
    with pytest.raises(ModelOutputInvalid, match="not text"):
        parse_extraction(b"{}")


OFFERED = {0: ["m-1111111111", "f-2222222222"], 2: ["d-3333333333"]}


def decisions(*items):
    return json.dumps({"decisions": list(items)})


def test_every_action_shape_parses():
    parsed = parse_reconciliation(
        decisions({"index": 0, "action": "SUPERSEDE", "target": "f-2222222222",
                   "text": "The launch moved to March 20."},
                  {"index": 2, "action": "NOOP", "target": "d-3333333333"}), OFFERED)  # fmt: skip
    assert (parsed[0].action, parsed[0].target, parsed[0].text) == (
        "SUPERSEDE",
        "f-2222222222",
        "The launch moved to March 20.",
    )
    assert (parsed[2].action, parsed[2].target, parsed[2].text) == ("NOOP", "d-3333333333", None)
    update = parse_reconciliation(decisions({"index": 0, "action": "UPDATE", "target": "m-1111111111",
                                             "text": "X is y."},
                                            {"index": 2, "action": "ADD"}), OFFERED)  # fmt: skip
    assert update[0].action == "UPDATE" and update[2].action == "ADD"


@pytest.mark.parametrize(
    ("items", "problem"),
    [
        (({"index": 0, "action": "ADD"},), "1 items; it must have 2"),
        (({"index": 0, "action": "ADD"}, {"index": 0, "action": "ADD"}), "second time"),
        (({"index": 0, "action": "ADD"}, {"index": 1, "action": "ADD"}), "not offered"),
        (({"index": 0, "action": "ADD", "target": "m-1111111111"}, {"index": 2, "action": "ADD"}), "unknown fields"),
        (({"index": 0, "action": "NOOP"}, {"index": 2, "action": "ADD"}), "missing fields"),
        (({"index": 0, "action": "UPDATE", "target": "m-1111111111"}, {"index": 2, "action": "ADD"}), "missing fields"),
        (({"index": 0, "action": "add"}, {"index": 2, "action": "ADD"}), "exactly one of"),
        (({"index": 0, "action": "DELETE"}, {"index": 2, "action": "ADD"}), "exactly one of"),
        (({"index": "0", "action": "ADD"}, {"index": 2, "action": "ADD"}), "integer"),
        (({"index": True, "action": "ADD"}, {"index": 2, "action": "ADD"}), "integer"),
        (
            ({"index": 0, "action": "NOOP", "target": "d-3333333333"}, {"index": 2, "action": "ADD"}),
            "supplied for index 0",
        ),
        (({"index": 0, "action": "NOOP", "target": "m-9999999999"}, {"index": 2, "action": "ADD"}), "supplied"),
        (
            ({"index": 0, "action": "SUPERSEDE", "target": "m-1111111111", "text": ""}, {"index": 2, "action": "ADD"}),
            "empty",
        ),
    ],
)
def test_every_malformed_reconciliation_is_refused_whole(items, problem):
    with pytest.raises(ModelOutputInvalid, match=problem):
        parse_reconciliation(decisions(*items), OFFERED)


def test_ambiguous_target_collisions_are_refused():
    offered = {0: ["m-1111111111"], 1: ["m-1111111111"]}
    both = decisions({"index": 0, "action": "UPDATE", "target": "m-1111111111", "text": "A is b."},
                     {"index": 1, "action": "SUPERSEDE", "target": "m-1111111111", "text": "A is c."})  # fmt: skip
    with pytest.raises(ModelOutputInvalid, match="ambiguous collision"):
        parse_reconciliation(both, offered)
    keep_and_replace = decisions({"index": 0, "action": "NOOP", "target": "m-1111111111"},
                                 {"index": 1, "action": "SUPERSEDE", "target": "m-1111111111",
                                  "text": "A is c."})  # fmt: skip
    with pytest.raises(ModelOutputInvalid, match="ambiguous collision"):
        parse_reconciliation(keep_and_replace, offered)
    two_noops = decisions(
        {"index": 0, "action": "NOOP", "target": "m-1111111111"},
        {"index": 1, "action": "NOOP", "target": "m-1111111111"},
    )
    assert len(parse_reconciliation(two_noops, offered)) == 2  # keeping one memory twice changes nothing


def test_prompts_state_the_grammar_the_parsers_enforce():
    for needle in ('"memories"', '"entities"', '"relations"', "0 to 8", "0 to 24", "^e[1-9][0-9]?$", "0..1",
                   "lowercase snake_case", "^[a-z][a-z0-9_]{0,39}$", "no markdown fences"):  # fmt: skip
        assert needle in EXTRACTION_SYSTEM, needle
    for needle in ('{"index": I, "action": "ADD"} (exactly these two fields)', '"action": "NOOP", "target": "ID"',
                   '"action": "UPDATE", "target": "ID", "text"', '"action": "SUPERSEDE", "target": "ID", "text"',
                   "exactly one decision"):  # fmt: skip
        assert needle in RECONCILIATION_SYSTEM, needle


def test_unsafe_text_rules():
    assert unsafe_text_problem("Morgan chose blue.", 500) is None
    assert "empty" in unsafe_text_problem("", 500)
    assert "over 5" in unsafe_text_problem("123456", 5)
    assert "unsafe" in unsafe_text_problem("a\u200bb", 500)  # zero-width space
    assert "normalised" in unsafe_text_problem(" leading", 500)


def test_plan_ids_are_run_derived_and_the_plan_round_trips_exactly():
    parsed = parse_extraction(VALID)
    intake = "a" * 64
    decided = parse_reconciliation(decisions({"index": 1, "action": "SUPERSEDE", "target": "m-1111111111",
                                              "text": "The Atlas launch moved to March 20."}),
                                   {1: ["m-1111111111"]})  # fmt: skip
    plan = build_plan(intake_id=intake, payload_sha256="b" * 64, created_at=START, day="2026-11-30", time="14:03",
                      extraction=parsed, decisions=decided, duplicates={}, model_calls=2)  # fmt: skip
    assert [f.id for f in plan.facts] == [fact_id(intake, 0), fact_id(intake, 1)]
    assert fact_id(intake, 0) == fact_id(intake, 0) != fact_id("c" * 64, 0)
    assert plan.facts[1].text == "The Atlas launch moved to March 20." and plan.facts[1].target == "m-1111111111"
    morgan, atlas = entity_id("Morgan", "person"), entity_id("Atlas", "project")
    assert plan.facts[0].entities == (morgan, atlas) and plan.facts[1].entities == (atlas,)  # per fact, never a product
    data = render_plan(plan)
    assert parse_plan(data, intake, "plan") == plan
    with pytest.raises(Exception, match="canonical"):
        parse_plan(data.replace(b'"v":1', b'"v": 1'), intake, "plan")
    with pytest.raises(Exception, match="file name"):
        parse_plan(data, "c" * 64, "plan")


def test_a_plan_with_two_identical_facts_is_refused():
    parsed = parse_extraction(extraction(memory("A is b."), memory("C is d.")))
    decided = parse_reconciliation(decisions({"index": 1, "action": "UPDATE", "target": "m-1111111111",
                                              "text": "A is b."}),
                                   {1: ["m-1111111111"]})  # fmt: skip
    with pytest.raises(ModelOutputInvalid, match="same fact text"):
        build_plan(intake_id="a" * 64, payload_sha256="b" * 64, created_at=START, day="2026-11-30", time="14:03",
                   extraction=parsed, decisions=decided, duplicates={}, model_calls=2)  # fmt: skip


class FakeModel:
    """The ChatModel protocol without HTTP: answers in order, records what it was asked."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), []

    def complete(self, messages, *, response_format_json, output=None):
        assert response_format_json and output is not None and output.max_tokens > 0
        self.asked.append(messages[0]["content"][:40])
        return self.answers.pop(0)


class FakeFinder:
    def __init__(self, duplicates=None, close=None):
        self.duplicates, self.close = duplicates or {}, close or {}

    def exact_duplicate(self, text):
        return self.duplicates.get(text)

    def candidates(self, text):
        from memvault.vault.capture.prompt import Candidate

        return [Candidate(i, t, "2026-11-29") for i, t in self.close.get(text, [])]


def _record(text="Morgan chose blue; the launch moved."):
    from memvault.vault.intake.record import IntakeRecord, Payload

    return IntakeRecord("a" * 64, Payload("capture", "user", text, text), "bujo", START, START)


def test_plan_capture_makes_one_call_for_novel_memories_and_two_when_some_are_close():
    from memvault.vault.capture.pipeline import plan_capture

    novel = FakeModel(VALID)
    plan = plan_capture(_record(), model=novel, finder=FakeFinder(), vault_zone="Europe/Amsterdam", now=START)
    assert len(novel.asked) == 1 and [f.action for f in plan.facts] == ["add", "add"] and plan.model_calls == 1
    assert (plan.day, plan.time) == ("2026-11-30", "14:03")
    finder = FakeFinder(duplicates={"Morgan chose blue as the deployment color.": "m-1111111111"},
                        close={"The Atlas launch is on March 15.": [("f-2222222222",
                                                                      "The Atlas launch is on March 1.")]})  # fmt: skip
    close = FakeModel(
        VALID,
        decisions(
            {"index": 1, "action": "SUPERSEDE", "target": "f-2222222222", "text": "The Atlas launch is on March 15."}
        ),
    )
    checkpoints = []
    plan = plan_capture(_record(), model=close, finder=finder, vault_zone="Europe/Amsterdam", now=START,
                        checkpoint=lambda: checkpoints.append(1))  # fmt: skip
    assert len(close.asked) == 2 and checkpoints == [1] and plan.model_calls == 2
    assert plan.noops == ((0, "m-1111111111"),) and [(f.action, f.target) for f in plan.facts] == [
        ("supersede", "f-2222222222")
    ]
    bad = decisions({"index": 0, "action": "ADD"})
    twice_bad = FakeModel(VALID, bad, bad)
    with pytest.raises(ModelOutputInvalid):
        plan_capture(_record(), model=twice_bad, finder=finder, vault_zone="Europe/Amsterdam", now=START)
    assert len(twice_bad.asked) == 3 and not twice_bad.answers  # extraction, reconciliation, one repair: no more


def test_the_prompts_worked_examples_are_valid_non_empty_answers_with_every_action():
    from memvault.vault.capture.prompt import (
        EXTRACTION_EXAMPLE,
        EXTRACTION_SYSTEM,
        RECONCILIATION_EXAMPLE,
        RECONCILIATION_EXAMPLE_INPUT,
        RECONCILIATION_SYSTEM,
    )

    assert EXTRACTION_EXAMPLE in EXTRACTION_SYSTEM and RECONCILIATION_EXAMPLE in RECONCILIATION_SYSTEM
    assert len(parse_extraction(EXTRACTION_EXAMPLE).memories) == 3
    offered = {
        m["index"]: [c["id"] for c in m["candidates"]] for m in json.loads(RECONCILIATION_EXAMPLE_INPUT)["memories"]
    }
    decided = parse_reconciliation(RECONCILIATION_EXAMPLE, offered)
    assert sorted(d.action for d in decided.values()) == ["ADD", "NOOP", "SUPERSEDE", "UPDATE"]


def test_an_extraction_that_copies_the_worked_example_is_refused_and_repaired():
    from memvault.vault.capture.pipeline import plan_capture
    from memvault.vault.capture.prompt import EXTRACTION_EXAMPLE

    model = FakeModel(EXTRACTION_EXAMPLE, VALID)
    plan = plan_capture(_record(), model=model, finder=FakeFinder(), vault_zone="Europe/Amsterdam", now=START)
    assert len(model.asked) == 2 and plan.model_calls == 2  # the copy was refused, the repair was used
    assert [f.text for f in plan.facts] == [
        "Morgan chose blue as the deployment color.",
        "The Atlas launch is on March 15.",
    ]
    with pytest.raises(ModelOutputInvalid, match="copied from the prompt's worked example"):
        plan_capture(_record(), model=FakeModel(EXTRACTION_EXAMPLE, EXTRACTION_EXAMPLE), finder=FakeFinder(),
                     vault_zone="Europe/Amsterdam", now=START)  # fmt: skip
    # a turn that really says it may be captured as said
    said = _record("Ilse owns the greenhouse sensor rollout. The greenhouse sensor rollout ships on 2031-06-08. "
                   "Ilse prefers Zigbee radios for the greenhouse sensor rollout.")  # fmt: skip
    assert len(plan_capture(said, model=FakeModel(EXTRACTION_EXAMPLE), finder=FakeFinder(),
                            vault_zone="Europe/Amsterdam", now=START).facts) == 3  # fmt: skip
