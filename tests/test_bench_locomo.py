"""The retrieval benchmark's arithmetic: evidence parsing, recall@k, and the paired bootstrap."""

import pytest

from bench.locomo import evaluate, turn_text, versus_best_single
from bench.paired import paired_difference

FILLER = [
    "That sounds lovely, tell me more.",
    "I have been busy with work this week.",
    "The weather was nice for a walk.",
    "We should catch up over coffee soon.",
    "I read a good book about gardening.",
    "My sister called me yesterday evening.",
    "Work has been quite stressful lately.",
    "I tried a new recipe for dinner.",
    "The kids had fun at the park.",
    "I am thinking about a weekend trip.",
]

CONVERSATION = {
    "speaker_a": "Caroline",
    "speaker_b": "Melanie",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel, how have you been?"},
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "I adopted a hedgehog and named him Quillbert."},
        {
            "speaker": "Caroline",
            "dia_id": "D1:3",
            "text": "Look at this!",
            "blip_caption": "a photo of a lighthouse on a rocky coast",
        },
        *(
            {"speaker": ("Caroline", "Melanie")[n % 2], "dia_id": f"D1:{n + 4}", "text": text}
            for n, text in enumerate(FILLER)
        ),
    ],
    "session_2_date_time": "7:05 pm on 20 June, 2023",
    "session_2": [
        {"speaker": "Melanie", "dia_id": "D2:1", "text": "I signed up for a pottery class downtown."},
        {"speaker": "Caroline", "dia_id": "D2:2", "text": "My cousin moved to Reykjavik last spring."},
    ],
}

QUESTIONS = [
    {"question": "What is the name of Melanie's hedgehog?", "evidence": ["D1:2"], "category": 4},
    # a malformed evidence string with two ids in one entry, as LoCoMo has
    {
        "question": "Which class did Melanie take, and where did the cousin move?",
        "evidence": ["D2:1 D2:2"],
        "category": 1,
    },
    {"question": "Who shared a photo of a lighthouse?", "evidence": ["D1:3"], "category": 4},
    {"question": "A question without evidence is skipped", "evidence": [], "category": 5},
]


@pytest.fixture(scope="module")
def scores():
    return evaluate([{"conversation": CONVERSATION, "qa": QUESTIONS}], "builtin")


def test_questions_without_evidence_are_not_scored(scores):
    assert len(scores[("hybrid", "overall", 5)]) == 3
    assert len(scores[("bm25", "single-hop", 5)]) == 2
    assert len(scores[("vectors", "multi-hop", 25)]) == 1
    assert ("hybrid", "adversarial", 5) not in scores


def test_distinctive_words_find_their_turns_among_fifteen(scores):
    for retriever in ("bm25", "hybrid"):
        assert scores[(retriever, "single-hop", 5)] == [1.0, 1.0]


def test_malformed_evidence_is_split_into_both_turns(scores):
    # "D2:1 D2:2" counts as two turns, both found; kept whole it would match no memory and score 0
    assert scores[("bm25", "multi-hop", 5)] == [1.0]


def test_the_image_caption_is_part_of_the_memory():
    assert turn_text(CONVERSATION["session_1"][2]) == (
        "Caroline: Look at this! [image: a photo of a lighthouse on a rocky coast]"
    )


def test_hybrid_is_compared_with_the_better_single_retriever_per_cell():
    scores = {
        ("hybrid", "overall", 5): [1.0, 1.0, 0.0, 1.0],
        ("bm25", "overall", 5): [1.0, 0.0, 0.0, 1.0],
        ("vectors", "overall", 5): [0.0, 0.0, 0.0, 0.0],
    }
    difference = versus_best_single(scores, "overall", 5)
    assert difference.mean == pytest.approx(0.25)  # against BM25, the better one, not vectors


def test_identical_scores_differ_by_nothing():
    difference = paired_difference([0.5, 1.0, 0.0], [0.5, 1.0, 0.0])
    assert (difference.mean, difference.low, difference.high) == (0.0, 0.0, 0.0)
    assert difference.verdict == "tie"


def test_a_consistent_gain_is_significantly_above_and_a_consistent_loss_below():
    gain = paired_difference([1.0] * 30, [0.0] * 30)
    assert (gain.mean, gain.low, gain.high, gain.verdict) == (1.0, 1.0, 1.0, "above")
    loss = paired_difference([0.0] * 20 + [1.0], [1.0] * 20 + [1.0])
    assert loss.verdict == "below"
    assert loss.high < 0


def test_a_difference_of_one_question_in_forty_is_noise():
    hybrid = [1.0] * 21 + [0.0] * 19
    bm25 = [1.0] * 20 + [0.0] * 20
    difference = paired_difference(hybrid, bm25)
    assert difference.mean == pytest.approx(1 / 40)
    assert difference.low <= 0.0 < difference.high
    assert difference.verdict == "tie"


def test_mixed_gains_and_losses_give_an_interval_around_the_mean():
    a = [1.0, 0.0] * 50 + [1.0] * 10
    b = [0.0, 1.0] * 50 + [0.0] * 10
    difference = paired_difference(a, b)
    assert difference.low < difference.mean < difference.high
    assert difference.mean == pytest.approx(10 / 110)


def test_the_interval_is_the_same_every_run():
    a = [1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.25]
    b = [0.0, 0.0, 1.0, 1.0, 0.5, 0.0, 0.25]
    assert paired_difference(a, b) == paired_difference(a, b)


@pytest.mark.parametrize(("a", "b"), [([1.0, 0.0], [1.0]), ([], [])])
def test_unpaired_or_empty_scores_are_refused(a, b):
    with pytest.raises(ValueError, match="paired scores need"):
        paired_difference(a, b)


def test_negatives_are_the_next_conversations_questions_and_nonsense():
    from bench.locomo import NONSENSE_WORDS, negatives, nonsense

    data = [{"qa": [{"question": "a?"}]}, {"qa": [{"question": "b?"}, {"question": "c?"}]}]
    assert negatives(data, 0)[:2] == ["b?", "c?"] and negatives(data, 1)[:1] == ["a?"]  # the next one, wrapping
    assert len(negatives(data, 0)) == 2 + NONSENSE_WORDS
    assert nonsense() == nonsense() and len(set(nonsense())) > NONSENSE_WORDS // 2  # the same words every run


def test_the_floor_answers_nonsense_empty_and_each_change_is_measured(scores):
    # one conversation: its negatives are the nonsense words alone
    assert len(scores[("negatives", "nonsense", 0)]) == 50
    assert sum(scores[("negatives", "nonsense", 0)]) >= 45
    for variant in ("no dates", "no floor", "no asked"):
        assert len(scores[(variant, "overall", 10)]) == len(scores[("hybrid", "overall", 10)]) == 3


def test_silence_is_asked_of_words_absent_from_the_vault_beside_the_floor_before_it(scores):
    # one conversation: 100 strings from the model's vocabulary and 100 common words, each floor
    for floor in ("hybrid", "no silence"):
        assert len(scores[(floor, "absent: vocabulary", 0)]) == len(scores[(floor, "absent: common words", 0)]) == 100
        assert len(scores[(floor, "real empty", 0)]) == 3
    assert len(scores[("auto", "absent: all", 0)]) == 200
    assert sum(scores[("hybrid", "absent: all", 0)]) >= sum(scores[("no silence", "absent: all", 0)])
    assert sum(scores[("hybrid", "absent: all", 0)]) >= 0.97 * 200


def test_absent_strings_hold_no_word_of_the_vault_and_are_the_same_every_run(tmp_path):
    from bench.locomo import silent_strings, vault_terms, write_vault
    from memvault.indexer.search.floor import terms_of

    root = tmp_path / "vault"
    write_vault(root, CONVERSATION, "builtin")
    known = vault_terms(root)
    assert {"hedgehog", "quillbert", "lighthous", "reykjavik", "session"} <= known  # text, caption, heading
    strings = silent_strings(known, seed=46)
    assert strings == silent_strings(known, seed=46) and len(strings) == 200
    assert {source for source, _ in strings} == {"vocabulary", "common words"}
    for _, text in strings:
        assert 1 <= len(text.split()) <= 4
        assert not set(terms_of(text)) & known and not set(text.split()) & known
