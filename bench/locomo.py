"""Retrieval quality on LoCoMo: evidence recall@5/10/25 for BM25 only, vectors only and hybrid.

    python -m bench.locomo [--data ../shared/eval/locomo-dev.json] [--provider builtin|e5-small]
                           [--extra e5-small]

One vault per conversation (Journal tier), one memory per dialog turn written as a bullet in the
daily note of its session's date (`Speaker: text`, plus the image caption when there is one),
its dialog id as the block id. The vault is indexed by `memvault rebuild`'s code path and queried
through the same retrievers `memvault search` uses, all three in the same run. A question's
recall@k is the share of its evidence turns in the top k (malformed evidence strings such as
`D9:1 D4:4` are split). The data set (CC BY-NC 4.0) is read where it lies, never copied.

Hybrid is memvault's recall with its defaults (date-aware, relevance floor). Each change is also
measured switched off in the same run, question by question, with a paired bootstrap interval:
`no dates` (periods the question names are not read), `no floor` (the relevance floor is
off) and `no asked` (a memory that only asks what the question asks is not discounted). The
floor is also asked about questions the vault cannot answer, the **negatives**: every question
of the next conversation asked of this one's vault, and nonsense words; the share of
negatives answered empty is printed beside recall@10 with and without the floor.

**Silence** (issue 46) is asked of strings of real words the vault never holds: 1-4 words drawn
with a fixed seed from the builtin model's vocabulary (its alphabetic whole-word pieces, such as
"parad" and "tutto") and from `bench/common_words.txt` (common English nouns), keeping only words
none of whose index stems occurs anywhere in that vault's notes. The share of them answered
empty is printed beside the share of real questions answered empty and recall@10, for the floor
as it is and as it was before issue 46 (`no silence`), in the same run.

With `--extra e5-small` the vaults also hold a second model's vectors (memory.extraEmbeddings)
and hybrid fuses them as one more list; `no extra` is the same recall without that list, so the
paired interval is the extra model's worth, and the rebuild's embedding rate of each model
(passages per second, both running beside BM25 on this machine's cores) is printed.
"""

import argparse
import json
import os
import random
import re
import tempfile
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from bench.paired import Difference, paired_difference
from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.progress import PhaseLog
from memvault.indexer.search.embeddings import builtin_word_table
from memvault.indexer.search.floor import terms_of
from memvault.indexer.search.recall import recall_tool
from memvault.vault.config import default_config_data, render_config
from memvault.vault.init import init_vault
from memvault.vault.note import format_bullet, new_note_text

KS = (5, 10, 25)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "eval" / "locomo-dev.json"
_EVIDENCE_RE = re.compile(r"D\d+:\d+")


def sessions(conversation: dict):
    numbers = sorted(int(m.group(1)) for k in conversation if (m := re.fullmatch(r"session_(\d+)", k)))
    for number in numbers:
        turns = conversation[f"session_{number}"]
        if turns:
            when = datetime.strptime(conversation[f"session_{number}_date_time"], "%I:%M %p on %d %B, %Y")
            yield number, when, turns


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [image: {turn['blip_caption']}]"
    return " ".join(text.split())


def write_vault(
    root: Path, conversation: dict, provider: str, rerank: dict | None = None, extra: str | None = None
) -> None:
    data = default_config_data(mode="journal", time_zone="UTC")
    if provider != "builtin":
        data["memory"]["embeddings"] = {"provider": provider}
    if extra:
        data["memory"]["extraEmbeddings"] = {"provider": extra}
    if rerank:
        data["memory"]["rerank"] = rerank
    init_vault(root, render_config(data))
    notes: dict[str, list[str]] = defaultdict(list)
    for number, when, turns in sessions(conversation):
        day = when.date().isoformat()
        lines = notes[day] or [new_note_text(day)]
        lines.append(f"## Session {number}\n\n")
        for turn in turns:
            block_id = turn["dia_id"].replace(":", "-")
            lines.append(format_bullet(turn_text(turn), block_id, when.strftime("%H:%M")))
        lines.append("\n")
        notes[day] = lines
    for day, lines in notes.items():
        (root / "daily" / f"{day}.md").write_text("".join(lines), encoding="utf-8")


def dialog_id(key_or_source: str) -> str:
    return key_or_source.rsplit("#", 1)[-1].lstrip("^").replace("-", ":")


#: hybrid as recall answers by default, and with one change switched off (name → recall_tool keywords)
VARIANTS = {
    "hybrid": {},
    "no dates": {"today": None},
    "no floor": {"floor": False},
    "no asked": {"asked": False},
    "no silence": {"silence": False},
}
#: the two floors the silence figures compare: as it is, and as it was before issue 46
FLOORS = ("hybrid", "no silence")
#: absent-word strings asked of each vault, per source
SILENT_STRINGS = 100
COMMON_WORDS = Path(__file__).resolve().parent / "common_words.txt"
#: "today" for relative periods ("last week"): LoCoMo's own periods are absolute
TODAY = datetime(2026, 12, 2).date()
NONSENSE_WORDS = 50
#: milliseconds each rerank call took (printed when a reranker is configured)
RERANK_MS: list[float] = []
#: per embedding phase of the rebuilds ("embedding", "embedding e5-small"): [passages, seconds]
EMBEDDING_COST: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
_SYLLABLES = ("ka", "zu", "mo", "fe", "qui", "rt", "plo", "xa", "vex", "nor", "bli", "gy", "dro", "sku", "tha")


def rankings(store: MemoryStore, question: str, depth: int) -> dict[str, list[str]]:
    index = store.serving_index()
    bm25 = [dialog_id(hit.key) for hit in index.bm25.search(question, depth)]
    vectors, _ = store._semantic.search(question, depth)
    ranked = {"bm25": bm25, "vectors": [dialog_id(key) for key, _ in vectors or []]}
    if store._semantic.extra_identity is not None:
        extra, _ = store._semantic.search_extra(question, depth)
        ranked["extra vectors"] = [dialog_id(key) for key, _ in extra or []]
    for name, change in VARIANTS.items():
        ranked[name] = [dialog_id(hit.source) for hit in hybrid(store, question, depth, **change).hits]
    return ranked


def hybrid(
    store: MemoryStore,
    question: str,
    depth: int,
    *,
    today=TODAY,
    floor: bool = True,
    rerank: bool = True,
    extra: bool = True,
    asked: bool = True,
    silence: bool = True,
):
    """memvault's tool-mode recall on the store's index, with the given settings (the reranker
    when `memory.rerank` is configured, unless `rerank` is False; the extra list when
    memory.extraEmbeddings is, unless `extra` is False)."""
    index = store.serving_index()
    reranker = store._reranker() if rerank else None
    result = recall_tool(
        index.bm25,
        store._semantic,
        question,
        depth,
        today=today,
        floor=floor,
        reranker=reranker,
        extra_list=extra,
        asked=asked,
        silence=silence,
    )
    if result.explain and "rerank" in result.explain:
        RERANK_MS.append(result.explain["rerank"]["ms"])
    return result


def nonsense(count: int = NONSENSE_WORDS, seed: int = 7) -> list[str]:
    """Made-up words, one to three per query, the same every run."""
    rng = random.Random(seed)
    word = lambda: "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4)))  # noqa: E731
    return [" ".join(word() for _ in range(rng.randint(1, 3))) for _ in range(count)]


def negatives(data: list[dict], index: int) -> list[str]:
    """What the vault of conversation `index` cannot answer: the next conversation's questions
    (other people, other lives), and nonsense words."""
    other = data[(index + 1) % len(data)] if len(data) > 1 else None
    asked = [qa["question"] for qa in other["qa"]] if other is not None else []
    return asked + nonsense()


def vault_terms(root: Path) -> set[str]:
    """Every index term and lower-cased word of the vault's notes (headings and captions too)."""
    found: set[str] = set()
    for note in root.rglob("*.md"):
        text = note.read_text(encoding="utf-8")
        found.update(terms_of(text))
        found.update(word.lower() for word in re.findall(r"[^\W\d_]+", text))
    return found


def vocabulary_words() -> list[str]:
    """The builtin model's whole-word pieces that are alphabetic (ASCII), lower-cased."""
    words, _ = builtin_word_table()
    return sorted({word.lower() for word in words if word.isascii() and word.isalpha() and len(word) > 2})


def common_words() -> list[str]:
    return sorted(set(COMMON_WORDS.read_text(encoding="utf-8").split()))


def silent_strings(known: set[str], seed: int, count: int = SILENT_STRINGS) -> list[tuple[str, str]]:
    """(source, string) pairs: `count` strings of 1-4 words from each source that the vault
    whose terms are `known` never holds (no stem of the word, nor the word, occurs in it)."""
    rng = random.Random(seed)
    strings = []
    for source, words in (("vocabulary", vocabulary_words()), ("common words", common_words())):
        absent = [word for word in words if word not in known and not set(terms_of(word)) & known]
        strings += [(source, " ".join(rng.sample(absent, rng.randint(1, 4)))) for _ in range(count)]
    return strings


def ask_silent(store: MemoryStore, root: Path, number: int, scores: dict) -> None:
    """Each floor's answer to strings of words absent from the vault: 1.0 when empty."""
    for source, text in silent_strings(vault_terms(root), seed=46 + number):
        for floor in FLOORS:
            empty = 0.0 if hybrid(store, text, 10, **VARIANTS[floor]).hits else 1.0
            scores[(floor, f"absent: {source}", 0)].append(empty)
            scores[(floor, "absent: all", 0)].append(empty)
        auto = store.recall(text, limit=10, mode="auto")
        scores[("auto", "absent: all", 0)].append(0.0 if auto.hits else 1.0)


def evaluate(data: list[dict], provider: str, rerank: dict | None = None, extra: str | None = None) -> dict:
    scores: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for number, sample in enumerate(data):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp) / "vault"
            write_vault(root, sample["conversation"], provider, rerank, extra)
            with MemoryStore.open(root, sync=False) as store:
                progress = PhaseLog()
                store.rebuild(progress)
                for phase in progress.snapshot():
                    if phase.name.startswith("embedding"):
                        EMBEDDING_COST[phase.name][0] += phase.done
                        EMBEDDING_COST[phase.name][1] += phase.seconds()
                for qa in sample["qa"]:
                    evidence = {e for raw in qa.get("evidence", []) for e in _EVIDENCE_RE.findall(raw)}
                    if not evidence:
                        continue
                    category = CATEGORIES.get(qa["category"], str(qa["category"]))
                    for retriever, ranked in rankings(store, qa["question"], max(KS)).items():
                        for k in KS:
                            share = len(evidence & set(ranked[:k])) / len(evidence)
                            scores[(retriever, category, k)].append(share)
                            scores[(retriever, "overall", k)].append(share)
                        if retriever in FLOORS:
                            scores[(retriever, "real empty", 0)].append(0.0 if ranked else 1.0)
                others = negatives(data, number)
                for n, question in enumerate(others):
                    kind = "nonsense" if n >= len(others) - NONSENSE_WORDS else "other conversation"
                    for floor in FLOORS:
                        empty = 0.0 if hybrid(store, question, 10, **VARIANTS[floor]).hits else 1.0
                        scores[(_negatives(floor), kind, 0)].append(empty)
                        scores[(_negatives(floor), "all", 0)].append(empty)
                ask_silent(store, root, number, scores)
    return scores


GROUPS = ["overall", *CATEGORIES.values()]
VERDICTS = {"above": "significantly above", "tie": "within noise", "below": "significantly below"}


def report(scores: dict) -> None:
    print_recall_table(scores)
    print_differences(scores)
    print_changes(scores)
    print_negatives(scores)
    worse = [
        f"{g} @{k}" for k in KS for g in GROUPS if _mean(scores[("hybrid", g, k)]) <= _best_single_mean(scores, g, k)
    ]
    print(
        "hybrid above both single retrievers everywhere"
        if not worse
        else "hybrid NOT above both at: " + ", ".join(worse)
    )


def print_changes(scores: dict) -> None:
    """Each change against the defaults without it, in points, with its paired interval."""
    for variant in [name for name in VARIANTS if name != "hybrid"]:
        print(f"hybrid minus hybrid with {variant}, in points (95% paired bootstrap interval):")
        print(f"{'':10}" + "".join(f"{g:>22}" for g in GROUPS))
        for k in KS:
            cells = []
            for group in GROUPS:
                d = paired_difference(scores[("hybrid", group, k)], scores[(variant, group, k)])
                cells.append(f"{f'{100 * d.mean:+.1f} [{100 * d.low:+.1f},{100 * d.high:+.1f}]':>22}")
            print(f"{'@' + str(k):10}" + "".join(cells))
        print()


def print_negatives(scores: dict) -> None:
    """The relevance floor's two sides: negatives answered empty, and what real questions keep."""
    for floor, label in zip(FLOORS, ("the floor", "the floor before issue 46"), strict=True):
        cells = [
            f"{kind} {_percent(scores[(_negatives(floor), kind, 0)])}"
            for kind in ("all", "other conversation", "nonsense")
        ]
        print(f"negatives answered empty, {label}: " + ", ".join(cells))
    with_floor, without = _mean(scores[("hybrid", "overall", 10)]), _mean(scores[("no floor", "overall", 10)])
    print(
        f"recall@10 on real questions: {100 * with_floor:.2f} with the floor, {100 * without:.2f} without "
        f"({100 * (with_floor - without):+.2f} points)\n"
    )
    print_silence(scores)


def print_silence(scores: dict) -> None:
    """Issue 46's silence figures, the floor as it is beside the floor before it, in one run."""
    print("silence (absent words: at least 97% empty; real questions: at most 2% empty):")
    print(f"{'':34}{'the floor':>22}{'before issue 46':>22}")
    rows = [
        ("absent words answered empty", "absent: all"),
        ("  from the model's vocabulary", "absent: vocabulary"),
        ("  from common English words", "absent: common words"),
        ("real questions answered empty", "real empty"),
    ]
    for label, group in rows:
        print(f"{label:34}" + "".join(f"{_percent(scores[(floor, group, 0)]):>22}" for floor in FLOORS))
    recall = [f"{100 * _mean(scores[(floor, 'overall', 10)]):.2f}" for floor in FLOORS]
    print(f"{'recall@10 on real questions':34}{recall[0]:>22}{recall[1]:>22}")
    print(f"{'auto mode, absent words empty':34}{_percent(scores[('auto', 'absent: all', 0)]):>22}")
    d = paired_difference(scores[("hybrid", "overall", 10)], scores[("no silence", "overall", 10)])
    print(
        f"recall@10, the floor minus before: {100 * d.mean:+.2f} [{100 * d.low:+.2f}, {100 * d.high:+.2f}] "
        f"({VERDICTS[d.verdict]}; per category: the 'no silence' table above)\n"
    )


def _negatives(floor: str) -> str:
    """The scores' key for the negatives one floor answered empty ("negatives": the floor as it is)."""
    return "negatives" if floor == "hybrid" else f"negatives {floor}"


def _percent(values: list[float]) -> str:
    return f"{100 * _mean(values):.1f}% of {len(values)}"


def print_embedding_cost() -> None:
    """Each model's embedding rate in the rebuilds: passages embedded per second of its phase
    (the phases run beside BM25 and each other, so this is the cost on this machine's cores)."""
    for phase, (done, seconds) in sorted(EMBEDDING_COST.items()):
        rate = done / seconds if seconds > 0 else float("nan")
        print(
            f"rebuild {phase}: {int(done)} passages in {seconds:.1f} s = {rate:.0f} passages/s "
            f"({os.cpu_count()} cores, shared)"
        )


def print_recall_table(scores: dict) -> None:
    counts = {g: len(scores[("hybrid", g, KS[0])]) for g in GROUPS}
    print(f"{'':16}" + "".join(f"{g + ' (' + str(counts[g]) + ')':>22}" for g in GROUPS))
    for k in KS:
        singles = ("bm25", "vectors", *(["extra vectors"] if ("extra vectors", "overall", k) in scores else []))
        for retriever in (*singles, *VARIANTS):
            cells = [f"{100 * _mean(scores[(retriever, group, k)]):22.1f}" for group in GROUPS]
            print(f"{retriever + ' @' + str(k):16}" + "".join(cells))
        print()


def print_differences(scores: dict) -> None:
    """Per cell, hybrid minus the better single retriever with its interval, then a verdict count."""
    print("hybrid minus the better single retriever, in points (95% paired bootstrap interval):")
    print(f"{'':10}" + "".join(f"{g:>22}" for g in GROUPS))
    verdicts: dict[str, list[str]] = defaultdict(list)
    for k in KS:
        cells = []
        for group in GROUPS:
            difference = versus_best_single(scores, group, k)
            verdicts[difference.verdict].append(f"{group} @{k}")
            interval = f"{100 * difference.mean:+.1f} [{100 * difference.low:+.1f},{100 * difference.high:+.1f}]"
            cells.append(f"{interval:>22}")
        print(f"{'@' + str(k):10}" + "".join(cells))
    for verdict, label in VERDICTS.items():
        cells = verdicts.get(verdict, [])
        detail = f" ({', '.join(cells)})" if cells and verdict != "above" else ""
        print(f"  {label}: {len(cells)}{detail}")
    print()


def versus_best_single(scores: dict, group: str, k: int) -> Difference:
    """Hybrid against whichever single retriever has the higher mean in this cell, question by question."""
    best = max(("bm25", "vectors"), key=lambda retriever: _mean(scores[(retriever, group, k)]))
    return paired_difference(scores[("hybrid", group, k)], scores[(best, group, k)])


def _best_single_mean(scores: dict, group: str, k: int) -> float:
    return max(_mean(scores[("bm25", group, k)]), _mean(scores[("vectors", group, k)]))


def _mean(values: list[float]) -> float:
    return sum(values) / max(len(values), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--provider", default="builtin", choices=["builtin", "e5-small"])
    parser.add_argument(
        "--extra",
        choices=["e5-small"],
        help="a second model's vectors fused beside the first "
        "(memory.extraEmbeddings), measured against the same run without them",
    )
    parser.add_argument("--json", action="store_true", help="also print the raw means as JSON")
    parser.add_argument("--rerank-endpoint", help="a rerank server's route, e.g. http://localhost:8080/v1/rerank")
    parser.add_argument("--rerank-model", default="bge-reranker-v2-m3")
    parser.add_argument("--rerank-format", default="cohere", choices=["cohere", "tei"])
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    rerank = None
    if args.rerank_endpoint:
        rerank = {
            "provider": "http",
            "endpoint": args.rerank_endpoint,
            "model": args.rerank_model,
            "format": args.rerank_format,
            "timeoutMs": 10_000,
        }
        VARIANTS["no rerank"] = {"rerank": False}
    if args.extra:
        VARIANTS["no extra"] = {"extra": False}
    scores = evaluate(data, args.provider, rerank, args.extra)
    print(
        f"LoCoMo evidence recall, {len(data)} conversations, embeddings: {args.provider}"
        + (f" + {args.extra} (extra list)" if args.extra else "")
        + (f", reranker {args.rerank_model}" if rerank else "")
        + "\n"
    )
    report(scores)
    print_embedding_cost()
    if RERANK_MS:
        ordered = sorted(RERANK_MS)
        print(
            f"reranker added {ordered[len(ordered) // 2]:.1f} ms median, "
            f"{ordered[int(0.95 * len(ordered))]:.1f} ms p95 "
            f"per recall ({len(ordered)} calls)"
        )
    if args.json:
        print(json.dumps({f"{r}/{g}/@{k}": round(100 * _mean(v), 2) for (r, g, k), v in sorted(scores.items())}))


if __name__ == "__main__":
    main()
