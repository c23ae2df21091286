"""50 agent processes × 10 vaults on one index server (issue 42, "what it must show").

    python -m bench.bench_agents50 [--agents 50] [--vaults 10] [--seconds 60] [--pool-size 2]
                                   [--timeout 5] [--memories 200] [--quick]

Three runs of the same mixed load (40% admit, 20% remember, 40% recall, each agent on a random
vault per call, every agent process a `MemoryStore.connect` client started together):
* steady: the server left alone;
* restart: the primary stopped (fast) and started again a third of the way in;
* stall: every agent reaches the server through a TCP proxy that, a third of the way in, stops
  forwarding for 2.5 × the bound while every socket stays open.
Each prints ops/s, p50/p95 per operation, errors (and how many came after the server was back),
acknowledged writes missing from the server (lost) or present twice (duplicated), the slowest
call against its bound, and the most `memvault` connections pg_stat_activity showed (sampled
every 50 ms) against agents × --pool-size. Before them, the same operations on a local vault
(Tantivy + hnswlib, in process) as the baseline. --quick: 8 agents, 3 vaults, 15 s.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.bench_search import percentile
from bench.generate import make_vault

REPO = Path(__file__).resolve().parent.parent

OPS = ("admit", "remember", "recall")
WEIGHTS = (0.4, 0.2, 0.4)


def pct(samples: list[float]) -> str:
    if not samples:
        return "      -"
    return f"p50 {statistics.median(samples):7.1f} ms  p95 {percentile(samples, 0.95):7.1f} ms"


# --- one agent process -------------------------------------------------------------------------


def agent_main(args) -> None:
    from memvault import MemoryStore

    env = json.loads(args.env)
    vaults = args.vault_names.split(",")
    rng = random.Random(args.agent)
    stores = {name: MemoryStore.connect(name, env=env) for name in vaults}
    Path(f"{args.go}.ready-{args.agent}").touch()
    while not Path(args.go).exists():
        time.sleep(0.01)
    start = float(Path(args.go).read_text())
    out, j = [], 0
    while time.time() - start < args.seconds:
        j += 1
        op = rng.choices(OPS, WEIGHTS)[0]
        name = rng.choice(vaults)
        began = time.time()
        record = {"op": op, "vault": name, "t": began - start}
        try:
            store = stores[name]
            if op == "admit":
                text = f"Agent {args.agent} turn {j} moved shard {j}."
                result = store.persist_completed_turn(f"{args.go}-a{args.agent}-{j}", text)  # new runs each run
                ok = result.status in ("admitted", "duplicate")
                record.update(ok=ok, id=result.id, status=result.status, why=None if ok else result.message[:300])
            elif op == "remember":
                receipt = store.remember(f"Agent {args.agent} keeps bucket {j} warm in vault {name} ({args.go[-30:]}).")
                record.update(ok=True, id=receipt.id, status=receipt.status)
            else:
                store.recall(rng.choice(("which bucket stays warm?", "who moved the shard?", "deployment color")))
                record.update(ok=True)
        except Exception as exc:  # noqa: BLE001 - counted as the call's error
            record.update(ok=False, why=f"{type(exc).__name__}: {exc}"[:300])
        record["ms"] = (time.time() - began) * 1000
        out.append(record)
    for store in stores.values():
        store.close()
    Path(args.out).write_text(json.dumps(out))


# --- the bench ---------------------------------------------------------------------------------


class Sampler:
    """The most `memvault` connections pg_stat_activity shows, every 50 ms (missed while the server is away)."""

    def __init__(self, admin_dsn: str):
        self.admin_dsn, self.most, self.stop = admin_dsn, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        import psycopg

        conn = None
        while not self.stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(self.admin_dsn, autocommit=True, application_name="bench-sampler")
                count = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'memvault'"
                                     ).fetchone()[0]  # fmt: skip
                self.most = max(self.most, count)
            except Exception:  # noqa: BLE001 - the server is away (the restart run)
                conn = None
            time.sleep(0.05)

    def close(self) -> int:
        self.stop.set()
        self.thread.join(5)
        return self.most


def run_load(label, dsn, admin_dsn, vaults, opts, disrupt=None) -> dict:
    """One run: start the agents, release them together, disrupt (a callable, in a thread, given the
    start time; it returns (down, back) seconds into the run), collect and check."""
    folder = Path(tempfile.mkdtemp(prefix="memvault-agents50-"))
    go = folder / "go"
    env = {"MEMVAULT_INDEX_DSN": dsn, "MEMVAULT_INDEX_POOL_SIZE": str(opts.pool_size),
           "MEMVAULT_INDEX_TIMEOUT_SECONDS": str(opts.timeout), "PATH": os.environ.get("PATH", "")}  # fmt: skip
    agents = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.bench_agents50",
                "--agent",
                str(n),
                "--env",
                json.dumps(env),
                "--vault-names",
                ",".join(vaults),
                "--go",
                str(go),
                "--out",
                str(folder / f"out-{n}.json"),
                "--seconds",
                str(opts.seconds),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        for n in range(opts.agents)
    ]
    deadline = time.monotonic() + 600
    while sum(1 for n in range(opts.agents) if (folder / f"go.ready-{n}").exists()) < opts.agents:
        dead = [a for a in agents if a.poll() is not None]
        if dead:
            raise RuntimeError(f"an agent died at its start: {dead[0].stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("the agents did not start within 10 minutes")
        time.sleep(0.1)
    sampler = Sampler(admin_dsn)
    start = time.time()
    (folder / "go.tmp").write_text(repr(start))
    (folder / "go.tmp").rename(go)  # whole, or not there: an agent never reads it half written
    window = {}
    if disrupt is not None:

        def disrupted():
            window.update(zip(("down", "back"), disrupt(start), strict=True))

        thread = threading.Thread(target=disrupted, daemon=True)
        thread.start()
    for agent in agents:
        _, err = agent.communicate(timeout=opts.seconds + 600)
        if agent.returncode != 0:
            raise RuntimeError(f"an agent failed: {err.decode()[-2000:]}")
    most = sampler.close()
    if disrupt is not None:
        thread.join(120)
    records = [r for n in range(opts.agents) for r in json.loads((folder / f"out-{n}.json").read_text())]
    return {"label": label, "records": records, "most": most, "window": window,
            "check": check_writes(admin_dsn, records)}  # fmt: skip


def check_writes(admin_dsn: str, records: list[dict]) -> dict:
    """Acknowledged admissions and facts on the server: missing (lost), or held twice (duplicated)."""
    import psycopg

    turns = {r["id"] for r in records if r["op"] == "admit" and r["ok"]}
    facts = {r["id"] for r in records if r["op"] == "remember" and r["ok"]}
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        held_turns = conn.execute("SELECT run_hash, count(*) FROM memvault_team_turns WHERE run_hash = ANY(%s) "
                                  "GROUP BY run_hash", (list(turns),)).fetchall()  # fmt: skip
        held_facts = conn.execute("SELECT id, count(*) FROM memvault_team_facts WHERE id = ANY(%s) GROUP BY id",
                                  (list(facts),)).fetchall()  # fmt: skip
        stored = conn.execute("SELECT count(*) FROM memvault_team_turns").fetchone()[0]
    return {
        "acknowledged": len(turns) + len(facts),
        "lost": len(turns) - len(held_turns) + len(facts) - len(held_facts),
        "duplicated": sum(1 for _, n in held_turns + held_facts if n > 1),
        "turns_stored": stored,
    }


def report(result: dict, opts) -> None:
    records, window = result["records"], result["window"]
    seconds = opts.seconds
    print(f"\n{result['label']}: {len(records)} calls in {seconds} s by {opts.agents} agents over {opts.vaults} vaults "
          f"= {len(records) / seconds:.0f} ops/s")  # fmt: skip
    for op in OPS:
        done = [r["ms"] for r in records if r["op"] == op and r["ok"]]
        failed = [r for r in records if r["op"] == op and not r["ok"]]
        print(f"  {op:9s} {len(done):6d} ok  {pct(done)}  errors {len(failed)}")
    errors = [r for r in records if not r["ok"]]
    if window:
        late = [r for r in errors if r["t"] > window["back"]]
        print(f"  disruption from {window['down']:.1f} s to {window['back']:.1f} s: errors {len(errors)} "
              f"(during it {len(errors) - len(late)}, after the server was back {len(late)})")  # fmt: skip
        for r in late[:3]:
            print(f"    after: {r['op']} at {r['t']:.1f} s: {r.get('why')}")
    else:
        print(f"  errors {len(errors)}")
    for r in errors[:2]:
        print(f"    e.g. {r['op']} at {r['t']:.1f} s after {r['ms']:.0f} ms: {r.get('why')}")
    check = result["check"]
    bound = (2 * opts.timeout + 2) * 1000
    slowest = max(r["ms"] for r in records)
    print(f"  acknowledged writes {check['acknowledged']}: lost {check['lost']}, duplicated {check['duplicated']} "
          f"(ledger rows now {check['turns_stored']})")  # fmt: skip
    print(
        f"  slowest call {slowest:.0f} ms; bound {bound:.0f} ms (2 × index.timeoutSeconds + 2 s: a wait for a "
        f"pooled connection, then the statement's own); past it: {sum(1 for r in records if r['ms'] > bound)}"
    )
    print(
        f"  memvault connections in use (pg_stat_activity, most seen): {result['most']} "
        f"against the bound {opts.agents} agents × poolSize {opts.pool_size} = {opts.agents * opts.pool_size}"
    )


def local_baseline(folder: Path, seconds: float) -> None:
    """The same operations on a local vault in process (Tantivy + hnswlib; no server)."""
    from memvault import MemoryStore

    root = make_vault(folder / "local", 200, mode="journal")
    timings = {op: [] for op in OPS}
    with MemoryStore.open(root, env={}) as store:
        rng, j, end = random.Random(7), 0, time.monotonic() + seconds
        while time.monotonic() < end:
            j += 1
            op = rng.choices(OPS, WEIGHTS)[0]
            began = time.perf_counter()
            if op == "admit":
                store.persist_completed_turn(f"local-{j}", f"Local turn {j} moved shard {j}.")
            elif op == "remember":
                store.remember(f"Local agent keeps bucket {j} warm.")
            else:
                store.recall("which bucket stays warm?")
            timings[op].append((time.perf_counter() - began) * 1000)
    print(f"local vault, one process, in process ({seconds:.0f} s, {sum(map(len, timings.values()))} calls):")
    for op in OPS:
        print(f"  {op:9s} {len(timings[op]):6d} ok  {pct(timings[op])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--vaults", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=5)
    parser.add_argument("--memories", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("steady", "restart", "stall"))
    parser.add_argument("--agent", type=int)  # the agent process's own arguments
    parser.add_argument("--env")
    parser.add_argument("--vault-names")
    parser.add_argument("--go")
    parser.add_argument("--out")
    opts = parser.parse_args()
    if opts.agent is not None:
        agent_main(opts)
        return
    if opts.quick:
        opts.agents, opts.vaults, opts.seconds, opts.memories = 8, 3, 15, 50
    import psycopg

    from bench.bench_postgres import on_server
    from memvault import MemoryStore
    from memvault.indexer.backend import open_team_server
    from tests.postgres_helpers import PostgresServer
    from tests.test_postgres_walls import StallingProxy

    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    folder = Path(tempfile.mkdtemp(prefix="memvault-agents50-bench-"))
    local_baseline(folder, min(20.0, opts.seconds / 3))
    server = PostgresServer.start_new()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:  # agents × pool + the owners' builds
            conn.execute(f"ALTER SYSTEM SET max_connections = {opts.agents * opts.pool_size + 40}")
        server.stop()
        server.restart()
        dsn = server.new_database()
        vaults = [f"v{i}" for i in range(opts.vaults)]
        for i, name in enumerate(vaults):
            root = on_server(make_vault(folder / name, opts.memories, mode="journal", seed=i + 1), name)
            with MemoryStore.open(root, env={"MEMVAULT_INDEX_DSN": dsn}):
                pass  # the owner's open builds the vault's index on the server
            open_team_server(dsn, name, create=True).close()
        print(f"server: PostgreSQL 18 + pgvector (pgserver), max_connections {opts.agents * opts.pool_size + 40}; "
              f"{opts.vaults} journal vaults of {opts.memories} memories; index.timeoutSeconds {opts.timeout}; "
              "no owner drains during the runs (the turns wait in the ledger)")  # fmt: skip

        def restart(start):
            time.sleep(opts.seconds / 3)
            down = time.time() - start
            server.stop()
            server.restart()
            return down, time.time() - start

        runs = {"steady": lambda: run_load("steady", dsn, dsn, vaults, opts),
                "restart": lambda: run_load("restart in the middle", dsn, dsn, vaults, opts, restart)}  # fmt: skip
        for name, run in runs.items():
            if opts.only in (None, name):
                report(run(), opts)
        if opts.only in (None, "stall"):
            proxy = StallingProxy(f"{server.socket_dir}/.s.PGSQL.{server.port}")
            proxy.listener.listen(1024)
            database = dsn.rsplit("dbname=", 1)[1]
            proxied = f"host=127.0.0.1 port={proxy.port} user=postgres dbname={database}"

            def stall(start):
                time.sleep(opts.seconds / 3)
                down = time.time() - start
                proxy.stall()
                time.sleep(2.5 * opts.timeout)
                proxy.resume()
                return down, time.time() - start

            report(run_load("stalled proxy in the middle", proxied, dsn, vaults, opts, stall), opts)
            proxy.close()
    finally:
        server.destroy()


if __name__ == "__main__":
    main()
