"""Per-turn recall budgets: every limit, replays, refinement, document slot, turn isolation."""

import threading
import time

import pytest

from memvault.indexer.runtime.budget import (
    DOC_RECORD_CHARS,
    DOC_RECORDS,
    DOC_TOTAL_CHARS,
    INITIAL_CHARS,
    INITIAL_RESULTS,
    RESULT_CHARS,
    TURN_CHARS,
    TURN_RESULTS,
    DocumentRecord,
    Evidence,
    TurnRecall,
    materially_different,
)

GRANTED = ("default", "s-11111111")


class Provider:
    """A scripted search: records every call; answers `n` results of `size` characters."""

    def __init__(self, n=10, size=100, prefix="e"):
        self.calls = []
        self.n, self.size, self.prefix = n, size, prefix
        self.lock = threading.Lock()

    def __call__(self, query, scope):
        with self.lock:
            self.calls.append((query, scope))
            call = len(self.calls)
        time.sleep(0.01)
        return [
            Evidence(scope[i % len(scope)], f"{self.prefix}{call}-{i}", chr(97 + i % 26) * self.size, "daily/x.md")
            for i in range(self.n)
        ]


def test_the_initial_query_admits_at_most_4_results():
    provider = Provider(n=10, size=100)
    answer = TurnRecall(provider, GRANTED).recall("deployment color")
    assert INITIAL_RESULTS == 4 and len(answer.evidence) == 4
    assert (answer.attempt, answer.status, answer.closed) == ("initial", "searched", False)


def test_the_initial_query_admits_at_most_3600_characters_and_1200_each():
    provider = Provider(n=4, size=5000)
    answer = TurnRecall(provider, GRANTED).recall("deployment color")
    sizes = [len(e.text) for e in answer.evidence]
    assert sizes == [1200, 1200, 1200]  # the fourth would exceed 3,600
    assert sum(sizes) == INITIAL_CHARS == 3600 and answer.used_chars == 3600 and RESULT_CHARS == 1200


def test_one_refinement_shares_6_results_with_the_initial_attempt():
    provider = Provider(n=10, size=50)
    turn = TurnRecall(provider, GRANTED)
    first = turn.recall("deployment color")
    second = turn.recall("staging database port")
    assert (second.attempt, second.status, second.closed) == ("refinement", "searched", True)
    assert len(first.evidence) + len(second.evidence) == TURN_RESULTS == 6
    assert second.used_results == 6 and len(provider.calls) == 2


def test_both_attempts_share_4800_characters():
    provider = Provider(n=8, size=1000)
    turn = TurnRecall(provider, GRANTED)
    first = turn.recall("deployment color")
    second = turn.recall("staging database port")
    assert first.used_chars == 3600
    assert sum(len(e.text) for e in second.evidence) == TURN_CHARS - 3600 == 1200
    assert second.used_chars == TURN_CHARS == 4800
    assert all(len(e.text) <= RESULT_CHARS for e in first.evidence + second.evidence)


def test_the_refinement_deduplicates_against_the_initial_evidence():
    shared = [Evidence("default", f"m-{i}", f"text {i}", "daily/x.md") for i in range(6)]
    turn = TurnRecall(lambda query, scope: shared, GRANTED)
    first = turn.recall("deployment color")
    second = turn.recall("staging database port")
    assert [e.id for e in first.evidence] == ["m-0", "m-1", "m-2", "m-3"]
    assert [e.id for e in second.evidence] == ["m-4", "m-5"]


def test_repeats_replay_without_reaching_the_provider():
    provider = Provider()
    turn = TurnRecall(provider, GRANTED)
    first = turn.recall("deployment color")
    for repeat in (
        "deployment color",
        "  Deployment   COLOR ",
        "the deployment color?",
        "what is the deployment color",
    ):
        again = turn.recall(repeat)
        assert again.status == "replayed" and again.evidence == first.evidence
    assert len(provider.calls) == 1


def test_a_third_distinct_query_replays_the_latest_evidence():
    provider = Provider()
    turn = TurnRecall(provider, GRANTED)
    turn.recall("deployment color")
    latest = turn.recall("staging database port")
    third = turn.recall("who owns the billing service")
    assert (third.status, third.evidence, third.closed) == ("replayed-latest", latest.evidence, True)
    assert turn.recall("deployment color").closed  # a replay of the first is closed too, now
    assert len(provider.calls) == 2 and turn.provider_queries == 2


def test_concurrent_repeats_join_one_provider_query():
    provider = Provider()
    turn = TurnRecall(provider, GRANTED)
    answers = []
    threads = [threading.Thread(target=lambda: answers.append(turn.recall("deployment color"))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(provider.calls) == 1
    assert sorted(a.status for a in answers) == ["replayed"] * 5 + ["searched"]
    assert len({a.evidence for a in answers}) == 1


def test_the_space_subset_is_validated_and_replays_are_restricted_to_it():
    provider = Provider(n=4)
    turn = TurnRecall(provider, GRANTED)
    turn.recall("deployment color", space_ids=["default", "s-99999999"])  # not a subset: every granted space
    assert provider.calls[0][1] == GRANTED
    replay = turn.recall("deployment color", space_ids=["s-11111111"])
    assert replay.evidence and {e.space_id for e in replay.evidence} == {"s-11111111"}
    narrowed = TurnRecall(provider, GRANTED)
    narrowed.recall("deployment color", space_ids=["default"])
    assert provider.calls[-1][1] == ("default",)


def test_turns_never_share_evidence_or_budget():
    provider = Provider()
    root, sibling = TurnRecall(provider, GRANTED), TurnRecall(provider, GRANTED)
    root.recall("deployment color")
    root.recall("staging database port")
    assert sibling.recall("deployment color").status == "searched"
    assert len(provider.calls) == 3


def test_materially_different():
    assert not materially_different("deployment color", "the deployment color?")
    assert not materially_different("Deployment colour blue", "blue deployment colour")
    assert materially_different("deployment color", "deployment pipeline owner")
    assert materially_different("deployment color", "staging database")


def test_admitted_pairs_are_the_only_related_starting_points():
    turn = TurnRecall(Provider(n=2), GRANTED)
    answer = turn.recall("deployment color")
    assert turn.admitted() == {(e.space_id, e.id) for e in answer.evidence}


# --- the document-search slot ----------------------------------------------------------------


def docs(n, size):
    def search(query, window):
        assert window == DOC_RECORD_CHARS
        return [DocumentRecord(f"d{i}", f"Doc {i}", f"documents/d{i}.md", "w" * size) for i in range(n)]

    return search


def test_document_search_admits_4_records_of_2600_characters_and_6000_in_total():
    answer = TurnRecall(Provider(), GRANTED, docs(6, 5000)).search_documents("runbook")
    sizes = [len(r.excerpt) for r in answer.records]
    assert sizes == [2600, 2600, 800] and answer.used_chars == DOC_TOTAL_CHARS == 6000
    small = TurnRecall(Provider(), GRANTED, docs(6, 100)).search_documents("runbook")
    assert len(small.records) == DOC_RECORDS == 4


def test_the_single_document_slot_replays_later_searches():
    calls = []

    def search(query, window):
        calls.append(query)
        return [DocumentRecord("d", "D", "documents/d.md", "text")]

    turn = TurnRecall(Provider(), GRANTED, search)
    first = turn.search_documents("runbook")
    again = turn.search_documents("something else entirely")
    assert again.status == "replayed" and again.records == first.records and calls == ["runbook"]


@pytest.mark.parametrize("query", ["", "   ", "?!", "x" * 10_000])
def test_odd_queries_are_answered_not_raised(query):
    turn = TurnRecall(Provider(n=1), GRANTED)
    assert turn.recall(query).status == "searched"


# --- end to end through the service ----------------------------------------------------------


def test_a_service_turn_recalls_from_active_spaces_and_documents(new_vault):
    from memvault.indexer.runtime.service import RuntimeService

    service = RuntimeService.open(new_vault)
    service.create_space("Work")
    service.remember_in_space("default", "The deployment color is blue.")
    service.create_document("Deploy runbook", "Ship on Tuesdays. " * 400, "How we ship")
    turn = service.begin_turn()
    answer = turn.recall("deployment color")
    assert [e.text for e in answer.evidence] == ["The deployment color is blue."]
    records = turn.search_documents("Tuesdays").records
    assert records[0].id == "deploy-runbook" and len(records[0].excerpt) == DOC_RECORD_CHARS
