"""Reads from a hot standby (docs/team.md, "Reads from a standby"), printed by bench_team.py:

* remote recall with MEMVAULT_INDEX_READ_DSN at a streaming standby against the primary alone,
  the same questions alternating, median and p95 (and where the reads went);
* the standby's replay lag: from a remembered fact's commit on the primary (its WAL position
  right after) until the standby's `pg_last_wal_replay_lsn()` reaches it, median and p95;
* a recall right after the same process remembered (read-your-writes: it reads the primary until
  the standby has replayed the write).

`Standby` starts the standby (`pg_basebackup -R` of a local primary, on its own socket under
/tmp); tests/test_postgres_replica.py uses it too.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.bench_search import queries


def _as_server_user(command: list[str]) -> None:
    user = "pgserver" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
    subprocess.run(command, check=True, user=user, capture_output=True, timeout=120)


class Standby:
    """A streaming standby of the primary on `socket_dir`/`port` (trust auth over the socket, as a
    pgserver's), in its own data folder and socket folder under /tmp."""

    def __init__(self, socket_dir: str, port: int):
        from pgserver._commands import POSTGRES_BIN_PATH

        self.bin, self.port = POSTGRES_BIN_PATH, port
        self.pgdata = Path(tempfile.mkdtemp(prefix="memvault-standby-", dir="/tmp"))  # /tmp only: docs/team.md
        self.socket_dir = Path(tempfile.mkdtemp(prefix="memvault-standby-sock-", dir="/tmp"))
        if os.geteuid() == 0:
            for folder in (self.pgdata, self.socket_dir):
                shutil.chown(folder, "pgserver", "pgserver")
        _as_server_user([str(self.bin / "pg_basebackup"), "-D", str(self.pgdata), "-R", "-X", "stream", "-c", "fast",
                         "-h", socket_dir, "-p", str(port), "-U", "postgres"])  # fmt: skip
        self.start()

    @classmethod
    def of(cls, dsn: str) -> "Standby":
        import psycopg

        parts = psycopg.conninfo.conninfo_to_dict(dsn)
        return cls(parts["host"], int(parts.get("port") or 5432))

    def start(self) -> None:
        options = f"-h '' -k {self.socket_dir} -p {self.port}"
        _as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-o", options, "-l",
                         str(self.pgdata / "log"), "start"])  # fmt: skip

    def stop(self) -> None:
        _as_server_user([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "stop"])

    def dsn(self, primary_dsn: str) -> str:
        database = primary_dsn.rsplit("dbname=", 1)[1].split()[0]
        return f"host={self.socket_dir} port={self.port} user=postgres dbname={database}"

    def destroy(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.pgdata, ignore_errors=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def replay_wait_ms(primary_dsn: str, standby_dsn: str, lsn: str, timeout: float = 30.0) -> float:
    """Milliseconds until the standby has replayed `lsn` (polled every 0.5 ms)."""
    import psycopg

    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        start = time.perf_counter()
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
            if time.perf_counter() - start > timeout:
                raise RuntimeError(f"the standby did not replay {lsn} within {timeout:g} s")
            time.sleep(0.0005)
        return (time.perf_counter() - start) * 1000


def replica_figures(name: str, primary_dsn: str, standby_dsn: str, count: int, ms) -> None:
    """Print the figures of the module docstring (`ms` formats a list of milliseconds)."""
    import psycopg

    from memvault.indexer.engine.connected import ConnectedStore

    both = {"primary": {"MEMVAULT_INDEX_DSN": primary_dsn},
            "standby": {"MEMVAULT_INDEX_DSN": primary_dsn, "MEMVAULT_INDEX_READ_DSN": standby_dsn}}  # fmt: skip
    samples: dict[str, list[float]] = {"primary": [], "standby": []}
    went: dict[str, set] = {"primary": set(), "standby": set()}
    stores = {label: ConnectedStore.connect(name, env=env) for label, env in both.items()}
    try:
        for store in stores.values():
            store.recall("warm up the embedder")
        for query in queries(count):
            for label, store in stores.items():
                start = time.perf_counter()
                store.recall(query, limit=10)
                samples[label].append((time.perf_counter() - start) * 1000)
                went[label].add(getattr(store.backend._reads, "last", "primary"))
    finally:
        for store in stores.values():
            store.close()
    where = ", ".join(sorted(went["standby"]))
    print(f"remote recall, primary only       {ms(samples['primary'])}")
    print(f"remote recall, read DSN: standby  {ms(samples['standby'])}  (reads went to: {where})")
    lags, after, reads = [], [], {"standby": 0, "primary": 0}
    agent = ConnectedStore.connect(name, env=both["standby"])
    try:
        with psycopg.connect(primary_dsn, autocommit=True) as primary:
            for number in range(max(5, count // 5)):
                agent.remember(f"Replica probe {number}: the standby replays fact {number} of this run.")
                lsn = primary.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
                lags.append(replay_wait_ms(primary_dsn, standby_dsn, lsn))
                agent.remember(f"Replica echo {number}: read back at once by the process that wrote it.")
                before = dict(agent.backend._reads.counts)
                start = time.perf_counter()
                agent.recall(f"replica echo {number} read back", limit=10)  # the primary until the standby replayed
                after.append((time.perf_counter() - start) * 1000)
                for label, seen in agent.backend._reads.counts.items():
                    reads[label] += seen - before[label]
    finally:
        agent.close()
    print(f"standby replay lag after a write  {ms(lags)}")
    print(f"recall right after own remember   {ms(after)}  (read DSN set: {reads['primary']} of its reads on the "
          f"primary, {reads['standby']} on the standby once it had replayed the write)")  # fmt: skip
