"""Agents on other machines sharing one vault through the index server (docs/team.md), same run.

    python -m bench.bench_team [--memories 2000] [--admits 500] [--clients 8] [--queries 100]
                               [--samples 20] [--remembers 25] [--dsn DSN] [--fsync-dir DIR]
                               (default: a pgserver under /tmp, its data folder for the fsync timing)

Prints, beside the server's bare `SELECT 1` round trip as the baseline:
* the machine: load averages and a fixed pure-Python loop's time at the start and the end (a
  shared machine's speed varies; compare runs by it), and the latency of one `fdatasync` of an
  8 KiB write on the server's data folder's disk (each commit's WAL flush waits for one);
* a remote admit (MemoryStore.connect(...).persist_completed_turn), median and p95, and the
  statements it sent on the caller's thread (one: the run ledger's upsert);
* admissions per second from --clients processes × --admits each (a quarter exact retries, a
  tenth conflicting, the suite's schedule: tests/team_client_driver.py), their loops started
  together after start-up, with the classification counts checked exactly, and `fdatasync`
  measured again right after them (a slow flush, not the client, bounds the rate then): once
  with the owner draining the turns on this same machine, once with no owner running (on a
  team the owner runs on the vault's home machine, not beside the clients);
* remote recall (tool mode) over a vault of --memories, median and p95, and (after the rest) how
  much of the exhaustive BM25 top 10 / top 100 its early-terminated lexical list keeps at that size;
* admit on one "machine" → searchable from another connected store, and → in the owner's files, p95;
* the issue's load against the owner (--clients × --admits, + --remembers facts per client): how
  long until every turn and fact is in its files, and how many were lost or duplicated (0, 0);
* recall from a streaming standby of the bench's server (--replica-queries, --replica-only:
  bench_replica.py) against the primary alone, the standby's replay lag after a write, and a
  recall right after the same process wrote;
* `search --across` over --across-vaults vaults of --across-memories each against one of them,
  median and p95 of the same questions, in process and as `memvault search --across` processes,
  with the statements and round trips each search sent (libpq's trace), and the reference path
  (each vault on a backend of its own, as before issue 42) beside it (--across-only: just this).
Every client runs on this one machine over the server's Unix socket: a network adds its round
trips. Figures from a loaded machine are labelled so by whoever quotes them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.bench_postgres import bench_pruning, on_server, start_server
from bench.bench_search import percentile, queries
from bench.generate import make_vault
from memvault.indexer.engine.connected import ConnectedStore
from memvault.indexer.engine.store import MemoryStore

REPO = Path(__file__).resolve().parent.parent
NAME = "team-a"  # the name tests/team_client_driver.py admits to


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples):7.2f} ms  p95 {percentile(samples, 0.95):7.2f} ms"


def select_one(dsn: str, count: int = 500) -> list[float]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            conn.execute("SELECT 1").fetchone()
            samples.append((time.perf_counter() - start) * 1000)
    return samples


def remote_admits(dsn: str, count: int) -> tuple[list[float], float]:
    """(each admit's time, the statements sent per admit on the caller's thread)."""
    import psycopg

    samples, sent = [], [0]
    caller = threading.get_ident()
    execute = psycopg.Cursor.execute

    def counted(self, *args, **kwargs):
        if threading.get_ident() == caller:
            sent[0] += 1
        return execute(self, *args, **kwargs)

    with ConnectedStore(NAME, dsn) as agent:
        agent.settings()
        psycopg.Cursor.execute = counted  # Connection.execute goes through a cursor too
        try:
            for i in range(count):
                start = time.perf_counter()
                result = agent.persist_completed_turn(
                    f"bench-admit-{i}", f"Bench turn {i} chose column{i} for the index."
                )
                samples.append((time.perf_counter() - start) * 1000)
                assert result.status == "admitted", result
        finally:
            psycopg.Cursor.execute = execute
    return samples, sent[0] / count


def machine() -> str:
    """Load averages and a fixed pure-Python loop's time: how busy and how fast the machine is."""
    started = time.perf_counter()
    total = 0
    for i in range(2_000_000):
        total += i
    loop_ms = (time.perf_counter() - started) * 1000
    return f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, CPU probe (2M-step loop) {loop_ms:.0f} ms"


def data_folder(dsn: str, given: str | None) -> Path | None:
    """The server's data folder when this machine can write to it (--fsync-dir, else the
    server's `data_directory` when it is local), else None."""
    if given:
        return Path(given)
    import psycopg

    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            folder = Path(conn.execute("SHOW data_directory").fetchone()[0])
    except psycopg.Error:
        return None
    return folder if folder.is_dir() and os.access(folder, os.W_OK) else None


def fdatasync_ms(folder: Path | None, count: int = 50) -> str:
    """One `fdatasync` after an 8 KiB write (a WAL page) in the folder, median and p95, as
    pg_test_fsync times it; the file is removed."""
    if folder is None:
        return "not measured (the server's data folder is not on this machine: --fsync-dir)"
    fd, name = tempfile.mkstemp(dir=folder, prefix=".memvault-bench-fsync-")
    try:
        page, samples = os.urandom(8192), []
        for _ in range(count):
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, page)
            start = time.perf_counter()
            os.fdatasync(fd)
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        os.close(fd)
        os.unlink(name)
    return ms(samples)


#: each run's first worker number (the drivers' run ids are made of them: no run repeats another's)
_FIRST_WORKER = {"rate": 100, "owner": 200, "no-owner": 300}


def many_clients(
    dsn: str, clients: int, admits: int, remembers: int = 0, tag: str = "rate"
) -> tuple[float, dict, float]:
    """(admissions/s over the clients' loops, run together after their start-up; the answers'
    classification counts, checked exactly; the time the first loop started)."""
    folder = Path(tempfile.mkdtemp(prefix=f"memvault-bench-go-{tag}-"))
    go = folder / "go"
    driver = [sys.executable, str(REPO / "tests" / "team_client_driver.py")]
    base = _FIRST_WORKER[tag]
    procs = [subprocess.Popen([*driver, dsn, str(base + w), "load", str(admits), str(remembers), str(go)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for w in range(clients)]  # fmt: skip
    deadline = time.monotonic() + 120
    while len(list(folder.glob("go.ready-*"))) < clients and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    calls, spans = [], []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        calls.extend(json.loads(out))
        spans.append(json.loads(err.strip().splitlines()[-1]))
    elapsed = max(s["ended"] for s in spans) - min(s["started"] for s in spans)
    counts: dict = {}
    for kind, _run, status, reason in calls:
        counts[(kind, status, reason)] = counts.get((kind, status, reason), 0) + 1
    expected = {("new", "admitted", None): clients * (admits - admits // 4 - admits // 10),
                ("retry", "duplicate", None): clients * (admits // 4),
                ("conflict", "failed", "conflict"): clients * (admits // 10)}  # fmt: skip
    if remembers:
        expected[("fact", "added", None)] = clients * remembers
    assert counts == expected, counts
    admissions = sum(1 for kind, *_ in calls if kind != "fact")
    return admissions / elapsed, counts, min(s["started"] for s in spans)


def owner_load(dsn: str, root: Path, clients: int, admits: int, remembers: int) -> str:
    """The issue's load against the owner: every turn and fact in its files exactly once."""
    import re

    _rate, counts, started = many_clients(dsn, clients, admits, remembers, tag="owner")
    new = counts[("new", "admitted", None)]
    facts = clients * remembers
    deadline = time.time() + 600
    while time.time() < deadline:
        text = files_text(root)
        if len(re.findall(r"for the queue\.", text)) >= new and len(re.findall(r"warm\.", text)) >= facts:
            break
        time.sleep(0.1)
    drained = time.time() - started
    text = files_text(root)
    lost = duplicated = 0
    for w in range(clients):
        for j in range(admits):
            want = 1 if j % 4 != 3 and j % 10 != 4 else 0
            got = text.count(f"shard{200 + w}x{j} for the queue.")
            lost += got < want
            duplicated += got > want
        for k in range(remembers):
            got = text.count(f"bucket{200 + w}x{k} warm.")
            lost += got < 1
            duplicated += got > 1
    conflicting = text.count("Or not.")
    return (
        f"{new} turns + {facts} facts in the owner's files {drained:.1f} s after the first admit "
        f"({(new + facts) / drained:.0f}/s); lost {lost}, duplicated {duplicated}, conflicting written {conflicting}; "
        f"{counts[('new', 'admitted', None)]} admitted, {counts[('retry', 'duplicate', None)]} duplicate, "
        f"{counts[('conflict', 'failed', 'conflict')]} conflict, {counts[('fact', 'added', None)]} facts added"
    )


def files_text(root: Path) -> str:
    return "".join(p.read_text() for p in sorted((root / "daily").rglob("*.md")))


def remote_recall(dsn: str, count: int) -> list[float]:
    samples = []
    with ConnectedStore(NAME, dsn) as agent:
        agent.recall("warm up the embedder")
        for query in queries(count):
            start = time.perf_counter()
            agent.recall(query, limit=10)
            samples.append((time.perf_counter() - start) * 1000)
    return samples


def across_vaults(dsn: str, folder: Path, vaults: int, memories: int) -> list[str]:
    """--across's vaults: journal vaults of generated memories (other seeds), built on the server."""
    names = [f"across-{i}" for i in range(vaults)]
    for i, name in enumerate(names):
        root = on_server(make_vault(folder / name, memories, mode="journal", seed=100 + i), name)
        with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as store:
            store.rebuild()
    return names


def wire_counts(dsn: str, call) -> tuple[int, int]:
    """(statements, round trips) `call()` sent on this process's idle pooled connections: the Execute
    and Query messages libpq's trace shows sent, and the ReadyForQuery messages received."""
    import psycopg

    from memvault.indexer.backend.postgres.connection import shared_pool

    traces = []
    for conn in shared_pool(dsn).idle:
        handle = tempfile.NamedTemporaryFile("w+", suffix=".trace")
        conn.pgconn.trace(handle.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
        traces.append((conn, handle))
    call()
    statements = trips = 0
    for conn, handle in traces:
        conn.pgconn.untrace()
        handle.seek(0)
        for line in handle.read().splitlines():
            parts = line.split("\t")
            statements += parts[0] == "F" and parts[2] in ("Execute", "Query")
            trips += parts[0] == "B" and parts[2] == "ReadyForQuery"
        handle.close()
    return statements, trips


def across_figures(dsn: str, names: list[str], count: int) -> None:
    """`search --across` over every vault of `names` against one, the batched path beside the
    per-vault reference (as before issue 42), the same questions alternating: in one process with
    the pool kept warm by another session (an owner's, a long-lived host's), in one process whose
    pool starts empty at each search (a script's), and in a fresh process per search (the CLI's)."""
    from memvault.indexer.backend.postgres.connection import ServerSession

    paths = {"one vault": ("across", names[:1]), f"{len(names)} vaults": ("across", names),
             f"{len(names)} vaults, per vault (before)": ("across_per_vault", names)}  # fmt: skip
    keeper = ServerSession(dsn)  # a session that stays: the pool keeps its connection between searches
    with keeper():
        pass
    for search, chosen in paths.values():
        _across(search)(chosen, "warm up the embedder and the connection", dsn=dsn)
    warm = _across_samples(dsn, paths, count)
    for label, (search, chosen) in paths.items():
        statements, trips = wire_counts(
            dsn, lambda s=search, c=chosen: _across(s)(c, "who keeps the deploy keys?", dsn=dsn)
        )
        print(f"search --across, {label:<38} {ms(warm[label])}  ({statements} statements, {trips} round trips)")
    keeper.close()
    cold = _across_samples(dsn, paths, max(5, count // 3))
    for label in paths:
        print(f"search --across, {label + ', pool empty at each':<38} {ms(cold[label])}")
    for label, (search, chosen) in paths.items():
        runs = []
        for query in queries(5):
            code = (f"from memvault.indexer.engine.{search} import search_{search}; "
                    f"search_{search}({chosen!r}, {query!r}, dsn={dsn!r})")  # fmt: skip
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
            runs.append((time.perf_counter() - start) * 1000)
        print(f"search --across, {label + ', a process each':<38} {ms(runs)}")
    for label, (_search, chosen) in list(paths.items())[:2]:
        runs = []
        for query in queries(5):
            command = [str(Path(sys.executable).parent / "memvault"), "search", "--across", ",".join(chosen), query]
            start = time.perf_counter()
            subprocess.run(command, env={**os.environ, "MEMVAULT_INDEX_DSN": dsn}, capture_output=True, check=True)
            runs.append((time.perf_counter() - start) * 1000)
        print(f"`memvault search --across`, {label:<27} {ms(runs)}")


def _across(module: str):
    import importlib

    return getattr(importlib.import_module(f"memvault.indexer.engine.{module}"), f"search_{module}")


def _across_samples(dsn: str, paths: dict, count: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {label: [] for label in paths}
    for query in queries(count):
        for label, (search, chosen) in paths.items():
            start = time.perf_counter()
            _across(search)(chosen, query, dsn=dsn)
            samples[label].append((time.perf_counter() - start) * 1000)
    return samples


def admit_to_visible(dsn: str, root: Path, samples: int) -> tuple[list[float], list[float]]:
    searchable, in_files = [], []
    with ConnectedStore(NAME, dsn) as writer, ConnectedStore(NAME, dsn) as reader:
        for i in range(samples):
            token = f"zq{i}vx{int(time.time() * 1000) % 100000}"
            start = time.perf_counter()
            assert writer.persist_completed_turn(f"bench-visible-{token}", f"The {token} flag guards the rollout.").ok
            seen_search = seen_file = None
            deadline = start + 60
            while (seen_search is None or seen_file is None) and time.perf_counter() < deadline:
                if seen_file is None and any(token in p.read_text() for p in (root / "daily").rglob("*.md")):
                    seen_file = time.perf_counter()
                if seen_search is None and any(
                    token in hit.text for hit in reader.recall(f"{token} flag", limit=3).hits
                ):
                    seen_search = time.perf_counter()
                time.sleep(0.01)
            searchable.append(((seen_search or deadline) - start) * 1000)
            in_files.append(((seen_file or deadline) - start) * 1000)
    return searchable, in_files


def replica(server, dsn: str, count: int) -> None:
    """The standby figures (bench_replica.py) against a standby of the bench's own server."""
    if server is None:
        print("recall from a standby              skipped: only against the bench's own server (no --dsn)")
        return
    from bench.bench_replica import Standby, replica_figures

    standby = Standby.of(dsn)
    try:
        replica_figures(NAME, dsn, standby.dsn(dsn), count, ms)
    finally:
        standby.destroy()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--admits", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--remembers", type=int, default=25, help="per client in the owner load (0: skip it)")
    parser.add_argument(
        "--pruning-queries",
        type=int,
        default=50,
        help="questions whose BM25 list is compared with every posting read (0: skip)",
    )
    parser.add_argument("--across-vaults", type=int, default=10, help="vaults --across searches (0: skip)")
    parser.add_argument("--across-memories", type=int, default=1000, help="memories in each of them")
    parser.add_argument("--across-only", action="store_true", help="only the --across figures")
    parser.add_argument(
        "--replica-queries",
        type=int,
        default=50,
        help="recall from a streaming standby the bench starts (0: skip; the bench's own server only)",
    )
    parser.add_argument("--replica-only", action="store_true", help="only the standby figures")
    parser.add_argument("--dsn", default=None)
    parser.add_argument(
        "--fsync-dir", default=None, help="a folder on the server's data disk (default: its data_directory)"
    )
    args = parser.parse_args()
    server = None
    if args.dsn is None:
        server, dsn = start_server()
    else:
        dsn = args.dsn
    folder = Path(tempfile.mkdtemp(prefix="memvault-bench-team-"))
    if args.across_only:
        return _figures_alone(
            server,
            lambda: across_figures(
                dsn, across_vaults(dsn, folder, args.across_vaults, args.across_memories), args.queries
            ),
        )
    root = on_server(make_vault(folder / NAME, args.memories), NAME)
    if args.replica_only:

        def replica_figures() -> None:
            with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}) as owner:
                owner.rebuild()
            replica(server, dsn, args.replica_queries)

        return _figures_alone(server, replica_figures)
    from memvault.indexer.backend import server_versions_of
    from memvault.vault.config import IndexConfig

    versions = server_versions_of(IndexConfig("postgres", NAME, dsn))
    print(
        f"PostgreSQL {versions['postgresql']}, pgvector {versions['pgvector']};"
        " clients on this machine over a Unix socket"
    )
    disk = data_folder(dsn, args.fsync_dir)
    owner = MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn})
    started = time.perf_counter()
    owner.rebuild()
    print(f"owner rebuild, {args.memories} memories   {time.perf_counter() - started:7.1f} s")
    owner.start_intake(poll_seconds=0.05)
    try:
        print(f"machine at the start              {machine()}")
        print(f"fdatasync, server's data disk     {fdatasync_ms(disk)}")
        print(f"server SELECT 1 (baseline)        {ms(select_one(dsn))}")
        searchable, in_files = admit_to_visible(dsn, root, args.samples)  # first: before any backlog
        print(f"admit → searchable elsewhere      {ms(searchable)}")
        print(f"admit → in the owner's files      {ms(in_files)}")
        print(f"remote recall, {args.memories} memories      {ms(remote_recall(dsn, args.queries))}")
        if args.replica_queries:
            replica(server, dsn, args.replica_queries)
        if args.remembers:
            print(
                f"owner load, {args.clients} × {args.admits} admits + {args.clients * args.remembers} remembers: "
                f"{owner_load(dsn, root, args.clients, args.admits, args.remembers)}"
            )
        admits, statements = remote_admits(dsn, args.admits)
        print(f"remote admit                      {ms(admits)}  ({statements:.2f} statements per admit)")
        rate, counts, _ = many_clients(dsn, args.clients, args.admits)
        print(
            f"admissions/s, {args.clients} client processes   {rate:9.0f} /s  ({sum(counts.values())} calls, "
            f"classification exact: {counts[('new', 'admitted', None)]} admitted, "
            f"{counts[('retry', 'duplicate', None)]} duplicate, {counts[('conflict', 'failed', 'conflict')]} conflict)"
        )
        print(f"fdatasync right after             {fdatasync_ms(disk)}")
        # the owner drains every turn into its files on this same machine meanwhile; on a team
        # it runs on the home machine, so the rate is measured again with turns left waiting
        owner.close()
        owner = None
        rate, counts, _ = many_clients(dsn, args.clients, args.admits, tag="no-owner")
        print(f"admissions/s, no owner running    {rate:9.0f} /s  ({sum(counts.values())} calls, classification exact)")
        print(f"fdatasync right after             {fdatasync_ms(disk)}")
        if args.across_vaults:
            across_figures(dsn, across_vaults(dsn, folder, args.across_vaults, args.across_memories), args.queries)
        if args.pruning_queries:  # what remote recall's lexical list gives up for its speed at this size
            bench_pruning(root, {"MEMVAULT_INDEX_DSN": dsn}, args.pruning_queries)
        print(f"server SELECT 1 (baseline, again)  {ms(select_one(dsn))}")
        print(f"machine at the end                {machine()}")
    finally:
        if owner is not None:
            owner.close()
        if server is not None:
            server.cleanup()
    return 0


def _figures_alone(server, figures) -> int:
    """One part of the bench on its own (--across-only, --replica-only), the machine's state
    printed around it, the bench's own server stopped after."""
    try:
        print(f"machine at the start              {machine()}")
        figures()
        print(f"machine at the end                {machine()}")
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
