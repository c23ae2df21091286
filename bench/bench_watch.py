"""Watch and rebuild figures: edit-to-searchable latency, rebuild throughput, one edit's cost.

    python -m bench.bench_watch [--sizes 10000,100000] [--edits 30]

Prints figures; asserts nothing (speed is never a test). Targets (issue 4): p95 from a saved edit
to being searchable ≤ 1 s; 100k memories rebuilt in ≤ 60 s on 2 cores; one edit's incremental
cost flat in vault size. Lite tier (BM25): vectors join the same `apply` and add their own cost.
"""

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from memvault.indexer.engine.store import MemoryStore
from memvault.indexer.maintenance.watch import Watcher
from memvault.vault.config import default_config_data, render_config
from memvault.vault.ids import memory_id
from memvault.vault.init import init_vault
from memvault.vault.note import format_bullet

WORDS = ["otter", "heron", "lynx", "ibis", "release", "deploy", "lunch", "budget", "roadmap", "incident"]


def make_vault(root: Path, memories: int, per_file: int = 100) -> Path:
    init_vault(root, render_config(default_config_data(mode="lite", time_zone="Europe/Amsterdam")))
    for start in range(0, memories, per_file):
        day = start // per_file
        lines = [f"# day {day}\n\n"]
        for n in range(start, min(start + per_file, memories)):
            text = f"{WORDS[n % 10]} {WORDS[n * 7 % 10]} {WORDS[n * 3 % 10]} memory number {n}."
            lines.append(format_bullet(text, memory_id(text), f"{8 + n % 10:02d}:{n % 60:02d}"))
        name = f"{2000 + day // 336:04d}-{day // 28 % 12 + 1:02d}-{day % 28 + 1:02d}.md"
        (root / "daily" / name).write_text("".join(lines))
    return root


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def bench_latency(root: Path, edits: int) -> None:
    """Append a bullet with a fresh word the way an editor saves; time until recall finds it."""
    with MemoryStore.open(root) as store:
        watcher = Watcher(store, compact_after=None)  # the CLI's default debounce (0.2 s)
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        time.sleep(1.0)
        note = sorted((root / "daily").glob("*.md"))[-1]
        latencies = []
        for i in range(edits):
            word = f"zyx{i}q"
            tmp = note.with_name(f".{note.name}.tmp")
            tmp.write_text(note.read_text() + f"- 12:00 The {word} landed.\n")
            saved = time.perf_counter()
            os.replace(tmp, note)
            while not store.recall(word, limit=1).hits:
                time.sleep(0.005)
                if time.perf_counter() - saved > 30:
                    raise SystemExit(f"edit {i} never became searchable")
            latencies.append(time.perf_counter() - saved)
            time.sleep(0.3)
        watcher.stop()
        thread.join(10)
    print(
        f"  edit → searchable ({edits} saves, debounce 0.2 s): median {ms(statistics.median(latencies))}, "
        f"p95 {ms(percentile(latencies, 0.95))}, max {ms(max(latencies))}"
    )


def bench_rebuild(root: Path, size: int) -> None:
    with MemoryStore.open(root, sync=False) as store:
        started = time.perf_counter()
        report = store.rebuild()
        seconds = time.perf_counter() - started
    print(
        f"  rebuild: {report.memories} memories from {report.files} files in {seconds:.1f} s "
        f"({report.memories / seconds:,.0f} memories/s)"
    )


def bench_incremental(root: Path, runs: int = 15) -> None:
    """One edited bullet in one note, applied by `sync([path])` (what a watcher batch does)."""
    with MemoryStore.open(root) as store:
        note = sorted((root / "daily").glob("*.md"))[len(list((root / "daily").glob("*.md"))) // 2]
        relpath = f"daily/{note.name}"
        costs = []
        for i in range(runs):
            lines = note.read_text().splitlines(keepends=True)
            lines[3] = lines[3].replace("memory number", f"memory edit{i} number", 1)
            note.write_text("".join(lines))
            started = time.perf_counter()
            store.sync([relpath])
            costs.append(time.perf_counter() - started)
        started = time.perf_counter()
        scan = store.sync()
        full = time.perf_counter() - started
    print(
        f"  one edit, sync([path]): median {ms(statistics.median(costs))}, p95 {ms(percentile(costs, 0.95))}; "
        f"full stat scan with nothing to do: {ms(full)} ({scan.checked} files read)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--edits", type=int, default=30)
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            root = make_vault(Path(tmp) / "vault", size)
            print(f"{size:,} memories")
            bench_rebuild(root, size)
            bench_incremental(root)
            if size == min(int(s) for s in args.sizes.split(",")):
                bench_latency(root, args.edits)


if __name__ == "__main__":
    main()
