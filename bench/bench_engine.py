"""The resident engine: what a CLI call costs with and without an owner, and what the owner costs.

    python -m bench.bench_engine [--memories 10000] [--calls 30] [--resident 100000]

Prints figures, each beside a baseline measured in the same run; asserts nothing. Targets
(issue #13): `memvault search` ≤ 120 ms median per CLI process with the owner running, ≤ 600 ms
without (floors: a bare `python -c pass` and `memvault --help`); admit → searchable p95 ≤ 1 s;
remember through a running owner ≤ 30 ms median; bulk import ≥ 1,000 memories/s (Journal tier,
builtin embeddings) against a plain fsynced append of the same lines; a 1,000-note checkout
under an owner has complete vectors (strict health clean) within 60 s; the owner's resident
memory at 100k memories (goal ≤ 500 MB) and its idle CPU.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

from bench.generate import make_vault

REPO = Path(__file__).resolve().parent.parent
MEMVAULT = [sys.executable, "-m", "memvault"]
#: bytecode caching on, as on any normal install (pip compiles it; Python writes it on first
#: import): a sandbox's PYTHONDONTWRITEBYTECODE=1 would make every process recompile the
#: modules changed since their cache was written, a cost no user's CLI call pays
ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_") and k != "PYTHONDONTWRITEBYTECODE"},
       "PYTHONPATH": str(REPO)}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_ms(args: list[str], input: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, input=input, capture_output=True, text=True, env=ENV, cwd=REPO)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{args}: {done.stderr}")
    return elapsed


def line(label: str, samples: list[float], unit: str = "ms") -> None:
    print(
        f"  {label:<44} median {statistics.median(samples):8.1f} {unit}   p95 {percentile(samples, 0.95):8.1f} {unit}"
    )


class Owner:
    def __init__(self, root: Path):
        self.proc = subprocess.Popen(
            [*MEMVAULT, "--vault", str(root), "serve"],
            env=ENV,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        from memvault.indexer.engine.client import find_owner

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            found = find_owner(root)
            if found is not None and found.pid == self.proc.pid:
                return
            time.sleep(0.1)
        raise RuntimeError("the owner did not come up")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)

    def rss_mb(self) -> float:
        for row in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_cli(root: Path, calls: int) -> None:
    queries = [f"who moved the staging cluster {n}" for n in range(calls)]
    cli = [*MEMVAULT, "--vault", str(root)]
    print(f"CLI process per call ({calls} calls each)")
    line("floor: python -c pass", [run_ms([sys.executable, "-c", "pass"]) for _ in range(calls)])
    line("floor: memvault --help", [run_ms([*MEMVAULT, "--help"]) for _ in range(calls)])
    run_ms([*cli, "search", "warm up"])
    line("memvault search, no owner (in-process)", [run_ms([*cli, "search", q]) for q in queries])
    owner = Owner(root)
    try:
        run_ms([*cli, "search", "warm up"])
        line("memvault search, owner running", [run_ms([*cli, "search", q]) for q in queries])
        latencies = []
        for n in range(calls):
            marker = f"zephyrine{n}"
            started = time.perf_counter()
            run_ms([*cli, "admit"], input=json.dumps({"runId": f"bench-{n}", "answer": f"Bench turn {marker} landed."}))
            while (
                marker not in subprocess.run([*cli, "search", marker], capture_output=True, text=True, env=ENV).stdout
            ):
                pass
            latencies.append((time.perf_counter() - started) * 1000)
        line("admit → searchable through the CLI (owner)", latencies)
        from memvault import MemoryStore

        with MemoryStore.open(root) as client:
            assert type(client).__name__ == "RemoteStore"
            samples = []
            for n in range(calls * 3):
                started = time.perf_counter()
                client.remember(f"Bench remember {n} through the owner.")
                samples.append((time.perf_counter() - started) * 1000)
        line("remember through the owner (Python client)", samples)
        time.sleep(5)  # the remembers' vectors and index commit finish first: then it is idle
        idle_before = owner.cpu_seconds()
        time.sleep(10)
        print(
            f"  owner idle CPU over 10 s (after a 5 s settle): {owner.cpu_seconds() - idle_before:.3f} s; "
            f"resident {owner.rss_mb():.0f} MB"
        )
    finally:
        owner.stop()


def bench_bulk(tmp: Path, count: int) -> None:
    from datetime import datetime, timedelta

    from memvault import MemoryStore
    from memvault.vault.config import default_config_data, render_config
    from memvault.vault.init import init_vault

    start = datetime(2026, 1, 1, tzinfo=UTC)  # a backfill in time order: 96 memories a day
    lines = [
        json.dumps(
            {
                "text": f"Imported memory {n}: the ferry left pier {n % 97} at dawn.",
                "at": (start + timedelta(minutes=15 * n)).isoformat(),
            }
        )
        + "\n"
        for n in range(count)
    ]
    started = time.perf_counter()
    with open(tmp / "plain.jsonl", "w") as handle:
        for row in lines:
            handle.write(row)
        handle.flush()
        os.fsync(handle.fileno())
    plain = time.perf_counter() - started
    root = tmp / "bulk"
    init_vault(root, render_config(default_config_data(mode="journal", time_zone="Europe/Amsterdam")))
    with MemoryStore.open(root, engine=False) as store:
        items = [json.loads(row) for row in lines]
        items = [{"text": item["text"], "at": datetime.fromisoformat(item["at"])} for item in items]
        started = time.perf_counter()
        store.remember_many(items)
        store._semantic.drain(600)  # vectors included
        seconds = time.perf_counter() - started
    print(
        f"bulk import of {count} memories (Journal, builtin embeddings): {count / seconds:,.0f} memories/s "
        f"({seconds:.2f} s); baseline plain fsynced append: {count / plain:,.0f} lines/s ({plain * 1000:.1f} ms)"
    )


def bench_checkout(tmp: Path) -> None:
    root = make_vault(tmp / "checkout", 1000, per_day=1, mode="journal")
    source = root / "daily"
    stash = tmp / "stash"
    shutil.move(str(source), stash)
    source.mkdir()
    subprocess.run([*MEMVAULT, "--vault", str(root), "rebuild"], env=ENV, capture_output=True, check=True)
    owner = Owner(root)
    try:
        started = time.perf_counter()
        for path in sorted(stash.iterdir()):
            shutil.move(str(path), source / path.name)
        degraded_seen = 0
        while True:
            done = subprocess.run(
                [*MEMVAULT, "--vault", str(root), "health", "--strict", "--json"],
                capture_output=True,
                text=True,
                env=ENV,
            )
            rows = json.loads(done.stdout)["details"].get("rows")
            if done.returncode == 0 and rows == 1000:
                break
            found = subprocess.run(
                [*MEMVAULT, "--vault", str(root), "search", "staging cluster", "--json"],
                capture_output=True,
                text=True,
                env=ENV,
            )
            degraded_seen += bool(json.loads(found.stdout).get("degraded"))
        print(
            f"1,000-note checkout under the owner: strict health clean after {time.perf_counter() - started:.2f} s "
            f"(recall said degraded in {degraded_seen} of the checks before that)"
        )
    finally:
        owner.stop()


def bench_resident(tmp: Path, memories: int) -> None:
    root = make_vault(tmp / "resident", memories, mode="journal")
    subprocess.run([*MEMVAULT, "--vault", str(root), "rebuild"], env=ENV, capture_output=True, check=True)
    owner = Owner(root)
    try:
        subprocess.run([*MEMVAULT, "--vault", str(root), "search", "staging cluster"], capture_output=True, env=ENV)
        time.sleep(5)  # the first search's loading is done: then it is idle
        before = owner.cpu_seconds()
        time.sleep(10)
        print(
            f"owner at {memories} Journal memories: resident {owner.rss_mb():.0f} MB; "
            f"idle CPU over 10 s (after a 5 s settle) {owner.cpu_seconds() - before:.3f} s"
        )
    finally:
        owner.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--bulk", type=int, default=10_000)
    parser.add_argument("--resident", type=int, default=100_000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        root = make_vault(tmp / "cli", options.memories, mode="journal")
        subprocess.run([*MEMVAULT, "--vault", str(root), "rebuild"], env=ENV, capture_output=True, check=True)
        print(f"vault: {options.memories} Journal memories")
        subprocess.run([*MEMVAULT, "--help"], env=ENV, cwd=REPO, capture_output=True)  # bytecode written once
        bench_cli(root, options.calls)
        bench_bulk(tmp, options.bulk)
        bench_checkout(tmp)
        if options.resident:
            bench_resident(tmp, options.resident)


if __name__ == "__main__":
    main()
