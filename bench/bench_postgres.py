"""The PostgreSQL + pgvector index backend beside the local one (Tantivy + hnswlib), same run.

    python -m bench.bench_postgres [--memories 10000] [--vaults 10] [--queries 200] [--locomo N]
                                   [--locomo-filler M]   (--memories 0: LoCoMo alone)
                                   [--dsn DSN]   (default: MEMVAULT_INDEX_DSN, else a pgserver under /tmp)

Prints the server's PostgreSQL and pgvector versions, then for both backends:
* rebuild of every vault from its files (seconds, memories/s);
* hybrid recall (memvault's tool-mode recall: BM25 + vectors + coverage, fused) median / p95,
  in-process over all vaults, and through a running owner (`memvault watch`) for one vault;
* BM25's early termination on the server against reading every posting (overlap, time);
* `remember` through the owner (median, p95), and bulk import (`remember_many`) in memories/s;
* LoCoMo evidence recall@5/10/25 for hybrid recall and BM25 alone (bench/locomo.py's vaults),
  with --locomo-filler each conversation beside that many generated memories in its vault;
* with --storage N: bytes per memory on the server (rows, postings, terms: heap, TOAST, indexes)
  beside the local `.index/` of the same vault of N generated memories, and what an apply of one
  memory costs there (time, WAL bytes written);
* with --agreement N: BM25's early termination against every posting on real text: LoCoMo's
  questions asked of its first N conversations, each beside --agreement-filler generated memories.
Figures from a loaded machine are labelled so by whoever quotes them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.bench_search import percentile, queries
from bench.generate import make_vault
from memvault.indexer.engine.store import MemoryStore
from memvault.vault.config import IndexConfig

REPO = Path(__file__).resolve().parent.parent
BACKENDS = ("local", "postgres")


def start_server():
    import pgserver

    folder = Path(tempfile.mkdtemp(prefix="memvault-bench-pg-", dir="/tmp"))  # see docs/team.md: /tmp only
    server = pgserver.get_server(folder, cleanup_mode="delete")
    info = server.get_postmaster_info()
    dsn = f"host={info.socket_dir} port={info.port} user=postgres dbname=postgres"
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return server, dsn


def on_server(root: Path, name: str) -> Path:
    """Point a vault's config at the index server under `name`."""
    config = json.loads((root / "memvault.json").read_text())
    config["index"] = {"backend": "postgres", "name": name}
    (root / "memvault.json").write_text(json.dumps(config, indent=2) + "\n")
    return root


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples):7.1f} ms  p95 {percentile(samples, 0.95):7.1f} ms"


def timed_ms(function, items) -> list[float]:
    samples = []
    for item in items:
        started = time.perf_counter()
        function(item)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def build_vaults(tmp: Path, memories: int, vaults: int) -> dict[str, list[Path]]:
    per_vault = max(1, memories // vaults)
    roots: dict[str, list[Path]] = {backend: [] for backend in BACKENDS}
    for number in range(vaults):
        for backend in BACKENDS:
            root = make_vault(tmp / f"{backend}-{number}", per_vault, mode="journal", seed=number + 1)
            roots[backend].append(on_server(root, f"bench-{number}") if backend == "postgres" else root)
    return roots


def bench_scale(roots: dict[str, list[Path]], env: dict, query_count: int) -> None:
    asked = queries(query_count)
    for backend in BACKENDS:
        started = time.perf_counter()
        rows = 0
        for root in roots[backend]:
            with MemoryStore.open(root, env=env, sync=False) as store:
                rows += store.rebuild().memories
        seconds = time.perf_counter() - started
        print(f"{backend:8s} rebuild      {rows} memories in {seconds:6.1f} s ({rows / seconds:,.0f}/s)")
    for backend in BACKENDS:
        stores = [MemoryStore.open(root, env=env, sync=False) for root in roots[backend]]
        try:
            for store in stores:
                store.recall("warm up")
            samples = timed_ms(lambda i, stores=stores: stores[i % len(stores)].recall(asked[i]), range(len(asked)))
        finally:
            for store in stores:
                store.close()
        print(f"{backend:8s} hybrid recall in-process, {len(stores)} vaults: {ms(samples)}")


def bench_pruning(root: Path, env: dict, query_count: int) -> None:
    """BM25's early termination against the exhaustive list (every posting of every list read),
    on one vault: overlap of the top 10 and top 100 (by key, and by score: a row tied with the
    exhaustive list's k-th score counts, as ties may be broken by other rows), and the lexical
    call's median time."""
    from memvault.indexer.backend.postgres import engine

    asked = queries(query_count)
    with MemoryStore.open(root, env=env, sync=False) as store:
        backend, generation = store.backend, store.backend.serving_generation()
        rows = backend.counts(generation).rows
        pruned = timed_ms(lambda q: backend.lexical_candidates(generation, q, 100), asked)
        lists = [backend.lexical_candidates(generation, q, 100) for q in asked]
        usual = engine.read_sizes
        engine.read_sizes = lambda depth: {"per_list": 10**9, "per_text": 10**9, "pool": 10**9}
        try:
            whole = timed_ms(lambda q: backend.lexical_candidates(generation, q, 100), asked)
            exact = [backend.lexical_candidates(generation, q, 100) for q in asked]
        finally:
            engine.read_sizes = usual
    pairs = [(a, b) for a, b in zip(lists, exact, strict=True) if b]
    by_key = {k: statistics.mean(len({key for key, _ in a[:k]} & {key for key, _ in b[:k]}) / min(k, len(b))
                                 for a, b in pairs) for k in (10, 100)}  # fmt: skip
    by_score = {k: statistics.mean(sum(1 for _, score in a[:k] if score >= b[min(k, len(b)) - 1][1] - 1e-9)
                                   / min(k, len(b)) for a, b in pairs) for k in (10, 100)}  # fmt: skip
    print(
        f"postgres BM25 list on one {rows:,}-row vault, early termination vs every posting: top-10 overlap "
        f"{100 * by_key[10]:.1f}% by key, {100 * by_score[10]:.1f}% by score; top-100 {100 * by_key[100]:.1f}% / "
        f"{100 * by_score[100]:.1f}%; lexical call median {statistics.median(pruned):.1f} ms vs "
        f"{statistics.median(whole):.1f} ms"
    )


def server_bytes(backend) -> dict[str, dict[str, int]]:
    """The serving generation's leaves on the server: heap, TOAST and index bytes of each table."""
    from memvault.indexer.backend.postgres import schema

    generation = backend.serving_generation()
    sizes = {}
    with backend._session() as conn:
        for table in schema.PARTITIONED:
            leaf = f'"{schema.leaf_table(backend.vault, generation, table)}"'
            heap, toast, indexes = conn.execute(
                "SELECT pg_relation_size(c.oid), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), "
                "pg_indexes_size(c.oid) FROM pg_class c WHERE c.oid = %s::regclass", (leaf,)).fetchone()  # fmt: skip
            sizes[table.removeprefix("memvault_")] = {"heap": heap, "toast": toast, "indexes": indexes}
    return sizes


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def bench_storage(tmp: Path, env: dict, memories: int) -> None:
    """Bytes per memory on the server against the local `.index/`, the same vault on both, and
    what an apply of one memory costs on the server (in-process, no owner: the time of the
    `remember` and the WAL bytes the server wrote for it)."""
    local = make_vault(tmp / "storage-local", memories, mode="journal", seed=7)
    server = on_server(make_vault(tmp / "storage-postgres", memories, mode="journal", seed=7), "bench-storage")
    with MemoryStore.open(local, env=env, sync=False) as store:
        store.rebuild()
    local_bytes = folder_bytes(local / ".index")
    with MemoryStore.open(server, env=env, sync=False) as store:
        rows = store.rebuild().memories
        sizes = server_bytes(store.backend)
        samples, wal = [], []
        for i in range(100):  # past MERGE_AT delta postings: the merges are among them
            with store.backend._session() as conn:
                before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
            started = time.perf_counter()
            store.remember(f"Storage bench fact {i}: the courier moved the shipment to dock {i * 13 % 97}.")
            samples.append((time.perf_counter() - started) * 1000)
            with store.backend._session() as conn:
                wal.append(conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)",
                                        (before,)).fetchone()[0])  # fmt: skip
        churned = server_bytes(store.backend)
        held = store.backend.counts(store.backend.serving_generation()).rows
    total = sum(sum(part.values()) for part in sizes.values())
    parts = "; ".join(f"{table} " + ", ".join(f"{kind} {value / rows:,.0f}" for kind, value in part.items())
                      for table, part in sizes.items())  # fmt: skip
    print(f"storage per memory, {rows:,} memories in one vault: server {total / rows:,.0f} B ({parts}); "
          f"local .index/ {local_bytes / rows:,.0f} B; server / local {total / local_bytes:.1f}x")  # fmt: skip
    print(
        f"postgres apply of one memory (remember, in-process, {rows:,} rows, {len(samples)} in a row): {ms(samples)}, "
        f"max {max(samples):.1f} ms; WAL median {statistics.median(wal) / 1024:,.1f} KB, "
        f"p95 {percentile(wal, 0.95) / 1024:,.1f} KB, max {max(wal) / 1024:,.1f} KB"
    )
    after = sum(sum(part.values()) for part in churned.values())
    print(f"storage per memory after those applies (dead row versions until autovacuum): server {after / held:,.0f} B")
    bench_pruning(server, env, 100)  # generated text: its common words make every list long


def bench_agreement(tmp: Path, env: dict, conversations: int, filler: int) -> None:
    """BM25's early-terminated top 10 against the exhaustive one (every posting read) on real
    text: each LoCoMo conversation's questions asked of its vault beside `filler` generated
    memories (their common words make the lists long enough to be cut)."""
    from bench.generate import write_memories
    from bench.locomo import DEFAULT_DATA, write_vault
    from memvault.indexer.backend.postgres import engine

    data = json.loads(DEFAULT_DATA.read_text())[:conversations]
    by_key, by_score, pruned_ms, whole_ms = [], [], [], []
    for number, sample in enumerate(data):
        root = tmp / f"agreement-{number}"
        write_vault(root, sample["conversation"], "builtin")
        write_memories(root, filler)
        on_server(root, f"agree-{number}")
        asked = [qa["question"] for qa in sample["qa"]]
        with MemoryStore.open(root, env=env, sync=False) as store:
            store.rebuild()
            backend, generation = store.backend, store.backend.serving_generation()
            pruned_ms += timed_ms(lambda q, b=backend, g=generation: b.lexical_candidates(g, q, 100), asked)
            lists = [backend.lexical_candidates(generation, q, 100) for q in asked]
            usual = engine.read_sizes
            engine.read_sizes = lambda depth: {"per_list": 10**9, "per_text": 10**9, "pool": 10**9}
            try:
                whole_ms += timed_ms(lambda q, b=backend, g=generation: b.lexical_candidates(g, q, 100), asked)
                exact = [backend.lexical_candidates(generation, q, 100) for q in asked]
            finally:
                engine.read_sizes = usual
        for a, b in zip(lists, exact, strict=True):
            if b:
                k = min(10, len(b))
                by_key.append(len({key for key, _ in a[:10]} & {key for key, _ in b[:10]}) / k)
                by_score.append(sum(1 for _, score in a[:10] if score >= b[k - 1][1] - 1e-9) / k)
    print(
        f"postgres BM25 top-10 agreement on real text ({len(by_key)} LoCoMo questions, {len(data)} "
        f"conversations each beside {filler:,} generated memories), early termination vs every posting: "
        f"{100 * statistics.mean(by_key):.1f}% by key, {100 * statistics.mean(by_score):.1f}% by score; "
        f"lexical call median {statistics.median(pruned_ms):.1f} ms vs {statistics.median(whole_ms):.1f} ms"
    )


def bench_owner(roots: dict[str, list[Path]], env: dict, query_count: int, writes: int) -> None:
    asked = queries(query_count)
    for backend in BACKENDS:
        root = roots[backend][0]
        owner = subprocess.Popen([sys.executable, "-m", "memvault", "--vault", str(root), "watch"],
                                 env={**os.environ, **env, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)  # fmt: skip
        try:
            store = _wait_for_owner(root, env)
            store.recall("warm up")
            recall = timed_ms(store.recall, asked)
            remember = timed_ms(
                lambda i, store=store: store.remember(f"Bench fact {i} about the owner path {time.time_ns()}."),
                range(writes),
            )
            store.close()
        finally:
            owner.terminate()
            owner.wait(60)
        print(f"{backend:8s} through the owner: hybrid recall {ms(recall)}; remember {ms(remember)}")


def _wait_for_owner(root: Path, env: dict):
    from memvault.indexer.engine.remote import RemoteStore

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        store = MemoryStore.open(root, env=env)
        if isinstance(store, RemoteStore):
            return store
        store.close()
        time.sleep(0.2)
    raise SystemExit(f"no owner answered for {root}")


def bench_import(tmp: Path, env: dict, items: int) -> None:
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault

    for backend in BACKENDS:
        root = tmp / f"import-{backend}"
        init_vault(root, render_config(default_config_data("journal", "UTC")))
        if backend == "postgres":
            on_server(root, "bench-import")
        facts = [f"Imported fact number {i} about shipment {i * 7 % 1000}." for i in range(items)]
        with MemoryStore.open(root, env=env) as store:
            started = time.perf_counter()
            store.remember_many(facts)
            seconds = time.perf_counter() - started
        print(f"{backend:8s} bulk import  {items} memories in {seconds:6.1f} s ({items / seconds:,.0f}/s)")


def bench_locomo(tmp: Path, env: dict, conversations: int, filler: int = 0) -> None:
    """LoCoMo evidence recall on both backends; with `filler`, each conversation's vault also
    holds that many generated memories (bench/generate.py), so the server's lexical lists are
    long enough to be cut where a question's words are common."""
    from bench.generate import write_memories
    from bench.locomo import _EVIDENCE_RE, DEFAULT_DATA, KS, dialog_id, write_vault

    data = json.loads(DEFAULT_DATA.read_text())[:conversations]
    scores: dict[tuple[str, str, int], list[float]] = {}
    for number, sample in enumerate(data):
        for backend in BACKENDS:
            root = tmp / f"locomo-{backend}-{number}"
            write_vault(root, sample["conversation"], "builtin")
            if filler:
                write_memories(root, filler)
            if backend == "postgres":
                on_server(root, f"locomo-{number}")
            with MemoryStore.open(root, env=env, sync=False) as store:
                store.rebuild()
                index = store.serving_index()
                for qa in sample["qa"]:
                    evidence = {e for raw in qa.get("evidence", []) for e in _EVIDENCE_RE.findall(raw)}
                    if not evidence:
                        continue
                    ranked = {
                        "hybrid": [dialog_id(h.source) for h in store.recall(qa["question"], limit=max(KS)).hits],
                        "bm25": [dialog_id(h.key) for h in index.bm25.search(qa["question"], max(KS))],
                    }
                    for retriever, found in ranked.items():
                        for k in KS:
                            share = len(evidence & set(found[:k])) / len(evidence)
                            scores.setdefault((backend, retriever, k), []).append(share)
    beside = f", each beside {filler:,} generated memories" if filler else ""
    print(f"LoCoMo evidence recall ({len(data)} conversations{beside}, builtin embeddings):")
    for retriever in ("hybrid", "bm25"):
        for backend in BACKENDS:
            shown = "  ".join(f"@{k} {100 * statistics.mean(scores[(backend, retriever, k)]):5.1f}" for k in KS)
            print(f"  {retriever:6s} {backend:8s} {shown}")
        gap = 100 * (
            statistics.mean(scores[("postgres", retriever, 10)]) - statistics.mean(scores[("local", retriever, 10)])
        )
        print(f"  {retriever:6s} postgres - local at @10: {gap:+.1f} points")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--vaults", type=int, default=10)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--writes", type=int, default=100)
    parser.add_argument("--import-items", type=int, default=2_000)
    parser.add_argument("--locomo", type=int, default=10, help="LoCoMo conversations (0: skip)")
    parser.add_argument(
        "--locomo-filler", type=int, default=0, help="generated memories beside each LoCoMo conversation in its vault"
    )
    parser.add_argument("--storage", type=int, default=0, help="memories of the storage vault (0: skip)")
    parser.add_argument("--agreement", type=int, default=0, help="LoCoMo conversations for BM25's agreement (0: skip)")
    parser.add_argument("--agreement-filler", type=int, default=10_000)
    parser.add_argument("--dsn", default=os.environ.get("MEMVAULT_INDEX_DSN", ""))
    args = parser.parse_args()
    server = None
    dsn = args.dsn
    if not dsn:
        server, dsn = start_server()
    env = {"MEMVAULT_INDEX_DSN": dsn}
    try:
        from memvault.indexer.backend import server_versions_of

        versions = server_versions_of(IndexConfig("postgres", "bench", dsn))
        print(f"PostgreSQL {versions['postgresql']}, pgvector {versions['pgvector']}; cores: {os.cpu_count()}")
        with tempfile.TemporaryDirectory(prefix="memvault-bench-", dir="/tmp") as tmp:
            tmp_path = Path(tmp)
            if args.storage:
                bench_storage(tmp_path, env, args.storage)
            if args.agreement:
                bench_agreement(tmp_path, env, args.agreement, args.agreement_filler)
            if args.memories:  # 0: LoCoMo alone
                roots = build_vaults(tmp_path, args.memories, args.vaults)
                print(f"{args.memories} memories over {args.vaults} vaults, 256-d builtin embeddings")
                bench_scale(roots, env, args.queries)
                bench_pruning(roots["postgres"][0], env, min(args.queries, 100))
                bench_owner(roots, env, min(args.queries, 100), args.writes)
                bench_import(tmp_path, env, args.import_items)
            if args.locomo:
                bench_locomo(tmp_path, env, args.locomo, args.locomo_filler)
    finally:
        if server is not None:
            server.cleanup()


if __name__ == "__main__":
    main()
