"""Search latency (median, p95) and rebuild throughput on generated vaults of 10k and 100k memories.

    python -m bench.bench_search [--sizes 10000,100000] [--queries 300] [--tier lite|journal]

Prints figures; asserts nothing. Targets: Lite (BM25) search median ≤ 5 ms at 100k memories in a
warm process; Journal (hybrid: BM25 + builtin vectors + question coverage + fusion) median
≤ 15 ms at 100k. The baseline printed beside it is a bare Tantivy search on the same index, so
the ratio shows what memvault's query building, vector search, coverage, fusion and result
mapping cost on top.
"""

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.generate import OBJECTS, SUBJECTS, VERBS, make_vault
from memvault.indexer.engine.store import MemoryStore


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def queries(count: int) -> list[str]:
    rng = random.Random(5)
    pool = [f"{rng.choice(SUBJECTS)} {rng.choice(OBJECTS)}" for _ in range(count // 2)]
    pool += [f"who {rng.choice(VERBS)} {rng.choice(OBJECTS).split()[-1]}?" for _ in range(count - len(pool))]
    return pool


def timed(function, items) -> list[float]:
    samples = []
    for item in items:
        started = time.perf_counter()
        function(item)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def bench_size(size: int, query_count: int, tier: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_vault(Path(tmp) / "v", size, mode=tier)
        with MemoryStore.open(root, sync=False) as store:
            started = time.perf_counter()
            report = store.rebuild()
            seconds = time.perf_counter() - started
            print(
                f"{size:>7} memories ({tier})  rebuild {seconds:6.2f} s  ({report.memories / seconds:,.0f} memories/s)"
            )
            qs = queries(query_count)
            for q in qs[:20]:
                store.recall(q, limit=10)  # warm caches
            ours = timed(lambda q: store.recall(q, limit=10), qs)
            bm25 = store.serving_index().bm25
            parsed = [bm25.build_query(q, ("curated",)) for q in qs]
            searcher = bm25._current_searcher()
            bare = timed(lambda p: searcher.search(p, 10, count=False), parsed)  # uncounted, as recall's
        print(
            f"{'':>7}           search median {statistics.median(ours):.2f} ms  p95 {percentile(ours, 0.95):.2f} ms"
            f"  | bare tantivy median {statistics.median(bare):.2f} ms  p95 {percentile(bare, 0.95):.2f} ms"
            f"  | ratio {statistics.median(ours) / max(statistics.median(bare), 1e-9):.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--tier", choices=["lite", "journal"], default="lite")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        bench_size(size, args.queries, args.tier)


if __name__ == "__main__":
    main()
